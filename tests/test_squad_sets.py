"""benches/quality/squad.py's sets on a made-up article: what a store holds
decides which questions are answerable, and a small store holds two
paragraphs drawn apart from the long store's."""

from __future__ import annotations

from typing import Any

from benches.quality import squad


def article(paragraphs: int) -> dict[str, Any]:
    return {
        "title": "Made_up",
        "paragraphs": [
            {
                "context": f"Paragraph {i} says the keeper of record {i} is Person{i}.",
                "qas": [
                    {
                        "id": f"q{i}",
                        "question": f"Who keeps the record number {i} today?",
                        "answers": [{"text": f"Person{i}", "answer_start": 0}],
                    }
                ],
            }
            for i in range(paragraphs)
        ],
    }


def stored(built: squad.ArticleSet) -> set[str]:
    return {d["id"] for d in built.documents}


def test_a_small_store_holds_two_paragraphs_and_their_questions_alone_are_answerable() -> None:
    small = squad.article_set(article(12), small=True)
    assert len(small.documents) == squad.SMALL_STORED
    answerable = {q["source"] for q in small.questions if q["expect"] is not None}
    assert answerable == stored(small)
    unanswerable = [q for q in small.questions if q["expect"] is None]
    assert len(unanswerable) == min(squad.UNANSWERABLE, 12 - squad.SMALL_STORED)
    text = squad.normalize_answer(" ".join(d["text"] for d in small.documents))
    assert not any(squad.occurs(g, text) for q in unanswerable for g in q["gold"])
    assert all(f"Person{q['source'][1:]}" in q["expect"] for q in small.questions if q["expect"])


def test_the_long_store_is_unchanged_by_the_small_one_and_both_are_seeded() -> None:
    long = squad.article_set(article(12))
    assert len(long.documents) == 6  # half the paragraphs
    assert squad.article_set(article(12)) == long
    assert squad.article_set(article(12), small=True) == squad.article_set(article(12), True)
    assert long.split == squad.article_set(article(12), small=True).split
