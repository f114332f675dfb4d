"""Bulk vector uploads: `POST /upload` as multipart/form-data, the vectors
as a NumPy `.npy` file and their ids alongside, so that neither side turns
floats into text:

    curl -F vectors=@vectors.npy -F ids=@ids.txt [-F items=@items.jsonl] \\
        http://127.0.0.1:8000/upload

- `vectors`: a `.npy` array of n rows × d float16/32/64 values (no pickles);
- `ids`: n ids, one per line (UTF-8; a final newline and `\\r\\n` are fine);
- `items` (optional): n lines of JSON Lines, one object per row with
  optional `text` and `metadata`, in the order of the ids.

The store must be in vector mode (or empty). Parts are read by werkzeug, which
keeps large ones in temporary files rather than memory.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import orjson
from flask import Request
from pydantic import TypeAdapter, ValidationError

from flask_app.api.http.json_body import BadRequest
from flask_app.api.moorcheh.schemas import ID_MAX_LENGTH, BulkItem

MULTIPART = "multipart/form-data"

# for the OpenAPI document: the multipart body's parts
MULTIPART_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["vectors", "ids"],
    "properties": {
        "vectors": {
            "type": "string",
            "format": "binary",
            "description": "a .npy array: n rows x d float16/float32/float64 values",
        },
        "ids": {
            "type": "string",
            "format": "binary",
            "description": "n ids, one per line (UTF-8)",
        },
        "items": {
            "type": "string",
            "format": "binary",
            "description": "optional JSON Lines: per row {text?, metadata?}, in the ids' order",
        },
    },
}


_ITEM = TypeAdapter(BulkItem)


@dataclass(frozen=True)
class BulkUpload:
    ids: list[str]
    vectors: npt.NDArray[np.float32]
    texts: list[str]
    metadata: list[dict[str, Any] | None]


def _part(request: Request, name: str) -> IO[bytes] | bytes | None:
    """A part sent as a file (`-F name=@file`) or as a field (`-F name=<file`)."""
    if name in request.files:
        return request.files[name].stream
    value = request.form.get(name)
    return None if value is None else value.encode("utf-8")


def _read(part: IO[bytes] | bytes) -> bytes:
    return part if isinstance(part, bytes) else part.read()


def _check_declared_size(stream: IO[bytes]) -> None:
    """The header's shape must fit in the bytes sent: numpy allocates what the
    header declares before it reads the data."""
    size = stream.seek(0, io.SEEK_END)
    stream.seek(0)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
    else:
        shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
    declared = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    held = size - stream.tell()
    if declared > held:
        raise ValueError(f"the header declares {shape} {dtype}, {declared:,} bytes; {held:,} sent")
    stream.seek(0)


def _vectors(part: IO[bytes] | bytes) -> npt.NDArray[np.float32]:
    stream = io.BytesIO(part) if isinstance(part, bytes) else part
    try:
        _check_declared_size(stream)
        array = np.load(stream, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise BadRequest(f"vectors: not a readable .npy file ({exc})") from None
    if array.ndim != 2 or array.shape[0] == 0:
        raise BadRequest(f"vectors: expected a 2-D array of n >= 1 rows, got shape {array.shape}")
    if array.dtype.kind != "f" or array.dtype.itemsize not in (2, 4, 8):
        raise BadRequest(f"vectors: expected float16, float32 or float64 values, got {array.dtype}")
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(array, dtype=np.float32)  # too large for float32: inf, refused


def _ids(raw: bytes, rows: int) -> list[str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"ids: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    ids = [line.removesuffix("\r") for line in lines]
    if len(ids) != rows:
        raise BadRequest(f"ids: {len(ids)} ids for {rows} vectors (one id per line)")
    seen: set[str] = set()
    for i, item_id in enumerate(ids):
        if not item_id or len(item_id) > ID_MAX_LENGTH:
            raise BadRequest(f"ids[{i}]: an id has 1 to {ID_MAX_LENGTH} characters")
        if item_id in seen:
            raise BadRequest(f"ids[{i}]: duplicate id {item_id!r} in this upload")
        seen.add(item_id)
    return ids


def _items(raw: bytes, rows: int) -> tuple[list[str], list[dict[str, Any] | None]]:
    lines = raw.split(b"\n")
    if lines and not lines[-1].strip():
        lines.pop()
    if len(lines) != rows:
        raise BadRequest(f"items: {len(lines)} lines for {rows} vectors (one JSON object per line)")
    texts: list[str] = []
    metadata: list[dict[str, Any] | None] = []
    for i, line in enumerate(lines):
        try:
            item = _ITEM.validate_python(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"items[{i}]: not JSON ({exc})") from None
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = "".join(f".{p}" for p in problem["loc"])
            raise BadRequest(f"items[{i}]{where}: {problem['msg']}") from None
        texts.append(item.text or "")
        metadata.append(item.metadata)
    return texts, metadata


def parse(request: Request) -> BulkUpload:
    """The bulk upload in `request` (400 naming the part at fault)."""
    vectors_part, ids_part = _part(request, "vectors"), _part(request, "ids")
    if vectors_part is None or ids_part is None:
        missing = "vectors" if vectors_part is None else "ids"
        raise BadRequest(
            f"a multipart upload needs a '{missing}' part "
            "(vectors: a .npy file; ids: one per line; items: optional JSON Lines)"
        )
    vectors = _vectors(vectors_part)
    rows = int(vectors.shape[0])
    ids = _ids(_read(ids_part), rows)
    items_part = _part(request, "items")
    if items_part is None:
        return BulkUpload(ids, vectors, [""] * rows, [None] * rows)
    texts, metadata = _items(_read(items_part), rows)
    return BulkUpload(ids, vectors, texts, metadata)
