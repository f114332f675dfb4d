"""The embedding and tokenization use cases: vectors from the server's
embedder, optionally cut to `dimReductionSize` dimensions and quantized
(`max-scale` → int8, `min-max` → uint8) by simcore (spec §8)."""

from __future__ import annotations

from typing import Any

from flask_app import rag, simcore
from flask_app.api.http.json_body import BadRequest
from flask_app.api.lucidworks.models import MATRYOSHKA_MODELS
from flask_app.api.lucidworks.schemas import TextRequest
from flask_app.inference.embed import Embedder


def _embedder(embedder: Embedder | None) -> Embedder:
    if embedder is None:
        raise rag.RagError(
            "the server was started with --no-embedder: embeddings are not available"
        )
    return embedder


def embed(embedder: Embedder | None, request: TextRequest) -> dict[str, Any]:
    model = _embedder(embedder)
    config = request.modelConfig
    size = config.dimReductionSize
    if size is not None and not 1 <= size <= model.dim:
        raise BadRequest(
            f"modelConfig.dimReductionSize is out of range (1..{model.dim} for {model.model_id})"
        )
    texts = [item.text for item in request.batch]
    vectors = model.embed(texts, [f"batch[{i}].text" for i in range(len(texts))])
    warning = None
    if size is not None and size < model.dim and model.model_id not in MATRYOSHKA_MODELS:
        warning = (
            f"{model.model_id} was not trained for dimension reduction; the first {size} of "
            f"{model.dim} dimensions keep only part of its accuracy"
        )
    predictions = []
    for text, row in zip(texts, vectors, strict=True):
        vector = simcore.reduce_dims(row, size) if size is not None and size < model.dim else row
        kind = "FLOAT"
        values: list[Any]
        if config.vectorQuantizationMethod == "max-scale":
            values, kind = simcore.quantize_max_scale(vector).tolist(), "INT8"
        elif config.vectorQuantizationMethod == "min-max":
            values, kind = simcore.quantize_min_max(vector).tolist(), "UINT8"
        else:
            values = [float(v) for v in vector]
        prediction: dict[str, Any] = {
            "tokensUsed": {"inputTokens": model.count_tokens(text)},
            "vector": values,
            "vectorType": kind,
        }
        if warning:
            prediction["warning"] = warning
        predictions.append(prediction)
    return {"predictions": predictions}


def tokenize(embedder: Embedder | None, request: TextRequest) -> dict[str, Any]:
    model = _embedder(embedder)
    predictions = []
    for item in request.batch:
        tokens = model.tokens(item.text)
        predictions.append({"tokens": tokens, "tokensUsed": {"inputTokens": len(tokens)}})
    return {"predictions": predictions}
