"""Where the server's resident memory goes, stage by stage, with its default
models (or `--llm NAME`), through the README tour.

    .venv/bin/python benches/serving/memory.py [--llm qwen2.5-coder-0.5b] [--json out.json]

Then, as the acceptance measure, a real `edgerag serve` runs the same tour
over HTTP and its resident memory is read the same way after the answers.

The server's own objects are built in this process in the order `edgerag
serve` builds them, and the tour runs through the app (uploads, searches,
answers, streamed answers); after each stage `/proc/self/smaps` is read and
its resident pages split into: the LLM's GGUF, the embedder's GGUF (both
mapped from their files), other mapped files (Python, NumPy, BLAS and
llama.cpp's code) and anonymous memory (KV cache, llama.cpp's compute
buffers, the batched encoder's weights and activations, the BLAS threads'
buffers, the Python heap). The tour's requests are the README's.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
from pathlib import Path
from typing import Any

from benches.serving.tour import TOUR

MB = 1 << 20

QUESTIONS = [
    "What is the guest Wi-Fi network called?",
    "What's the name of the visitor wireless network?",
    "On which day is the museum closed?",
    "What is the Wi-Fi password?",
]


def resident(
    llm_file: Path | None, embed_file: Path | None, pid: int | str = "self"
) -> dict[str, float]:
    """Resident MB of process `pid` by kind of mapping."""
    out = {"llm gguf": 0.0, "embedder gguf": 0.0, "other files": 0.0, "anonymous": 0.0}
    kind = "anonymous"
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if not head:
                continue
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                path = head[5] if len(head) > 5 else ""
                if llm_file is not None and path == str(llm_file):
                    kind = "llm gguf"
                elif embed_file is not None and path == str(embed_file):
                    kind = "embedder gguf"
                elif path.startswith("/"):
                    kind = "other files"
                else:
                    kind = "anonymous"  # heap, stack, anonymous mappings
            elif head[0] == "Rss:":
                out[kind] += int(head[1]) / 1024
    out["total"] = sum(out.values())
    return {k: round(v, 1) for k, v in out.items()}


def kv_cache_mb(llm_file: Path, n_ctx: int) -> float:
    """K and V of every layer for `n_ctx` positions, float16."""
    from gguf import GGUFReader

    fields = {k: f.contents() for k, f in GGUFReader(str(llm_file)).fields.items()}
    arch = fields["general.architecture"]
    layers, heads = int(fields[f"{arch}.block_count"]), int(fields[f"{arch}.attention.head_count"])
    kv_heads = int(fields.get(f"{arch}.attention.head_count_kv", heads))
    head_dim = int(fields[f"{arch}.embedding_length"]) // heads
    return round(2 * layers * n_ctx * kv_heads * head_dim * 2 / MB, 1)


def serve_the_tour(data_dir: Path, llm: str, llm_file: Path, embed_file: Path) -> dict[str, float]:
    import requests

    from tests.http_client import start_server

    server = start_server(
        ["--data-dir", str(data_dir), *(["--llm", llm] if llm else [])], timeout=300
    )
    try:
        base = server.base
        r = requests.post(base + "/upload", json={"store_mode": "text", "items": TOUR}, timeout=60)
        assert r.status_code == 200, r.text
        for question in QUESTIONS:
            r = requests.post(base + "/answer", json={"query": question}, timeout=120)
            assert r.status_code == 200, r.text
        r = requests.post(base + "/answer/stream", json={"query": QUESTIONS[1]}, timeout=120)
        assert r.status_code == 200, r.text
        return resident(llm_file, embed_file, server.proc.pid)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--llm", default="")
    parser.add_argument("--n-ctx", type=int, default=0, help="0: the server's default")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    stages: list[tuple[str, dict[str, float]]] = []

    def stage(name: str, llm_file: Path | None = None, embed_file: Path | None = None) -> None:
        gc.collect()
        stages.append((name, resident(llm_file, embed_file)))
        print(f"{name:44} {stages[-1][1]}", flush=True)

    stage("python + imports (before the app)")
    from flask_app.app import create_app
    from flask_app.inference.embed import LlamaEmbedder
    from flask_app.services import assemble, load_services
    from flask_app.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        options: dict[str, Any] = {"data_dir": Path(tmp) / "data"}
        if args.llm:
            options["llm"] = args.llm
        if args.n_ctx:
            options["n_ctx"] = args.n_ctx
        settings = Settings.load({**options, "no_embedder": True}, {})
        llm_file, embed_file = settings.llm_path(), settings.embed_path()
        services = load_services(settings)  # the store and the LLM, as the server
        stage("LLM loaded", llm_file, embed_file)
        assert services.llm is not None
        embedder = LlamaEmbedder(
            embed_file,
            n_threads=settings.embed_threads,
            idle_threads=settings.embed_idle_threads,
            lend_idle_threads=lambda: False,
        )
        settings = Settings.load(options, {})
        services = assemble(settings, services.store, services.llm, embedder, gate=services.gate)
        stage("embedder loaded", llm_file, embed_file)
        app = create_app(settings, services)
        client = app.test_client()
        stage("app created", llm_file, embed_file)
        r = client.post("/upload", json={"store_mode": "text", "items": TOUR})
        assert r.status_code == 200, r.get_data(as_text=True)
        r = client.post("/search", json={"query": "when is the museum open?", "top_k": 1})
        assert r.status_code == 200, r.get_data(as_text=True)
        stage("tour uploaded and searched", llm_file, embed_file)
        for question in QUESTIONS:
            r = client.post("/answer", json={"query": question})
            assert r.status_code == 200, r.get_data(as_text=True)
        r = client.post("/answer/stream", json={"query": QUESTIONS[1]})
        assert r.status_code == 200 and b"done" in r.get_data()
        stage("after the tour's answers", llm_file, embed_file)
        services.store.close()
        served = serve_the_tour(Path(tmp) / "served", args.llm, llm_file, embed_file)
    print(f"{'edgerag serve, after the tour (HTTP)':44} {served}")
    kv = kv_cache_mb(llm_file, settings.n_ctx)
    weights = round(llm_file.stat().st_size / MB, 1)
    llm_anon = stages[1][1]["anonymous"] - stages[0][1]["anonymous"]
    encoder = stages[2][1]["anonymous"] - stages[1][1]["anonymous"]
    parts = {
        "LLM weights (the GGUF's size; read into memory, most repacked)": weights,
        f"LLM KV cache (f16, n_ctx {settings.n_ctx})": kv,
        "LLM compute buffers and the rest of its load": round(llm_anon - weights - kv, 1),
        "embedder (encoder weights, tokenizer)": round(encoder, 1),
        "the rest: Python, code, store, app, net of what the tour freed": round(
            stages[-1][1]["total"]
            - stages[0][1]["total"]
            - llm_anon
            - encoder
            + stages[0][1]["total"],
            1,
        ),
    }
    print("breakdown (MB):")
    for name, mb in parts.items():
        print(f"  {name:64} {mb:8.1f}")
    report = {
        "llm": settings.llm,
        "n_ctx": settings.n_ctx,
        "stages": dict(stages),
        "breakdown_mb": parts,
        "served_after_tour": served,
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
