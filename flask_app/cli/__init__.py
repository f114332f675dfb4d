"""The `edgerag` command line: `serve`, `pull` and the client verbs."""
