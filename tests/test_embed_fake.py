from __future__ import annotations

import numpy as np
import pytest

from flask_app.inference.embed import EmbeddingError, TextTooLong
from flask_app.inference.fakes import HashEmbedder


def test_rows_are_unit_length_and_deterministic() -> None:
    e = HashEmbedder(dim=64)
    a = e.embed(["red apples", "green pears"])
    b = HashEmbedder(dim=64).embed(["red apples", "green pears"])
    assert a.shape == (2, 64) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(a, b)


def test_shared_words_mean_similarity() -> None:
    v = HashEmbedder().embed(["the red apple", "a red apple pie", "quantum chromodynamics"])
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3


def test_too_long_names_the_id_and_count() -> None:
    e = HashEmbedder(max_tokens=5)
    with pytest.raises(TextTooLong, match=r'"doc-7" has 8 tokens \(max 5 for hash-fake-384\)'):
        e.embed(["short", "one two three four five six"], ids=["doc-1", "doc-7"])


def test_too_long_without_ids_quotes_the_text() -> None:
    e = HashEmbedder(max_tokens=3)
    with pytest.raises(TextTooLong, match=r"text 0 \('alpha beta gamma'\) has 5 tokens"):
        e.embed(["alpha beta gamma"])


def test_empty_text_is_rejected() -> None:
    with pytest.raises(EmbeddingError, match="is empty"):
        HashEmbedder().embed(["ok", "   "])
