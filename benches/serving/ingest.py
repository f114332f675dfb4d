"""Engine ingestion with the real default embedder: a 1,000-chunk file
ingested with llama.cpp's one-text-per-decode path, with the batched NumPy
encoder on the same threads, and with the server's default (idle cores lent
to the encoder; no LLM is loaded here, so always), alternating, twice each;
then the time from upload to `ready` for a ~1 MB Markdown file and a 50-page
PDF with the default.

    .venv/bin/python benches/serving/ingest.py

Text comes from the interpreter's own documentation (`pydoc_data.topics`),
so the files read like real reference text. Results: benches/results/ingest.json.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any

from flask import current_app

from flask_app.api.http.extensions import collections_of
from flask_app.app import create_app
from flask_app.inference.embed import LlamaEmbedder
from flask_app.ingest.chunking import chunk
from flask_app.services import load_services
from flask_app.settings import Settings


def markdown(size: int) -> str:
    """`size` characters of reference text (the topics, repeated as needed)."""
    parts, total, round_ = [], 0, 0
    while total < size:
        round_ += 1
        for name in sorted(topics):
            section = f"# {name} ({round_})\n\n{topics[name].strip()}\n\n"
            parts.append(section)
            total += len(section)
            if total >= size:
                break
    return "".join(parts)[:size]


def pdf(pages: int) -> bytes:
    from fpdf import FPDF

    text = markdown(pages * 2500).encode("latin-1", "replace").decode("latin-1")
    doc = FPDF()
    doc.set_font("helvetica", size=10)
    for i in range(pages):
        doc.add_page()
        doc.multi_cell(0, 5, text[i * 2500 : (i + 1) * 2500])
    return bytes(doc.output())


def ingest(client: Any, app: Any, body: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    r = client.post("/namespaces/bench/collections/docs/files", json=body)
    assert r.status_code == 202, r.get_json()
    with app.app_context():
        assert collections_of(current_app).ingestor.wait_idle(3600)
    seconds = time.perf_counter() - start
    record = client.get(f"/namespaces/bench/collections/docs/files/{r.get_json()['file_id']}")
    info = record.get_json()
    assert info["status"] == "ready", info
    with app.app_context():
        chunks = len(
            collections_of(current_app).catalog.spans_of([info["file_id"]])[info["file_id"]]
        )
    return {
        "path": body["path"],
        "bytes": info["size_bytes"],
        "chars": info["char_count"],
        "chunks": chunks,
        "seconds_to_ready": round(seconds, 2),
        "chunks_per_s": round(chunks / seconds, 1),
    }


def thousand_chunks() -> str:
    """The shortest prefix of the reference text that cuts into 1,000 chunks."""
    text = markdown(1_000_000)
    return text[: chunk(text)[999].end]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp), "no_llm": True}, os.environ)
        services = load_services(settings)
        app = create_app(settings, services)
        client = app.test_client()
        client.put("/namespaces/bench")
        client.put("/namespaces/bench/collections/docs")
        default = services.embedder
        assert isinstance(default, LlamaEmbedder) and default.batched
        threads = settings.embed_threads
        path = settings.embed_path()
        embedders = {
            # llama.cpp, one text per decode (the path before the encoder)
            "per_text": LlamaEmbedder(path, n_threads=threads, batched=False),
            # the batched encoder on the same threads
            "batched": LlamaEmbedder(path, n_threads=threads, idle_threads=threads),
            # the server's default: idle cores lent while no generation runs
            "batched_idle_cores": default,
        }
        with app.app_context():
            ingestor = collections_of(current_app).ingestor
        file = {"path": "thousand.md", "content_type": "text/markdown", "text": thousand_chunks()}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in embedders}
        for _ in range(2):
            for name, embedder in embedders.items():
                ingestor.embedder = embedder
                runs[name].append(ingest(client, app, file))
                print(name, runs[name][-1], flush=True)
        ingestor.embedder = default
        seconds = {
            name: statistics.median(r["seconds_to_ready"] for r in rows)
            for name, rows in runs.items()
        }
        comparison = {
            "chunks": runs["batched"][0]["chunks"],
            "embed_threads": threads,
            "embed_idle_threads": settings.embed_idle_threads,
            "median_seconds": seconds,
            "speedup_same_threads": round(seconds["per_text"] / seconds["batched"], 2),
            "speedup_idle_cores": round(seconds["per_text"] / seconds["batched_idle_cores"], 2),
            "runs": runs,
        }
        print({k: v for k, v in comparison.items() if k != "runs"}, flush=True)
        md = markdown(1_000_000)
        results = [
            ingest(client, app, {"path": "topics.md", "content_type": "text/markdown", "text": md}),
            ingest(
                client,
                app,
                {
                    "path": "topics.pdf",
                    "content_type": "application/pdf",
                    "data": base64.b64encode(pdf(50)).decode(),
                },
            ),
        ]
        for row in results:
            print(row, flush=True)
        services.store.close()
    out = Path("benches/results/ingest.json")
    out.write_text(json.dumps({"thousand_chunks": comparison, "files": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
