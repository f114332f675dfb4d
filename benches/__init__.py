"""Benchmarks and load runs (see the README for each command)."""
