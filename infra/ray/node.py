"""``python -m memstack.infra.ray.node ARGS``: ``ray start ARGS``, kept on loopback.

Ray 2.60 replaces a loopback address (``--node-ip-address=127.0.0.1``, ``--address=127.0.0.1:P``)
by the host's external address whenever multi-node clusters are enabled, and a worker node
refuses to start when they are not. This entry point keeps addresses as given (the one function
that rewrites them, ``ray._private.services.resolve_ip_for_localhost``) and then runs Ray's own
``ray start`` command, so every node of a local cluster binds and dials 127.0.0.1 only.
"""

from __future__ import annotations

import sys


def _as_given(host: str) -> str:
    return host


def main(argv: list[str]) -> None:
    from ray._private import services

    services.resolve_ip_for_localhost = _as_given
    from ray.scripts.scripts import cli

    cli.main(args=["start", *argv], prog_name="ray")


if __name__ == "__main__":
    main(sys.argv[1:])
