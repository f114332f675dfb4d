"""Engine ingestion with the real default embedder: time from upload to
`ready` for a ~1 MB Markdown file and a 50-page PDF, chunks per second, and
the embedder's per-text path against one call for many texts.

    .venv/bin/python benches/ingest.py

Text comes from the interpreter's own documentation (`pydoc_data.topics`),
so the files read like real reference text. Results: benches/results/ingest.json.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import time
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any

from flask_app.api.engine import state
from flask_app.app import create_app
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
        assert state.ingestor().wait_idle(3600)
    seconds = time.perf_counter() - start
    record = client.get(f"/namespaces/bench/collections/docs/files/{r.get_json()['file_id']}")
    info = record.get_json()
    assert info["status"] == "ready", info
    with app.app_context():
        chunks = len(state.catalog().spans_of([info["file_id"]])[info["file_id"]])
    return {
        "path": body["path"],
        "bytes": info["size_bytes"],
        "chars": info["char_count"],
        "chunks": chunks,
        "seconds_to_ready": round(seconds, 2),
        "chunks_per_s": round(chunks / seconds, 1),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp), "no_llm": True}, os.environ)
        services = load_services(settings)
        app = create_app(settings, services)
        client = app.test_client()
        client.put("/namespaces/bench")
        client.put("/namespaces/bench/collections/docs")
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
        # the embedder alone: one call per text vs one call for all (same texts)
        embedder = services.embedder
        assert embedder is not None
        texts = [c.text for c in chunk(md)][:256]
        start = time.perf_counter()
        for text in texts:
            embedder.embed([text])
        per_text = time.perf_counter() - start
        start = time.perf_counter()
        embedder.embed(texts)
        one_call = time.perf_counter() - start
        embedder_row = {
            "texts": len(texts),
            "per_text_s": round(per_text, 2),
            "one_call_s": round(one_call, 2),
            "ratio": round(per_text / one_call, 2),
        }
        print(embedder_row)
        services.store.close()
    out = Path("benches/results/ingest.json")
    out.write_text(json.dumps({"files": results, "embedder": embedder_row}, indent=1) + "\n")


if __name__ == "__main__":
    main()
