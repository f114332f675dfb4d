"""Plumbing every HTTP surface shares: JSON bodies, SSE, per-app state, vector checks."""
