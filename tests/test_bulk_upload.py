"""Vectors uploaded as binary: `POST /upload` as multipart/form-data (a .npy
file, ids one per line, optional JSON Lines of text and metadata), through a
real socket, the Python client and `edgerag upload`."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from flask_app.cli.main import main
from flask_app.client import Client, EdgeragError
from tests.http_client import serve_in_thread
from tests.test_moorcheh_api import make_app

DIM = 128


def rows(n: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(dtype)


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def huge_header() -> bytes:
    """A .npy whose header claims 10^12 rows: refused before anything is allocated."""
    out = io.BytesIO()
    header = {"descr": "<f4", "fortran_order": False, "shape": (10**12, DIM)}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue() + b"\0" * 64


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    with serve_in_thread(make_app(tmp_path, max_items=1000)) as url:
        yield url


def post(base: str, **parts: bytes | str) -> requests.Response:
    files = {name: (name, data) for name, data in parts.items()}
    return requests.post(base + "/upload", files=files, timeout=30)


def search(base: str, vector: np.ndarray, k: int = 1, **extra: Any) -> list[dict[str, Any]]:
    body = {"query": [float(x) for x in vector], "top_k": k, **extra}
    r = requests.post(base + "/search", json=body, timeout=30)
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


def test_a_npy_upload_is_stored_and_searchable(base: str) -> None:
    v = rows(50)
    items = "\n".join(
        json.dumps({"text": f"row {i}", "metadata": {"even": i % 2 == 0}}) for i in range(50)
    )
    ids = "\r\n".join(f"id-{i}" for i in range(50)) + "\r\n"  # CRLF and a final newline
    r = post(base, vectors=npy(v), ids=ids, items=items)
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "success", "total": 50}
    health = requests.get(base + "/health", timeout=5).json()
    assert (health["items"], health["dimension"], health["store_mode"]) == (50, DIM, "vector")
    hit = search(base, v[7])[0]
    assert (hit["id"], hit["text"], hit["score"]) == ("id-7", "row 7", 1.0)
    evens = search(base, v[7], 3, metadata={"even": True})
    assert len(evens) == 3 and all(int(h["id"][3:]) % 2 == 0 for h in evens)
    # the same ids again replace their rows; float64 and float16 are converted
    r = post(base, vectors=npy(rows(50, seed=1, dtype=np.float64)), ids=ids)
    assert r.json()["total"] == 50
    assert search(base, rows(50, seed=1)[3])[0]["id"] == "id-3"
    assert search(base, rows(50, seed=1)[3])[0]["text"] == ""
    r = post(base, vectors=npy(rows(2, seed=2, dtype=np.float16)), ids="h0\nh1")
    assert r.json()["total"] == 52


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ({"ids": "a"}, "needs a 'vectors' part"),
        ({"vectors": npy(rows(1))}, "needs a 'ids' part"),
        ({"vectors": b"not numpy", "ids": "a"}, "vectors: not a readable .npy file"),
        ({"vectors": npy(rows(1))[:-8], "ids": "a"}, "bytes; 504 sent"),
        ({"vectors": huge_header(), "ids": "a"}, "the header declares (1000000000000, 128)"),
        ({"vectors": npy(rows(2)[0]), "ids": "a"}, "expected a 2-D array"),
        ({"vectors": npy(np.ones((1, DIM), np.int32)), "ids": "a"}, "expected float16"),
        ({"vectors": npy(rows(2)), "ids": "a"}, "ids: 1 ids for 2 vectors"),
        ({"vectors": npy(rows(2)), "ids": "a\na"}, "ids[1]: duplicate id 'a'"),
        ({"vectors": npy(rows(2)), "ids": "a\n\nb"}, "ids: 3 ids for 2 vectors"),
        ({"vectors": npy(rows(1)), "ids": b"\xff"}, "ids: not UTF-8"),
        ({"vectors": npy(rows(1)), "ids": "x" * 513}, "ids[0]: an id has 1 to 512"),
        ({"vectors": npy(np.zeros((1, DIM), np.float32)), "ids": "a"}, "vectors[0] is all zeros"),
        ({"vectors": npy(np.full((1, DIM), 1e39)), "ids": "a"}, "float32 range"),
        ({"vectors": npy(rows(1)[:, :8]), "ids": "a"}, "8 dimensions"),
        ({"vectors": npy(rows(1)), "ids": "a", "items": "{}\n{}"}, "items: 2 lines for 1"),
        ({"vectors": npy(rows(1)), "ids": "a", "items": "nope"}, "items[0]: not JSON"),
        ({"vectors": npy(rows(1)), "ids": "a", "items": '{"text": 5}'}, "items[0].text"),
        (
            {"vectors": npy(rows(1)), "ids": "a", "items": '{"metadata": {"k": [1]}}'},
            "items[0].metadata.k",
        ),
    ],
)
def test_bad_uploads_are_400_naming_the_part(
    base: str, parts: dict[str, bytes | str], message: str
) -> None:
    r = post(base, **parts)
    assert r.status_code == 400, r.text
    assert message in r.json()["message"]
    assert requests.get(base + "/health", timeout=5).json()["items"] == 0


def test_the_store_mode_and_item_cap_hold_for_binary_uploads(base: str) -> None:
    r = requests.post(
        base + "/upload",
        json={"store_mode": "text", "items": [{"id": "t", "text": "hello there"}]},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    r = post(base, vectors=npy(rows(1)), ids="a")
    assert r.status_code == 409 and "text mode" in r.json()["message"]
    assert requests.delete(base + "/store", timeout=10).ok
    r = post(base, vectors=npy(rows(1001)), ids="\n".join(f"i{n}" for n in range(1001)))
    assert r.status_code == 409 and r.json()["max_items"] == 1000
    assert requests.get(base + "/health", timeout=5).json()["items"] == 0


def test_other_body_types_are_still_415(base: str) -> None:
    r = requests.post(base + "/upload", data=b"x", headers={"Content-Type": "text/csv"}, timeout=9)
    assert r.status_code == 415
    r = requests.post(base + "/search", files={"vectors": ("v", b"x")}, timeout=9)
    assert r.status_code == 415


def test_the_client_sends_an_array_in_batches(base: str) -> None:
    v = rows(25, seed=4)
    seen: list[int] = []
    with Client(base) as client:
        items = [{"text": f"t{i}"} for i in range(25)]
        ids = [f"c{i}" for i in range(25)]
        reply = client.upload_array(ids, v, items, batch_rows=10, progress=seen.append)
        assert reply == {"status": "success", "total": 25} and seen == [10, 10, 5]
        assert client.search([float(x) for x in v[24]], top_k=1)[0]["text"] == "t24"
        with pytest.raises(ValueError, match="3 ids"):
            client.upload_array(["a", "b", "c"], v)
        with pytest.raises(ValueError, match="one per line"):
            client.upload_array(["a\nb"], v[:1])
        with pytest.raises(EdgeragError) as failed:
            client.upload_array(["z"], rows(1)[:, :8])
        assert failed.value.status_code == 400


def test_edgerag_upload_from_npy_files(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = rows(30, seed=5)
    np.save(tmp_path / "v.npy", v)
    (tmp_path / "ids.txt").write_text("\n".join(f"f{i}" for i in range(30)) + "\n")
    (tmp_path / "items.jsonl").write_text(
        "\n".join(json.dumps({"text": f"file row {i}"}) for i in range(30))
    )
    argv = ["upload", "--vectors-file", str(tmp_path / "v.npy"), "--base-url", base]
    files = ["--ids-file", str(tmp_path / "ids.txt"), "--items-file", str(tmp_path / "items.jsonl")]
    assert main([*argv, *files, "--batch-size", "7"]) == 0
    assert json.loads(capsys.readouterr().out) == {"status": "success", "total": 30}
    assert search(base, v[29])[0]["text"] == "file row 29"
    assert main(argv) == 1
    assert "needs --ids-file" in capsys.readouterr().err
    (tmp_path / "short.txt").write_text("a\nb\n")
    assert main([*argv, "--ids-file", str(tmp_path / "short.txt")]) == 1
    assert "2 ids for vectors of shape (30, 128)" in capsys.readouterr().err


def test_edgerag_upload_splits_ids_as_the_server_does(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only newlines separate ids (a \\x1c or \\u2028 inside an id stays in it)."""
    v = rows(2, seed=6)
    np.save(tmp_path / "v.npy", v)
    (tmp_path / "ids.txt").write_text("a\x1cb\r\nc\u2028d\n", encoding="utf-8")
    argv = ["upload", "--vectors-file", str(tmp_path / "v.npy"), "--base-url", base]
    assert main([*argv, "--ids-file", str(tmp_path / "ids.txt")]) == 0, capsys.readouterr().err
    assert [search(base, v[i])[0]["id"] for i in range(2)] == ["a\x1cb", "c\u2028d"]
