"""`edgerag add` and `edgerag ask` against a live server (the scripted model):
a folder of every supported type, resync, --delete, bad input, a server that
goes away mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from flask_app.app import create_app
from flask_app.cli.main import main
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.settings import Settings
from tests import stores
from tests.http_client import free_port, serve_in_thread, start_server

HOUSE = "# House\n\nThe spare key is with the neighbour at number 12.\n"


def pdf_bytes(text: str) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.multi_cell(0, 10, text)
    return bytes(pdf.output())


def write_folder(root: Path) -> dict[str, str]:
    """A nested folder with one file of every supported type; path -> a phrase in it."""
    files = {
        "notes/house.md": HOUSE,
        "notes/bins.txt": "Bins go out on Tuesday evening.\n",
        "guides/wifi/network.html": "<html><body><p>The guest network is Calder-Guest.</p>"
        "</body></html>",
        "tables/prices.csv": "item,price\nticket,10 euros\n",
        "data/hours.json": json.dumps({"hours": "The museum opens at 10:00."}),
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    (root / "manuals").mkdir()
    (root / "manuals/boiler.pdf").write_bytes(pdf_bytes("The boiler pressure must be 1.5 bar."))
    return {
        "notes/house.md": "spare key",
        "notes/bins.txt": "Tuesday evening",
        "guides/wifi/network.html": "Calder-Guest",
        "tables/prices.csv": "10 euros",
        "data/hours.json": "10:00",
        "manuals/boiler.pdf": "1.5 bar",
    }


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    backend = ScriptedBackend("The spare key is with the neighbour at number 12.")
    services = stores.services(settings, LLM(backend, timeout=30), HashEmbedder())
    with serve_in_thread(create_app(settings, services)) as base:
        yield base


def add(capsys: pytest.CaptureFixture[str], base: str, *argv: str) -> tuple[int, str, str]:
    code = main(["add", *argv, "--base-url", base])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def stored(base: str, collection: str = "docs", ns: str = "default") -> dict[str, Any]:
    """Every file the server holds in the collection, by path (all pages)."""
    out: dict[str, Any] = {}
    params: dict[str, Any] = {"page_size": 100}
    while True:
        r = requests.get(
            f"{base}/namespaces/{ns}/collections/{collection}/files", params=params, timeout=10
        )
        assert r.ok, r.text
        out.update({f["path"]: f for f in r.json()["files"]})
        if not r.json().get("next_page_token"):
            return out
        params["page_token"] = r.json()["next_page_token"]


def search(base: str, text: str) -> list[str]:
    """The texts /v1-less search finds in the collection, through the OpenAI
    surface's grounded sources (any surface would do)."""
    r = requests.post(
        f"{base}/v1/chat/completions",
        json={
            "model": "m",
            "messages": [{"role": "user", "content": text}],
            "rag": {"collection": "default/docs", "top_k": 10},
        },
        timeout=30,
    )
    assert r.ok, r.text
    return [s["text"] for s in r.json()["rag"]["sources"]]


def test_a_folder_of_every_type_goes_in_and_a_rerun_uploads_nothing(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "docs"
    phrases = write_folder(folder)
    code, out, err = add(capsys, server, str(folder))
    assert code == 0, (out, err)
    assert "created namespace default" in err and "created collection default/docs" in err
    assert out.startswith("added 6, updated 0, unchanged 0, removed 0, failed 0;")
    files = stored(server)
    assert set(files) == set(phrases)
    assert all(f["status"] == "ready" and f["chunk_count"] >= 1 for f in files.values())
    assert files["manuals/boiler.pdf"]["content_type"] == "application/pdf"
    code, out, _ = add(capsys, server, str(folder))
    assert code == 0 and out.startswith("added 0, updated 0, unchanged 6, removed 0, failed 0;")
    assert {f["file_id"] for f in stored(server).values()} == {
        f["file_id"] for f in files.values()
    }  # nothing was uploaded again


def test_a_changed_file_replaces_the_old_one_and_delete_removes_a_gone_one(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "docs"
    write_folder(folder)
    assert add(capsys, server, str(folder))[0] == 0
    (folder / "notes/bins.txt").write_text("Recycling is collected on Thursday mornings.\n")
    (folder / "tables/prices.csv").unlink()
    code, out, _ = add(capsys, server, str(folder))
    assert code == 0 and out.startswith("added 0, updated 1, unchanged 4, removed 0, failed 0;")
    texts = search(server, "When do the bins go out? Tuesday evening recycling Thursday")
    assert any("Thursday mornings" in t for t in texts)
    assert not any("Tuesday evening" in t for t in texts)  # the old text is gone
    assert "tables/prices.csv" in stored(server)  # kept without --delete
    code, out, err = add(capsys, server, str(folder), "--delete")
    assert code == 0 and "removed 1" in out, (out, err)
    assert "tables/prices.csv" not in stored(server)
    assert not any("10 euros" in t for t in search(server, "ticket price 10 euros"))


def test_metadata_flags_go_with_every_file_and_a_change_of_them_uploads_again(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text(HOUSE)
    assert (
        add(capsys, server, str(folder), "--metadata", "team=ops", "--metadata", "year=2024")[0]
        == 0
    )
    assert stored(server)["a.md"]["metadata"] == {"team": "ops", "year": 2024}
    code, out, _ = add(capsys, server, str(folder), "--metadata", "team=sre")
    assert code == 0 and "updated 1" in out
    assert stored(server)["a.md"]["metadata"] == {"team": "sre"}


def test_bad_input_is_listed_and_skipped_and_the_rest_goes_in(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text(HOUSE)
    (folder / "empty.txt").write_text("   \n")
    (folder / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (folder / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4\n this is no pdf at all \n%%EOF")
    (folder / "fake.pdf").write_bytes(b"hello, not a pdf")
    (folder / "huge.txt").write_text("word " * 1_400_000)  # 7 MB: over the 6 MiB limit
    (folder / "locked.txt").write_text("secret")
    real_read = Path.read_bytes

    def read(self: Path) -> bytes:
        if self.name == "locked.txt":
            raise PermissionError(13, "Permission denied")
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read)
    code, out, _ = add(capsys, server, str(folder))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("added 2, updated 0, unchanged 0, removed 0, failed 7;")
    reasons = {line.split(": ")[1]: line for line in lines[1:]}
    assert "empty file" in reasons["empty.txt"]
    assert "unsupported type (.png" in reasons["photo.png"]
    assert "not UTF-8 text" in reasons["latin1.txt"]
    assert "not a PDF" in reasons["fake.pdf"]
    assert "over the server's 6 MiB request limit" in reasons["huge.txt"]
    assert "Permission denied" in reasons["locked.txt"]
    assert "broken.pdf" in reasons  # the server could not read it
    files = stored(server)
    assert files["good.md"]["status"] == "ready" and files["broken.pdf"]["status"] == "failed"


def test_a_missing_path_and_a_bad_metadata_flag_are_usage_errors(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = add(capsys, server, str(tmp_path / "nowhere"))
    assert code == 2 and "no such file or folder" in err
    (tmp_path / "a.md").write_text(HOUSE)
    code, _, err = add(capsys, server, str(tmp_path / "a.md"), "--metadata", "oops")
    assert code == 2 and "KEY=VALUE" in err


def test_ask_prints_the_answer_its_citations_and_its_confidence(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "docs"
    write_folder(folder)
    assert add(capsys, server, str(folder))[0] == 0
    for stream in ([], ["--stream"]):
        code = main(
            [
                "ask",
                "Where is the spare key?",
                "--collection",
                "docs",
                "--base-url",
                server,
                *stream,
            ]
        )
        out = capsys.readouterr().out.splitlines()
        assert code == 0
        assert out[0].startswith("The spare key is with the neighbour at number 12")
        cited = [line for line in out if line.startswith("[1] ")]
        assert cited and cited[0].startswith("[1] notes/house.md#"), out
        start, end = (int(n) for n in cited[0].rsplit("#", 1)[1].split("-"))
        assert "spare key" in HOUSE[start:end]
    code = main(["ask", "x", "--collection", "nothing", "--base-url", server])
    assert code == 1 and "Error (404)" in capsys.readouterr().err


def test_no_wait_returns_before_indexing_ends(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "docs"
    write_folder(folder)
    code, out, _ = add(capsys, server, str(folder), "--no-wait")
    assert code == 0 and "added 6" in out
    deadline = time.monotonic() + 60
    while any(f["status"] != "ready" for f in stored(server).values()):
        assert time.monotonic() < deadline
        time.sleep(0.2)


@pytest.mark.real_model  # the server process loads the embedder
def test_a_server_killed_mid_run_is_named_and_a_rerun_completes(
    tmp_path: Path, real_settings: Settings
) -> None:
    """A real server process (no LLM: adding needs only the embedder) killed
    while 120 files go in; the command says what was stored, and the same
    command against the restarted server finishes the job."""
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(120):
        (folder / f"note-{i:03}.md").write_text(
            f"Note {i}: the locker code of room {i} is {i * 7}."
        )
    data = tmp_path / "data"
    port = free_port()
    args = ["--no-llm", "--data-dir", str(data), "--model-dir", str(real_settings.model_dir)]
    first = start_server(args, tmp_path / "first.log", port=port)
    command = [sys.executable, "-m", "flask_app.cli", "add", str(folder), "--base-url", first.base]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    while True:  # kill it once some files are in
        try:
            count = len(stored(first.base, "many"))
        except (AssertionError, requests.RequestException):
            count = 0
        if count >= 10 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(10)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 1, (out, err)
    assert b"stopped answering" in err and b"Run the same command again" in err
    second = start_server(args, tmp_path / "second.log", port=port)
    try:
        done = subprocess.run(command, capture_output=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr.decode()
        files = stored(second.base, "many")
        assert len(files) == 120 and all(f["status"] == "ready" for f in files.values())
        assert b"unchanged" in done.stdout
    finally:
        second.stop()


def test_the_indexing_bar_moves_at_least_once_a_second(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the server indexes, the bar is redrawn at every look at the
    files' progress, and those looks are at most a second apart."""
    from flask_app.cli import add as add_module

    assert add_module.POLL_S <= 1.0
    redraws: list[float] = []

    class Bar:
        total = 0
        n = 0

        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def refresh(self) -> None:
            redraws.append(time.monotonic())

        def update(self, n: int) -> None:
            pass

    monkeypatch.setattr(add_module, "_bar", lambda *a, **k: Bar())
    folder = tmp_path / "docs"
    write_folder(folder)
    started = time.monotonic()
    assert main(["add", str(folder), "--base-url", server]) == 0
    gaps = [b - a for a, b in zip([started, *redraws], redraws, strict=False)]
    assert redraws and max(gaps[1:], default=0.0) <= 1.0 + 0.5
