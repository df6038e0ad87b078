"""Evaluations: ``memstack eval NAME [--quick] --json``, same interface as benchmarks."""
