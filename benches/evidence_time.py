"""Time the pipeline spends before the model: embedding the question,
hybrid retrieval and choosing the evidence units (which embeds every unit of
the retrieved passages), with the unit vectors remembered across questions
(`flask_app/rag/unit_vectors.py`) and without, on the same questions in
the same order, one fresh store per set; checks that both choose the same
evidence. No LLM; the real default embedder.

    .venv/bin/python benches/evidence_time.py                  # dev splits
    .venv/bin/python benches/evidence_time.py --split test --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benches import eval_sets
from benches.rag_eval import set_specs
from flask_app.app import create_app
from flask_app.rag import evidence, retrieval, unit_vectors
from flask_app.services import load_services
from flask_app.settings import Settings


def run_set(name: str, split: str) -> dict[str, Any]:
    evset = eval_sets.load(name)
    questions = [q["q"] for q in evset.questions if q["split"] == split]
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp), "no_llm": True}, {})
        services = load_services(settings)
        client = create_app(settings, services).test_client()
        documents = evset.passages()
        for lo in range(0, len(documents), 64):
            body = {"store_mode": "text", "items": documents[lo : lo + 64]}
            assert client.post("/upload", json=body).status_code == 200
        collection = services.store.edge()
        embedder = services.embedder
        assert embedder is not None
        times: dict[str, list[float]] = {"plain": [], "remembered": []}
        chosen: dict[str, list[list[str]]] = {"plain": [], "remembered": []}
        remembered = unit_vectors.UnitVectors()
        for query in questions:
            for variant in ("plain", "remembered"):  # in turn, so noise hits both alike
                # plain: nothing remembered from one question to the next
                cache = remembered if variant == "remembered" else unit_vectors.UnitVectors()
                unit_vectors.remember_in(embedder, cache)
                start = time.perf_counter()
                vector = embedder.embed([query])[0]
                retriever = retrieval.StoredCollection(collection, vector, embedder=embedder)
                hits = retriever.passages(query, 5)
                selection = evidence.select(
                    query,
                    [h.text for h in hits],
                    evidence.Scoring(),
                    lambda texts: retriever.closeness(query, texts),  # noqa: B023
                )
                times[variant].append(time.perf_counter() - start)
                chosen[variant].append([p.text for p in selection.pieces])
        services.store.close()
    same = sum(a == b for a, b in zip(chosen["plain"], chosen["remembered"], strict=True))
    return {
        "set": name,
        "questions": len(questions),
        "plain_ms": round(1000 * statistics.median(times["plain"]), 1),
        "remembered_ms": round(1000 * statistics.median(times["remembered"]), 1),
        "same_evidence": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["dev", "test"], default="dev")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for name in set_specs(None, args.split):
        rows.append(run_set(name, args.split))
        print(rows[-1], flush=True)
    if args.json:
        args.json.write_text(json.dumps({"split": args.split, "sets": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
