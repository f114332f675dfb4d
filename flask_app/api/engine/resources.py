"""Namespaces, collections and files (spec §7): thin routes over the catalog;
uploads are answered 202 and ingested by the worker."""

from __future__ import annotations

import base64
import re
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from flask_app.api.engine.errors import EngineError, invalid, not_found
from flask_app.api.engine.filters import filter_condition
from flask_app.api.engine.requests import check_name, is_base64, principals_of
from flask_app.api.engine.schemas import (
    CollectionBody,
    CollectionRequest,
    Collections,
    EngineErrorBody,
    FileBody,
    Files,
    FileUpload,
    Namespace,
    Namespaces,
)
from flask_app.api.http.auth import may_use_namespace, require_namespace
from flask_app.api.http.extensions import collections_of
from flask_app.api.http.json_body import json_object
from flask_app.api.http.openapi import operation
from flask_app.api.http.request_ids import request_id
from flask_app.file_collections.names import PRINCIPAL_PATTERN
from flask_app.index_kinds import INDEX_KINDS
from flask_app.ingest.extract import BINARY_TYPES, CONTENT_TYPES
from flask_app.store.catalog import (
    CollectionRecord,
    FileRecord,
    NamespaceRecord,
    NotEmpty,
    rfc3339,
)
from flask_app.store.file_query import readable_by

blueprint = Blueprint("engine_resources", __name__)
TAG = "engine"
# OpenAPI links: where the created thing's names are found
COLLECTION_OF_BODY = {"ns": "$response.body#/namespace", "name": "$response.body#/name"}
FILE_OF_BODY = {
    "ns": "$request.path.ns",
    "name": "$request.path.name",
    "file_id": "$response.body#/file_id",
}

MAX_PAGE = 100
MAX_NAMESPACES = 1000
# padded URL-safe base64, as `_token` writes it
TOKEN_PATTERN = re.compile(r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2}==|[A-Za-z0-9_-]{3}=)?$")
DEFAULT_PAGE = 50
PAGING: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "page_size",
        f"1..{MAX_PAGE}, default {DEFAULT_PAGE}",
        {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
    ),
    (
        "page_token",
        "next_page_token of the previous page",
        {"type": "string", "pattern": TOKEN_PATTERN.pattern},
    ),
)
MAX_METADATA_KEYS = 64
_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _namespace_json(record: NamespaceRecord) -> dict[str, Any]:
    return {"name": record.name, "created_at": rfc3339(record.created_at)}


def collection_json(record: CollectionRecord) -> dict[str, Any]:
    return {
        "index": collections_of(current_app).index_kind(record),
        "namespace": record.namespace,
        "name": record.name,
        "description": record.description,
        "access_control": record.access_control,
        "status": record.status,
        "file_count": record.file_count,
        "ready_file_count": record.ready_file_count,
        "processing_file_count": record.processing_file_count,
        "failed_file_count": record.failed_file_count,
        "created_at": rfc3339(record.created_at),
        "updated_at": rfc3339(record.updated_at),
    }


def file_json(record: FileRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "file_id": record.file_id,
        "path": record.path,
        "content_type": record.content_type,
        "size_bytes": record.size_bytes,
        "char_count": record.char_count,
        "metadata": record.metadata,
        "principals": record.principals,
        "status": record.status,
        "created_at": rfc3339(record.created_at),
        "sha256": record.sha256,
        "chunk_count": record.chunks_total,
    }
    if record.status == "processing":
        out["progress"] = {"chunks_done": record.chunks_done, "chunks_total": record.chunks_total}
    if record.error:
        out["error"] = record.error
    return out


def _ok(body: dict[str, Any], status: int = 200) -> tuple[Response, int]:
    return jsonify({"request_id": request_id(), **body}), status


def _page() -> tuple[int, str | None]:
    raw = request.args.get("page_size", str(DEFAULT_PAGE))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise invalid(f"page_size must be between 1 and {MAX_PAGE}.", "page_size")
    token = request.args.get("page_token") or None
    if token is None:
        return int(raw), None
    if not TOKEN_PATTERN.fullmatch(token):
        raise invalid("page_token is not valid.", "page_token")
    # any well-formed token is a position: list what sorts after it
    return int(raw), base64.urlsafe_b64decode(token).decode(errors="replace")


def _token(last: str | None) -> str | None:
    return base64.urlsafe_b64encode(last.encode()).decode() if last else None


def namespace_or_404(ns: str) -> NamespaceRecord:
    check_name("namespace", ns)
    require_namespace(ns)
    record = collections_of(current_app).catalog.namespace(ns)
    if record is None:
        raise not_found(f"namespace {ns}")
    return record


def collection_or_404(ns: str, name: str) -> CollectionRecord:
    namespace_or_404(ns)
    check_name("collection", name)
    record = collections_of(current_app).catalog.collection(ns, name)
    if record is None:
        raise not_found(f"collection {ns}/{name}")
    return record


def _optional_json() -> dict[str, Any]:
    if not request.get_data(cache=True).strip():
        return {}
    return json_object(request)


@blueprint.get("/namespaces")
@operation(
    summary="The namespaces this key may use (an edgerag extension; at most 1,000)",
    tag=TAG,
    response=Namespaces,
    error=EngineErrorBody,
)
def list_namespaces() -> ResponseReturnValue:
    records = collections_of(current_app).catalog.namespaces(MAX_NAMESPACES)
    return _ok({"namespaces": [_namespace_json(r) for r in records if may_use_namespace(r.name)]})


@blueprint.put("/namespaces/<ns>")
@operation(
    summary="Create a namespace (200 if it exists)",
    tag=TAG,
    response=Namespace,
    status=201,
    also=(200,),
    links=(
        ("namespace", "engine_resources.get_namespace.get", {"ns": "$response.body#/name"}),
        ("collections", "engine_resources.list_collections.get", {"ns": "$response.body#/name"}),
        ("put_collection", "engine_resources.put_collection.put", {"ns": "$response.body#/name"}),
    ),
    error=EngineErrorBody,
)
def put_namespace(ns: str) -> ResponseReturnValue:
    check_name("namespace", ns)
    require_namespace(ns)
    body = _optional_json()
    if body:
        raise invalid(f"Unknown field: {next(iter(body))}", next(iter(body)))
    record, created = collections_of(current_app).catalog.put_namespace(ns)
    return _ok(_namespace_json(record), 201 if created else 200)


@blueprint.get("/namespaces/<ns>")
@operation(summary="A namespace", tag=TAG, response=Namespace, error=EngineErrorBody)
def get_namespace(ns: str) -> ResponseReturnValue:
    return _ok(_namespace_json(namespace_or_404(ns)))


@blueprint.delete("/namespaces/<ns>")
@operation(summary="Delete an empty namespace", tag=TAG, status=204, error=EngineErrorBody)
def delete_namespace(ns: str) -> ResponseReturnValue:
    namespace_or_404(ns)
    try:
        collections_of(current_app).catalog.delete_namespace(ns)
    except NotEmpty:
        raise EngineError(
            409, "namespace_not_empty", "The namespace still contains collections."
        ) from None
    return Response(status=204, headers={"X-Request-Id": request_id()})


@blueprint.put("/namespaces/<ns>/collections/<name>")
@operation(
    summary="Create or update a collection",
    tag=TAG,
    body=CollectionRequest,
    response=CollectionBody,
    status=201,
    also=(200,),
    links=tuple(
        (link, target, COLLECTION_OF_BODY)
        for link, target in (
            ("collection", "engine_resources.get_collection.get"),
            ("upload_file", "engine_resources.upload_file.post"),
            ("files", "engine_resources.list_files.get"),
            ("answer", "engine_answer.collection_method.post.answer"),
            ("read_spans", "engine_answer.collection_method.post.readSpans"),
            ("research", "engine_research.submit.post"),
        )
    ),
    error=EngineErrorBody,
)
def put_collection(ns: str, name: str) -> ResponseReturnValue:
    namespace_or_404(ns)
    check_name("collection", name)
    body = _optional_json()
    for key in body:
        if key not in CollectionRequest.model_fields:
            raise invalid(f"Unknown field: {key}", key)
    description = body.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > 1000):
        raise invalid("description must be a string of at most 1000 characters.", "description")
    access = body.get("access_control")
    if access is not None and access not in ("open", "enforced"):
        raise invalid("access_control must be one of: open, enforced", "access_control")
    kind = body.get("index")
    if kind is not None and kind not in INDEX_KINDS:
        raise invalid(f"index must be one of: {', '.join(INDEX_KINDS)}", "index")
    collections = collections_of(current_app)
    try:
        record, created = collections.catalog.put_collection(ns, name, description, access)
    except ValueError as exc:
        raise invalid(str(exc), "access_control") from None
    if kind is not None:
        collections.set_index(record, kind)
    return _ok(collection_json(record), 201 if created else 200)


@blueprint.get("/namespaces/<ns>/collections/<name>")
@operation(
    summary="A collection and its file counts",
    tag=TAG,
    response=CollectionBody,
    error=EngineErrorBody,
)
def get_collection(ns: str, name: str) -> ResponseReturnValue:
    return _ok(collection_json(collection_or_404(ns, name)))


@blueprint.get("/namespaces/<ns>/collections")
@operation(
    summary="The collections of a namespace, paged",
    tag=TAG,
    response=Collections,
    error=EngineErrorBody,
    query=PAGING,
)
def list_collections(ns: str) -> ResponseReturnValue:
    namespace_or_404(ns)
    size, after = _page()
    records = collections_of(current_app).catalog.collections(ns, size + 1, after)
    more = len(records) > size
    records = records[:size]
    return _ok(
        {
            "collections": [collection_json(r) for r in records],
            "next_page_token": _token(records[-1].name) if more else None,
        }
    )


@blueprint.delete("/namespaces/<ns>/collections/<name>")
@operation(summary="Delete a collection and its files", tag=TAG, status=204, error=EngineErrorBody)
def delete_collection(ns: str, name: str) -> ResponseReturnValue:
    collections_of(current_app).delete_collection(collection_or_404(ns, name))
    return Response(status=204, headers={"X-Request-Id": request_id()})


def _metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_METADATA_KEYS:
        raise invalid(
            f"metadata must be an object of at most {MAX_METADATA_KEYS} keys.", "metadata"
        )
    for key, item in value.items():
        if not _KEY.fullmatch(key):
            raise invalid("metadata keys must be 1-64 letters, digits, _ or -.", f"metadata.{key}")
        ok = isinstance(item, (bool, int, float)) or (isinstance(item, str) and len(item) <= 1024)
        if not ok:
            raise invalid(
                "metadata values must be strings (at most 1024 characters), numbers or booleans.",
                f"metadata.{key}",
            )
    return dict(value)


def _path(value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 1024:
        raise invalid("path is required (1-1024 characters).", "path")
    parts = value.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise invalid("path must be /-separated names without empty, . or .. segments.", "path")
    return value


@blueprint.post("/namespaces/<ns>/collections/<name>/files")
@operation(
    summary="Upload a file (202; ingested in the background)",
    tag=TAG,
    body=FileUpload,
    response=FileBody,
    status=202,
    links=(
        ("file", "engine_resources.get_file.get", FILE_OF_BODY),
        ("delete_file", "engine_resources.delete_file.delete", FILE_OF_BODY),
    ),
    error=EngineErrorBody,
)
def upload_file(ns: str, name: str) -> ResponseReturnValue:
    body = json_object(request)
    for key in body:
        if key not in FileUpload.model_fields:
            raise invalid(f"Unknown field: {key}", key)
    collection = collection_or_404(ns, name)
    path = _path(body.get("path"))
    content_type = body.get("content_type")
    if content_type not in CONTENT_TYPES:
        raise invalid("content_type must be one of: " + ", ".join(CONTENT_TYPES), "content_type")
    text, data = body.get("text"), body.get("data")
    if (text is None) == (data is None):
        raise invalid("Exactly one of text or data is required.", "text")
    if text is not None:
        if not isinstance(text, str) or content_type in BINARY_TYPES:
            raise invalid(f"{content_type} files are sent as base64 data.", "text")
        raw = text.encode("utf-8")
    else:
        raw = base64.b64decode(data) if is_base64(data) else b""
        if not raw:
            raise invalid("data must be non-empty valid base64.", "data")
    metadata = _metadata(body.get("metadata"))
    principals = principals_of(body) or []
    collections = collections_of(current_app)
    if collections.needs_principals(collection, principals):
        raise invalid(
            "principals is required for collections with enforced access control.", "principals"
        )
    record = collections.add_file(collection, path, str(content_type), raw, metadata, principals)
    return _ok(file_json(record), 202)


@blueprint.get("/namespaces/<ns>/collections/<name>/files")
@operation(
    summary="The files of a collection, paged",
    tag=TAG,
    response=Files,
    error=EngineErrorBody,
    query=(
        *PAGING,
        ("filter", "a filter of spec §6", {"type": "string"}),
        (
            "principals",
            "repeatable: only files these principals may read",
            {"type": "array", "items": {"type": "string", "pattern": PRINCIPAL_PATTERN}},
        ),
    ),
)
def list_files(ns: str, name: str) -> ResponseReturnValue:
    """Every file (the key holder's view); on an enforced collection,
    `?principals=a&principals=b` lists only the files those principals may read."""
    collection = collection_or_404(ns, name)
    size, after = _page()
    conditions = [filter_condition(ns, name, request.args.get("filter", ""))]
    readers = request.args.getlist("principals")
    if readers and collection.access_control == "enforced":
        conditions.append(readable_by(readers, ns, name))
    records = collections_of(current_app).catalog.files_where(
        ns,
        name,
        [c for c in conditions if c is not None],
        status=None,
        after=after,
        limit=size + 1,
    )
    page, more = records[:size], len(records) > size
    return _ok(
        {
            "files": [file_json(r) for r in page],
            "next_page_token": _token(page[-1].file_id) if more else None,
        }
    )


def _file_or_404(ns: str, name: str, file_id: str) -> FileRecord:
    collection_or_404(ns, name)
    record = collections_of(current_app).catalog.file(file_id)
    if record is None or (record.namespace, record.collection) != (ns, name):
        raise not_found(f"file {file_id}")
    return record


@blueprint.get("/namespaces/<ns>/collections/<name>/files/<file_id>")
@operation(
    summary="A file: status, progress, error", tag=TAG, response=FileBody, error=EngineErrorBody
)
def get_file(ns: str, name: str, file_id: str) -> ResponseReturnValue:
    return _ok(file_json(_file_or_404(ns, name, file_id)))


@blueprint.delete("/namespaces/<ns>/collections/<name>/files/<file_id>")
@operation(summary="Delete a file", tag=TAG, status=204, error=EngineErrorBody)
def delete_file(ns: str, name: str, file_id: str) -> ResponseReturnValue:
    collections_of(current_app).delete_file(_file_or_404(ns, name, file_id))
    return Response(status=204, headers={"X-Request-Id": request_id()})
