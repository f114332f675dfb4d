"""`edgerag add` against the collections API it calls, on the same folder.

    .venv/bin/python benches/serving/add_folder.py [--mb 1] [--files 40] [--json out.json]

A folder of Markdown files (`--mb` of text in all, paragraphs of made-up
notes) goes into a fresh collection of a real server (`--no-llm`: adding
needs only the embedder) twice, one way after the other: by the API alone
(each file POSTed, then its status read until every one is `ready`), and by
`edgerag add` as a user runs it (a subprocess). Reported: each way's
seconds from the first request to every file ready, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from flask_app.settings import Settings
from tests.http_client import start_server

WORDS = (
    "boiler", "pressure", "valve", "kitchen", "garden", "ticket", "museum", "network",
    "router", "cupboard", "neighbour", "schedule", "visitor", "invoice", "landlord",
    "plumber", "thermostat", "recycling", "parcel", "window", "heating",
)  # fmt: skip


def write_folder(root: Path, megabytes: float, files: int) -> int:
    """`files` Markdown files of paragraphs, `megabytes` in all; their bytes."""
    rng = random.Random(0)
    total = int(megabytes * 1_000_000)
    each = total // files
    written = 0
    for n in range(files):
        paragraphs: list[str] = []
        size = 0
        while size < each:
            sentence = " ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "."
            paragraph = f"Note {n}-{len(paragraphs)}: {sentence} {sentence}"
            paragraphs.append(paragraph)
            size += len(paragraph) + 2
        text = f"# Notes {n}\n\n" + "\n\n".join(paragraphs) + "\n"
        (root / f"notes-{n:03}.md").write_text(text)
        written += len(text.encode())
    return written


def by_the_api(base: str, folder: Path, collection: str) -> float:
    started = time.perf_counter()
    requests.put(f"{base}/namespaces/bench", timeout=30)
    requests.put(f"{base}/namespaces/bench/collections/{collection}", json={}, timeout=30)
    ids = []
    for path in sorted(folder.glob("*.md")):
        r = requests.post(
            f"{base}/namespaces/bench/collections/{collection}/files",
            json={"path": path.name, "content_type": "text/markdown", "text": path.read_text()},
            timeout=60,
        )
        r.raise_for_status()
        ids.append(r.json()["file_id"])
    pending = set(ids)
    while pending:
        for file_id in list(pending):
            r = requests.get(
                f"{base}/namespaces/bench/collections/{collection}/files/{file_id}", timeout=30
            )
            if r.json()["status"] != "processing":
                pending.discard(file_id)
        time.sleep(0.5)
    return time.perf_counter() - started


def by_the_command(base: str, folder: Path, collection: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "flask_app.cli", "add", str(folder), "--namespace", "bench",
         "--collection", collection, "--base-url", base],
        capture_output=True,
        text=True,
        timeout=3600,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = Settings.load({}, {})
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "folder"
        folder.mkdir()
        size = write_folder(folder, args.mb, args.files)
        server = start_server(
            ["--no-llm", "--data-dir", str(Path(tmp) / "data"),
             "--model-dir", str(settings.model_dir)],
            timeout=300,
        )  # fmt: skip
        try:
            api = by_the_api(server.base, folder, "api")
            time.sleep(2)
            command = by_the_command(server.base, folder, "command")
        finally:
            server.stop()
    report: dict[str, Any] = {
        "bytes": size,
        "files": args.files,
        "api_s": round(api, 1),
        "edgerag_add_s": round(command, 1),
        "ratio": round(command / api, 3),
    }
    print(json.dumps(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
