"""The foundation every layer stands on: settings, the error root, events' builders and their
log encoding, per-scope keys and sealing (crypto-shredding), and client spans.

It imports only :mod:`memstack.schemas` and third-party libraries that the light client
installs, never an engine, a store or the facade (``tests/test_import_graph.py``).
"""
