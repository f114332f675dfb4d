"""Evidence units' vectors remembered across questions: the same vectors as
embedding them again, each text embedded once while remembered, a bounded
map, one map per embedder, and two answers about the same passage embedding
its units once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from flask_app.app import create_app
from flask_app.inference.embed import Vectors
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.rag import unit_vectors
from flask_app.rag.unit_vectors import UnitVectors
from flask_app.services import assemble
from flask_app.settings import Settings
from flask_app.store import Store


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.embedded: list[str] = []

    def embed(self, texts: Sequence[str], ids: Sequence[str] | None = None) -> Vectors:
        self.embedded += texts
        return super().embed(texts, ids)


def test_remembered_vectors_are_the_embedders_and_each_text_is_embedded_once() -> None:
    embedder, cache = CountingEmbedder(), UnitVectors()
    texts = ["The pool opens at 7.", "Lockers take a coin.", "The pool opens at 7."]
    first = cache.embed(embedder, texts)
    assert np.array_equal(first, HashEmbedder().embed(texts))  # order and repeats kept
    assert embedder.embedded == ["The pool opens at 7.", "Lockers take a coin."]
    again = cache.embed(embedder, ["Lockers take a coin.", "Towels are for hire."])
    assert embedder.embedded[2:] == ["Towels are for hire."]
    assert np.array_equal(
        again, HashEmbedder().embed(["Lockers take a coin.", "Towels are for hire."])
    )
    assert cache.embed(embedder, []).shape == (0, embedder.dim)


def test_a_remembered_vector_does_not_hold_its_batchs_array() -> None:
    cache = UnitVectors()
    cache.embed(HashEmbedder(), ["first unit", "second unit"])
    assert all(row.base is None for row in cache._rows.values())


def test_the_least_recently_used_text_is_forgotten_first() -> None:
    embedder, cache = CountingEmbedder(), UnitVectors(capacity=2)
    cache.embed(embedder, ["a one", "b two"])
    cache.embed(embedder, ["a one"])  # "a one" is now the most recent
    cache.embed(embedder, ["c three"])  # forgets "b two"
    assert len(cache) == 2
    embedder.embedded.clear()
    cache.embed(embedder, ["a one", "c three", "b two"])
    assert embedder.embedded == ["b two"]


def test_each_embedder_has_its_own_map() -> None:
    one, other = HashEmbedder(dim=8), HashEmbedder(dim=16)
    assert unit_vectors.of(one) is unit_vectors.of(one)
    assert unit_vectors.of(one) is not unit_vectors.of(other)
    assert unit_vectors.embed(other, ["same text"]).shape == (1, 16)
    assert unit_vectors.embed(one, ["same text"]).shape == (1, 8)


def test_two_answers_about_the_same_passage_embed_its_units_once(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    settings = Settings.load({"data_dir": tmp_path / "data", "answer_min_score": 0}, {})
    llm = LLM(ScriptedBackend("At 7."), max_waiters=1, timeout=30)
    services = assemble(settings, store=Store(settings.data_dir), llm=llm, embedder=embedder)
    client = create_app(settings, services).test_client()
    text = "The pool opens at 7:00 on weekdays. Lockers take a £1 coin, returned after."
    items = [{"id": "pool", "text": text}]
    assert client.post("/upload", json={"store_mode": "text", "items": items}).status_code == 200
    embedder.embedded.clear()
    for question in ("When does the pool open?", "When can I swim?"):
        assert client.post("/answer", json={"query": question}).status_code == 200
    units = [
        t for t in embedder.embedded if t not in ("When does the pool open?", "When can I swim?")
    ]
    assert units and len(units) == len(set(units))  # the second answer embedded none again
    services.store.close()
