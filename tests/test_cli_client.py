"""The CLI verbs and the Python client round-trip through a live server."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flask_app.cli.main import main
from flask_app.client import Client, EdgeragError
from tests.http_client import serve_in_thread
from tests.test_moorcheh_api import make_app, unit


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    with serve_in_thread(make_app(tmp_path, max_items=5)) as url:
        yield url


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    out = json.loads(captured.out) if captured.out.strip() else None
    return code, out, captured.err


def test_cli_round_trip(base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs.json"
    docs.write_text(
        json.dumps(
            {
                "documents": [
                    {"id": "apples", "text": "red apples grow on trees"},
                    {
                        "id": "whales",
                        "text": "whales swim in the ocean",
                        "metadata": {"kind": "animal"},
                    },
                ]
            }
        )
    )
    code, out, _ = cli(
        capsys, "upload-documents", "--documents-file", str(docs), "--base-url", base
    )
    assert (code, out) == (0, {"status": "success", "total": 2})
    code, out, _ = cli(capsys, "status", "--base-url", base)
    assert out["items"] == 2 and out["store_mode"] == "text"
    code, out, _ = cli(
        capsys, "search", "--query-text", "ocean whales", "--top-k", "1", "--base-url", base
    )
    assert out["results"][0]["id"] == "whales"
    code, out, _ = cli(
        capsys,
        "search",
        "--query-text",
        "trees",
        "--metadata-json",
        '{"kind": "animal"}',
        "--base-url",
        base,
    )
    assert [r["id"] for r in out["results"]] == ["whales"]
    code, out, _ = cli(capsys, "export", "--limit", "1", "--base-url", base)
    assert out["items"][0]["id"] == "apples" and out["next_cursor"] == "apples"
    code, out, _ = cli(capsys, "delete", "--ids-json", '["apples", "nope"]', "--base-url", base)
    assert out == {"status": "success", "deleted": 1, "not_found_ids": ["nope"]}
    code, out, _ = cli(capsys, "clear-store", "-y", "--base-url", base)
    assert out["message"] == "Store cleared successfully."


def test_cli_vectors_and_vector_search(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors = tmp_path / "vectors.json"
    vectors.write_text(
        json.dumps(
            {
                "vectors": [
                    {"id": f"v{i}", "vector": unit(i), "original_text": f"text {i}"}
                    for i in range(3)
                ]
            }
        )
    )
    code, out, _ = cli(
        capsys,
        "upload-vectors",
        "--vectors-file",
        str(vectors),
        "--batch-size",
        "2",
        "--base-url",
        base,
    )
    assert (code, out) == (0, {"status": "success", "total": 3})
    code, out, _ = cli(
        capsys,
        "search",
        "--query-vector-json",
        json.dumps(unit(1)),
        "--top-k",
        "1",
        "--base-url",
        base,
    )
    assert out["results"][0] == {"id": "v1", "score": 1.0, "label": "Close Match", "text": "text 1"}


def test_cli_api_error_prints_body_and_exits_1(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors = tmp_path / "many.json"
    vectors.write_text(
        json.dumps({"vectors": [{"id": f"v{i}", "vector": unit(i)} for i in range(7)]})
    )
    code, out, err = cli(
        capsys, "upload-vectors", "--vectors-file", str(vectors), "--base-url", base
    )
    assert code == 1
    assert out["requested_new"] == 7
    assert err.strip() == (
        "Error (409): Item limit exceeded: max 5, current 0, requested 7 new items."
    )


def test_cli_usage_errors(
    base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = cli(capsys, "delete", "--ids-json", "[oops", "--base-url", base)
    assert code == 1 and err.startswith("Error: --ids-json is not valid JSON")
    bad = tmp_path / "bad.json"
    bad.write_text('{"documents": 3}')
    code, _, err = cli(capsys, "upload-documents", "--documents-file", str(bad), "--base-url", base)
    assert code == 1 and '{"documents": [...]}' in err
    monkeypatch.setattr(sys, "stdin", io.StringIO("no\n"))
    with pytest.raises(SystemExit) as info:
        main(["clear-store", "--base-url", base])
    assert info.value.code == 1 and "Aborted." in capsys.readouterr().err
    code, _, err = cli(capsys, "status", "--base-url", "http://127.0.0.1:9")
    assert code == 1 and err.startswith("Error: ")


def test_console_script_runs(base: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flask_app.cli", "status", "--base-url", base],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and json.loads(result.stdout)["status"] == "ok"


def test_python_client(base: str) -> None:
    with Client(base) as client:
        assert client.health()["items"] == 0
        client.upload_vectors(
            [{"id": f"v{i}", "vector": unit(i), "text": f"t{i}"} for i in range(4)], batch_size=3
        )
        assert client.search(unit(2), top_k=1)[0]["id"] == "v2"
        assert client.search(unit(2), top_k=5, kiosk_mode=True, threshold=0.999)[0]["id"] == "v2"
        assert [i["id"] for i in client.export_all(page=3)] == ["v0", "v1", "v2", "v3"]
        assert client.delete(["v0"])["deleted"] == 1
        with pytest.raises(EdgeragError) as info:
            client.upload_vectors([{"id": f"x{i}", "vector": unit(10 + i)} for i in range(5)])
        assert info.value.is_item_limit_exceeded and info.value.status_code == 409
        with pytest.raises(EdgeragError) as info:
            client.search([1.0, 2.0])
        assert info.value.status_code == 400 and not info.value.is_item_limit_exceeded
        client.clear_store()
        assert client.health()["dimension"] is None
