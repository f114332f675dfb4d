"""moorcheh-edge HTTP surface (spec: shared/spec/moorcheh-edge.md).

Thin adapter: parse and validate, call the store, shape the response.
Extensions beyond moorcheh-edge: text queries and text-only uploads (the
server embeds), per-item metadata and a metadata filter on /search, /export
pagination and opt-in vectors, `execution_time` on /search, no item cap.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import numpy.typing as npt
from flask import Blueprint, current_app, jsonify, request
from flask.blueprints import BlueprintSetupState
from flask.typing import ResponseReturnValue

from flask_app import rag, simcore
from flask_app.api.http.extensions import gate_of, records_of, services_of, settings_of
from flask_app.api.http.json_body import (
    BadRequest,
    MalformedJSON,
    json_bytes,
    json_object,
    parse_object,
    validate,
)
from flask_app.api.http.openapi import operation
from flask_app.api.http.vectors import check_matrix, matrix
from flask_app.api.moorcheh import bulk, scores
from flask_app.api.moorcheh.schemas import (
    Cleared,
    Deleted,
    DeleteItems,
    Export,
    Health,
    LegacyUpload,
    MoorchehError,
    Search,
    SearchResults,
    Upload,
    Uploaded,
    UploadItem,
)
from flask_app.rag.score_mapping import cosine_floor
from flask_app.services import Services
from flask_app.store import CollectionInfo, CollectionUnavailable
from flask_app.store.protocols import VectorCollection

blueprint = Blueprint("moorcheh", __name__)
TAG = "moorcheh-edge"
Vector = npt.NDArray[np.float32]

MIN_DIM, MAX_DIM = 128, 4096
TOP_K_MAX, TOP_K_REJECT = 100, 10_000


@blueprint.record_once
def _take_multipart_uploads(state: BlueprintSetupState) -> None:
    state.app.config.setdefault("EDGERAG_BODY_TYPES", []).append(
        ("POST", "/upload", (bulk.MULTIPART,))
    )


def _services() -> Services:
    return services_of(current_app)


def _max_items() -> int | None:
    return settings_of(current_app).item_cap()


def _edge() -> VectorCollection:
    return _services().store.edge()


@blueprint.get("/health")
@operation(summary="Server, store and model status", tag=TAG, response=Health, error=MoorchehError)
def health() -> ResponseReturnValue:
    services = _services()
    try:
        info: CollectionInfo | None = services.store.edge().info()
    except CollectionUnavailable:
        info = None  # listed under "unavailable"; /health itself keeps answering
    unavailable = {**services.store.failures(), **records_of(current_app).failures()}
    cap = _max_items()
    llm: dict[str, Any] | None = None
    if services.llm is not None:
        llm = {
            "id": services.llm.model_id,
            "preset": services.llm.preset,
            "n_ctx": services.llm.n_ctx,
            "busy": services.llm.slots.busy,
            "waiting": services.llm.slots.waiting,
            "max_waiting": services.llm.slots.max_waiters,
            "sequences": services.llm.slots.capacity,
            "replicas": services.llm.slots.replicas,
            "generating": services.llm.slots.holders,
            "answer_gate": gate_of(current_app),
        }
    embedder: dict[str, Any] | None = None
    if services.embedder is not None:
        embedder = {
            "id": services.embedder.model_id,
            "dimension": services.embedder.dim,
            "max_tokens": services.embedder.max_tokens,
        }
    items = info.items if info else 0
    body: dict[str, Any] = {
        "status": "degraded" if unavailable else "ok",
        "dimension": info.dimension if info else None,
        "store_mode": info.mode if info else None,
        "store_index": info.index if info else None,
        "embedding_model": info.embedding_model if info else None,
        "items": items,
        "max_items": cap,
        "remaining": None if cap is None else max(0, cap - items),
        "llm": llm,
        "embedder": embedder,
    }
    if unavailable:
        body["unavailable"] = unavailable
    return jsonify(body)


def _embed_items(items: list[UploadItem], model: str | None) -> tuple[Vector, str]:
    embedder = _services().embedder
    if embedder is None:
        raise BadRequest(
            "items have no vectors and the server has no embedding model "
            "(start it without --no-embedder, or send vectors)"
        )
    if model not in (None, embedder.model_id):
        raise BadRequest(
            f"embedding_model {model!r} is not the server's embedder "
            f"({embedder.model_id}); send vectors, or omit embedding_model"
        )
    texts = [item.content() for item in items]
    missing = [i for i, t in enumerate(texts) if not t.strip()]
    if missing:
        raise BadRequest(f"items[{missing[0]}].text is required when no vector is sent")
    return embedder.embed(texts, ids=[item.id for item in items]), embedder.model_id


def _take_vectors(body: dict[str, Any], field: str) -> list[Any] | None:
    """Remove the items' vectors from the raw body: they are converted in one
    strict pass by simcore rather than element by element by the schema.
    None when no item carries one."""
    items = body.get(field)
    if not isinstance(items, list):
        return None
    vectors = [item.pop("vector", None) if isinstance(item, dict) else None for item in items]
    return None if all(v is None for v in vectors) else vectors


def _matrix(vectors: list[Any], field: str) -> Vector:
    missing = [i for i, v in enumerate(vectors) if v is None]
    if missing:
        raise BadRequest(f"{field}[{missing[0]}]: either every item carries a vector or none does")
    rows = matrix(vectors, f"{field}[{{}}].vector")
    return check_matrix(rows, lambda i: f"{field}[{i}].vector", MIN_DIM, MAX_DIM)


def _upload(
    items: list[UploadItem], vectors: Vector | None, mode: str, model: str | None, field: str
) -> ResponseReturnValue:
    ids = [item.id for item in items]
    seen: set[str] = set()
    for i, item_id in enumerate(ids):
        if item_id in seen:
            raise BadRequest(f"{field}[{i}].id: duplicate id {item_id!r} in this upload")
        seen.add(item_id)
    if vectors is not None:
        if mode == "text" and any(not item.content().strip() for item in items):
            bad = next(i for i, item in enumerate(items) if not item.content().strip())
            raise BadRequest(f"{field}[{bad}].text is required in text mode")
    elif mode == "vector":
        raise BadRequest(f"{field}[0].vector is required in vector mode")
    else:
        vectors, model = _embed_items(items, model)
    total = _edge().upsert(
        ids,
        vectors,
        [item.content() for item in items],
        [item.metadata for item in items],
        mode=mode,
        embedding_model=model,
        max_items=_max_items(),
    )
    return jsonify(status="success", total=total)


@blueprint.post("/upload")
@operation(
    summary="Upload items (text mode: embedded here; vector mode: with vectors)",
    description="JSON, or multipart/form-data for many vectors at once: a .npy file of "
    "vectors, their ids one per line, optional JSON Lines of text and metadata.",
    tag=TAG,
    body=Upload | LegacyUpload,
    other_bodies=((bulk.MULTIPART, bulk.MULTIPART_SCHEMA),),
    response=Uploaded,
    error=MoorchehError,
)
def upload() -> ResponseReturnValue:
    if request.mimetype == bulk.MULTIPART:
        return _bulk_upload()
    return upload_json(json_bytes(request))


def upload_json(raw: bytes) -> ResponseReturnValue:
    """A JSON upload: simcore parses the vectors, the rest is validated as usual."""
    split = simcore.split_upload(raw)
    if split is None:  # not an upload body simcore splits: the checks below name the fault
        return _upload_parsed(parse_object(raw))
    field, rest, vectors, problem = split
    try:
        body = parse_object(rest)
    except MalformedJSON:  # a malformed value copied to the rest: name its place in the body
        parse_object(raw)
        raise
    if field == "vectors":
        legacy = validate(LegacyUpload, body)
        matrix = _split_matrix(vectors, problem, field)
        return _upload(legacy.vectors, matrix, "vector", None, field)
    parsed = validate(Upload, body)
    matrix = _split_matrix(vectors, problem, field)
    return _upload(parsed.items, matrix, parsed.store_mode, parsed.embedding_model, field)


def _upload_parsed(body: dict[str, Any]) -> ResponseReturnValue:
    """An upload body as Python objects, vectors converted from lists."""
    if "vectors" in body and "items" not in body:
        raw = _take_vectors(body, "vectors")
        legacy = validate(LegacyUpload, body)
        matrix = _matrix(raw, "vectors") if raw is not None else None
        return _upload(legacy.vectors, matrix, "vector", None, "vectors")
    raw = _take_vectors(body, "items")
    parsed = validate(Upload, body)
    matrix = _matrix(raw, "items") if raw is not None else None
    return _upload(parsed.items, matrix, parsed.store_mode, parsed.embedding_model, "items")


def _split_matrix(vectors: Vector | None, problem: str | None, field: str) -> Vector | None:
    """simcore's split vectors, once the rest of the body has validated."""
    if problem is not None:
        raise BadRequest(problem)
    if vectors is None:
        return None
    return check_matrix(vectors, lambda i: f"{field}[{i}].vector", MIN_DIM, MAX_DIM)


def _bulk_upload() -> ResponseReturnValue:
    """Vectors as a .npy file with their ids alongside (`bulk`): vector mode."""
    parsed = bulk.parse(request)
    vectors = check_matrix(parsed.vectors, lambda i: f"vectors[{i}]", MIN_DIM, MAX_DIM)
    total = _edge().upsert(
        parsed.ids,
        vectors,
        parsed.texts,
        parsed.metadata,
        mode="vector",
        embedding_model=None,
        max_items=_max_items(),
    )
    return jsonify(status="success", total=total)


def parse_vector(values: list[Any], field: str) -> Vector:
    """A client-sent query vector (numbers only, float32 range, not all zeros)."""
    vector: Vector = check_matrix(matrix([values], field), lambda _: field, 1, MAX_DIM)[0]
    return vector


def _query_vector(query: list[Any] | str, collection: VectorCollection) -> Vector:
    if isinstance(query, str):
        question = rag.Question(query=query)
    else:
        question = rag.Question(query="", query_vector=parse_vector(query, "query"))
    return rag.query_vector(collection, question, _services().embedder, field="query")


def top_k_value(value: int) -> int:
    """1..100 as moorcheh-edge clamps it; nonsense (< 1 or > 10,000) is rejected."""
    if value < 1 or value > TOP_K_REJECT:
        raise BadRequest(f"top_k must be between 1 and {TOP_K_MAX} (got {value})")
    return min(value, TOP_K_MAX)


def kiosk_floor(kiosk_mode: bool, threshold: float | None) -> float | None:
    """The cosine below which kiosk mode drops a passage (its 0-1 `threshold`
    through the server's score mapping); None without kiosk mode."""
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise BadRequest(f"threshold must be between 0 and 1 (got {threshold})")
    if kiosk_mode and threshold is None:
        raise BadRequest("threshold is required when kiosk_mode is true")
    if not kiosk_mode or threshold is None:
        return None
    return cosine_floor(threshold, settings_of(current_app).score_mapping)


@blueprint.post("/search")
@operation(
    summary="Top-k items for a query vector or text",
    tag=TAG,
    body=Search,
    response=SearchResults,
    error=MoorchehError,
)
def search() -> ResponseReturnValue:
    started = time.perf_counter()
    parsed = validate(Search, json_object(request))
    k = top_k_value(parsed.top_k)
    floor = kiosk_floor(parsed.kiosk_mode, parsed.threshold)
    collection = _edge()
    if collection.info().dimension is None:
        if not isinstance(parsed.query, str):
            parse_vector(parsed.query, "query")  # a bad vector is a 400 on an empty store too
        return jsonify(results=[], execution_time=round(time.perf_counter() - started, 6))
    vector = _query_vector(parsed.query, collection)
    question = rag.Question(query="", top_k=k, min_cosine=floor, metadata=parsed.metadata)
    hits = rag.retrieve(collection, vector, question)
    mapping = settings_of(current_app).score_mapping
    return jsonify(
        results=[scores.result(h, mapping) for h in hits],
        execution_time=round(time.perf_counter() - started, 6),
    )


def _delete() -> ResponseReturnValue:
    parsed = validate(DeleteItems, json_object(request))
    deleted, missing = _edge().delete(parsed.ids)
    return jsonify(status="success", deleted=deleted, not_found_ids=missing)


@blueprint.delete("/items")
@operation(
    summary="Delete items by id", tag=TAG, body=DeleteItems, response=Deleted, error=MoorchehError
)
def delete_items() -> ResponseReturnValue:
    return _delete()


@blueprint.delete("/delete")
@operation(
    summary="Delete items by id (0.1.x path)",
    tag=TAG,
    body=DeleteItems,
    response=Deleted,
    error=MoorchehError,
)
def delete_legacy() -> ResponseReturnValue:
    return _delete()


@blueprint.delete("/store")
@operation(summary="Remove every item", tag=TAG, response=Cleared, error=MoorchehError)
def clear_store() -> ResponseReturnValue:
    store = _services().store
    store.drop(store.EDGE_NAMESPACE, store.EDGE_COLLECTION)
    return jsonify(status="success", message="Store cleared successfully.")


@blueprint.get("/export")
@operation(
    summary="Every item, optionally paged and with vectors",
    tag=TAG,
    response=Export,
    error=MoorchehError,
    query=(
        (
            "limit",
            "page size 1..10000 (then next_cursor is set)",
            {"type": "integer", "minimum": 1, "maximum": 10_000},
        ),
        ("cursor", "next_cursor of the previous page", {"type": "string"}),
        ("include_vectors", "true or false", {"type": "boolean"}),
    ),
)
def export() -> ResponseReturnValue:
    args = request.args
    limit: int | None = None
    if "limit" in args:
        try:
            limit = int(args["limit"])
        except ValueError:
            raise BadRequest(f"limit must be an integer (got {args['limit']!r})") from None
        if not 1 <= limit <= 10_000:
            raise BadRequest(f"limit must be between 1 and 10000 (got {limit})")
    include = args.get("include_vectors", "false").lower()
    if include not in ("true", "false", "1", "0"):
        raise BadRequest("include_vectors must be true or false")
    collection = _edge()
    info = collection.info()
    items, cursor = collection.export(
        limit=limit, after=args.get("cursor"), with_vectors=include in ("true", "1")
    )
    body: dict[str, Any] = {
        "status": "ok",
        "dimension": info.dimension,
        "store_mode": info.mode,
        "embedding_model": info.embedding_model,
        "item_count": info.items,
        "items": items,
    }
    if limit is not None:
        body["next_cursor"] = cursor
    return jsonify(body)
