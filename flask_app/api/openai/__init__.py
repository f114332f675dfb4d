"""OpenAI-compatible API under /v1: models, chat completions (plain and
streamed) and embeddings, on the same LLM queue and embedder."""
