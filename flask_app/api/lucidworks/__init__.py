"""Lucidworks AI Prediction API: the RAG use case (sync, batch, streamed,
async), conversation memory, the standalone query rewriter, embeddings and
tokenization (spec: lucidworks-rag.md)."""
