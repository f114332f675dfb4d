"""`benches/prompt_cost.py` splits a grounded prompt into parts that add up to
the whole, with each evidence block's best unit apart from its neighbours."""

from __future__ import annotations

from collections.abc import Sequence

from benches.prompt_cost import prompt_parts
from flask_app.inference.llm import ChatMessage
from flask_app.rag import evidence
from flask_app.rag.answer import Grounding
from flask_app.rag.pipeline import Prompt

PASSAGE = (
    "Riverside pool.\n\n"
    "The pool is run by the town's leisure department and was rebuilt in 2019.\n\n"
    "On Saturdays and Sundays the pool opens at 9 am and closes at 6 pm.\n\n"
    "Children under eight must be with an adult in the water at all times.\n\n"
    "Lockers take a one euro coin, which is returned when the locker is opened."
)
QUESTION = "What time does the pool open on Saturday?"


def words(text: str) -> int:
    return len(text.split())


def render(messages: Sequence[ChatMessage]) -> str:
    return "\n".join(m["content"] for m in messages)


def test_parts_add_up_and_the_best_unit_is_counted_apart() -> None:
    selection = evidence.select(QUESTION, [PASSAGE], evidence.Scoring(units_wanted=1))
    pieces = selection.pieces
    assert len(pieces) == 1
    piece = pieces[0]
    best = PASSAGE[piece.focus_start : piece.focus_end]
    assert "opens at 9 am" in best and piece.text != best  # a neighbour is shown too
    system = "Answer from the documents in one short sentence."
    user = f"Document 1:\n{piece.text}\n\nQuestion: {QUESTION}"
    messages: list[ChatMessage] = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]
    grounding = Grounding(
        sources=[],
        pieces=pieces,
        best=selection.best,
        evidence_score=1.0,
        prompt=Prompt(messages, [], 0),
    )
    parts = prompt_parts(words, render, grounding, QUESTION)
    assert parts["system"] == words(system)
    assert parts["units"] == words(best)
    assert parts["neighbours"] == words(piece.text) - words(best) > 0
    assert parts["question"] == words(QUESTION) + 1  # "Question:"
    assert parts["rest"] == 2  # "Document 1:"
    assert (
        sum(parts[k] for k in ("system", "units", "neighbours", "question", "rest"))
        == (parts["whole"])
    )
