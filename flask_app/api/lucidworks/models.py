"""Model ids: the documented Lucidworks ids are aliases of the local models."""

from __future__ import annotations

from flask_app.api.lucidworks.errors import NotFound

# Lucidworks-hosted and third-party generative model ids (spec §6), all served
# by the one local LLM.
CHAT_ALIASES = frozenset(
    {
        "llama-3-8b-instruct",
        "llama-3v2-3b-instruct",
        "mistral-7b-instruct",
        "mistral",
        "gpt-4",
        "gpt-4o",
        "gpt-4o-2024-05-13",
        "gpt-4-0613",
        "gpt-4-turbo",
        "gpt-4-turbo-2024-04-09",
        "gpt-4-turbo-preview",
        "gpt-4-1106-preview",
        "gpt-3.5-turbo",
        "gpt-3.5-turbo-1106",
        "gpt-3.5-turbo-0125",
    }
)

# Documented embedding model ids, served by the local embedder (whose
# dimension the response shows: 384 for the default model).
EMBEDDING_ALIASES = frozenset({"e5-small-v2", "multilingual-e5-base"})

# Embedding models trained for Matryoshka truncation (dimReductionSize keeps
# their quality); others truncate with a warning.
MATRYOSHKA_MODELS: frozenset[str] = frozenset()


def check_chat(model_id: str, local: str | None) -> None:
    if model_id not in CHAT_ALIASES and model_id != local:
        raise NotFound(f"Unknown model: {model_id}")


def check_embedding(model_id: str, local: str | None) -> None:
    if model_id not in EMBEDDING_ALIASES and model_id != local:
        raise NotFound(f"Unknown model: {model_id}")
