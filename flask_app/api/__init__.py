"""HTTP surfaces: one module per API, each a thin adapter over the core."""
