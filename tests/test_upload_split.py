"""The JSON upload's vectors parsed by simcore straight from the body bytes
(`simcore.split_upload`) give the store exactly what parsing the body into
Python objects and converting each list gave: the same float32 rows, the same
items, and for a faulty body the same first error, word for word."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flask_app import simcore
from flask_app.api.http.json_body import parse_object
from flask_app.api.moorcheh import routes
from flask_app.errors import ServiceError

DIM = 128


def outcome(upload: Any, raw: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """What reached the store (ids, rows' bytes, texts, metadata, mode, model),
    or the error the client was sent."""

    def stored(items, vectors, mode, model, field):  # type: ignore[no-untyped-def]
        rows = None if vectors is None else (vectors.dtype.str, vectors.shape, vectors.tobytes())
        kept = [(i.id, i.content(), i.metadata) for i in items]
        return ("stored", kept, rows, mode, model, field)

    monkeypatch.setattr(routes, "_upload", stored)
    try:
        return upload(raw)  # type: ignore[no-any-return]
    except ServiceError as exc:
        return ("error", exc.status, str(exc))


def old_way(raw: bytes) -> Any:
    return routes._upload_parsed(parse_object(raw))


numbers = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1.0, max_value=1.0),
    st.integers(min_value=-(2**70), max_value=2**70),
)
# Infinity is written as JSON cannot hold it (the standard library's "Infinity")
numbers_or_infinite = st.one_of(numbers, st.just(float("inf")))
elements = st.one_of(
    numbers,
    numbers,
    numbers,
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.lists(numbers, max_size=2),
    st.dictionaries(st.text(max_size=2), numbers, max_size=1),
)


@st.composite
def vectors(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["good", "good", "good", "mixed", "short", "odd", "absent"]))
    if kind == "good":
        return draw(st.lists(numbers, min_size=DIM, max_size=DIM))
    if kind == "mixed":
        return draw(st.lists(elements, min_size=DIM, max_size=DIM))
    if kind == "short":
        return draw(st.lists(numbers_or_infinite, min_size=0, max_size=DIM + 1))
    if kind == "odd":
        return draw(st.one_of(st.none(), st.text(max_size=3), numbers, st.booleans()))
    return "absent"


@st.composite
def items(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 15)) == 0:
        return draw(st.one_of(st.text(max_size=3), st.integers(), st.none()))
    item: dict[str, Any] = {"id": draw(st.one_of(st.text(min_size=1, max_size=4), st.integers()))}
    vector = draw(vectors())
    if vector != "absent":
        item["vector"] = vector
    if draw(st.booleans()):
        item["text"] = draw(st.text(max_size=8))
    if draw(st.booleans()):
        item["metadata"] = draw(
            st.dictionaries(
                st.text(max_size=3), st.one_of(st.text(max_size=3), numbers), max_size=2
            )
        )
    return item


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    field = draw(st.sampled_from(["items", "items", "vectors"]))
    body: dict[str, Any] = {field: draw(st.lists(items(), min_size=0, max_size=4))}
    if field == "items" or draw(st.booleans()):
        body["store_mode"] = draw(st.sampled_from(["vector", "vector", "text", "graph"]))
    return json.dumps(body).encode()  # the standard library: integers past 64 bits too


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=bodies())
def test_split_upload_matches_parsing_to_python(
    raw: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert outcome(routes.upload_json, raw, monkeypatch) == outcome(old_way, raw, monkeypatch)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"store_mode": "vector", "items": [{"id": "a", "vector": [1e999]}]}',
        b'{"store_mode": "vector", "items": [{"id": "a", "vector": [NaN]}]}',
        b'{"store_mode": "vector", "items": [{"id": "\\ud800", "vector": [1]}]}',
        b'{"store_mode": "vector", "items": [{"id": "a", "vector": [true, 1e999]}]}',
        b'{"store_mode": "vector", "items": [{"id": "a", "vector": [1], "metadata": {"x": -1e999}}'
        b"]}",
        b'{"items": 3}',
        b'{"store_mode": "vector", "items": [{"id": "a", "vector": [1]}], "vectors": []}',
        b'{"nothing": []}',
        b"[1, 2]",
        b'{"items": [1, {"vector": [1]}], "items": [{"id": "x"}]}',
        b'{"store_mode": "vector", "items": [{"id": "a", "id": "b", "vector": [1], "vector": null}'
        b"]}",
    ],
)
def test_edge_bodies_match(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    assert outcome(routes.upload_json, raw, monkeypatch) == outcome(old_way, raw, monkeypatch)


def test_split_returns_float32_rows_and_the_rest() -> None:
    rows = np.random.default_rng(0).standard_normal((3, DIM)).astype(np.float32)
    body = {
        "store_mode": "vector",
        "items": [{"id": str(i), "vector": r} for i, r in enumerate(rows)],
    }
    split = simcore.split_upload(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY))
    assert split is not None
    field, rest, matrix, problem = split
    assert (field, problem) == ("items", None)
    assert matrix is not None and matrix.dtype == np.float32 and matrix.flags.c_contiguous
    np.testing.assert_array_equal(matrix, rows)
    assert orjson.loads(rest) == {
        "store_mode": "vector",
        "items": [{"id": "0"}, {"id": "1"}, {"id": "2"}],
    }
