"""Benchmarks and load runs (docs/performance.md and docs/answer-quality.md give each command)."""
