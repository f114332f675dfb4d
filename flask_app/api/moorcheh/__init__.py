"""The moorcheh-edge surface (shared/spec/moorcheh-edge.md): data API and RAG answers."""
