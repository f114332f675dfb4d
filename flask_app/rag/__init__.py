"""The one RAG pipeline every surface calls (see `pipeline`)."""

from flask_app.rag.pipeline import (
    ContextOverflow,
    LLMNotConfigured,
    Prompt,
    QueryError,
    Question,
    RagError,
    build_messages,
    build_prompt,
    clean_stream,
    cut_to_tokens,
    fit_passages,
    query_vector,
    recent_history,
    retrieve,
)

__all__ = [
    "ContextOverflow",
    "LLMNotConfigured",
    "Prompt",
    "QueryError",
    "Question",
    "RagError",
    "build_messages",
    "build_prompt",
    "clean_stream",
    "cut_to_tokens",
    "fit_passages",
    "query_vector",
    "recent_history",
    "retrieve",
]
