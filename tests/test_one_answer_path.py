"""Every surface's answer routes, plain and streamed, take the one answer
path (`rag.answer.answer`): patched, it sees each of their requests."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from flask_app.rag import answer as rag_answer
from tests.test_error_walk_streams import app, streamed  # noqa: F401  (the fixture)

QUESTION = "Where is the spare key?"
PLAIN: dict[str, tuple[str, dict[str, Any]]] = {
    "moorcheh": ("/answer", {"query": QUESTION}),
    "lucidworks": (
        "/ai/prediction/rag/llama-3-8b-instruct",
        {
            "batch": [
                {"text": QUESTION, "documents": [{"body": "The key is next door.", "source": "n"}]}
            ]
        },
    ),
    "engine": ("/namespaces/home/collections/notes:answer", {"query": QUESTION}),
    "openai": (
        "/v1/chat/completions",
        {
            "model": "m",
            "messages": [{"role": "user", "content": QUESTION}],
            "rag": {"collection": "home/notes"},
        },
    ),
}


@pytest.mark.parametrize("surface", list(PLAIN))
def test_each_surface_answers_through_the_one_path(
    app: Flask,  # noqa: F811
    surface: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    real = rag_answer.answer

    def counted(*args: Any, **kwargs: Any) -> rag_answer.AnswerStream:
        calls.append(args[2].query)
        return real(*args, **kwargs)

    monkeypatch.setattr(rag_answer, "answer", counted)
    client = app.test_client()
    path, body = PLAIN[surface]
    assert client.post(path, json=body).status_code == 200
    assert calls == [QUESTION]
    events = streamed(client, surface)
    assert events and calls == [QUESTION, QUESTION]
