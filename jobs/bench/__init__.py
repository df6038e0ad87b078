"""Benchmarks: ``memstack bench NAME [--quick] --json``.

Each benchmark is a module ``memstack.jobs.bench.NAME`` with a function
``run(quick: bool, report: Report) -> Result``. Progress goes to stderr in human form; the last
line on stdout is one JSON object: ``{"name", "ratio", "figures", "plots"}``.
"""
