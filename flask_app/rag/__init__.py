"""The one RAG pipeline every surface calls (see `pipeline`)."""

from flask_app.rag.pipeline import (
    ContextOverflow,
    LLMNotConfigured,
    Prompt,
    QueryError,
    Question,
    RagError,
    Source,
    answer_precheck,
    build_messages,
    build_prompt,
    clean_stream,
    cut_to_tokens,
    fit_passages,
    open_stream,
    query_vector,
    retrieve,
)

__all__ = [
    "ContextOverflow",
    "LLMNotConfigured",
    "Prompt",
    "QueryError",
    "Question",
    "RagError",
    "Source",
    "answer_precheck",
    "build_messages",
    "build_prompt",
    "clean_stream",
    "cut_to_tokens",
    "fit_passages",
    "open_stream",
    "query_vector",
    "retrieve",
]
