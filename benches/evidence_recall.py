"""Where the expected fact is lost before the LLM: for each evaluation set,
each depth of the evidence ranking, each number of evidence units kept and
each weight of meaning (embedding closeness) against shared words in it, the
share of answerable questions whose fact is among the retrieved passages and
among the evidence units that reach the prompt, and the evidence's median
size. No LLM; the real default embedder.

    .venv/bin/python benches/evidence_recall.py                 # dev splits
    .venv/bin/python benches/evidence_recall.py --depths 5 10 --meaning 0 0.3 0.5 0.7
    .venv/bin/python benches/evidence_recall.py --depths 5 --units 1 2 3
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benches import eval_sets
from benches.rag_eval import mentions, set_specs
from flask_app.app import create_app
from flask_app.rag import evidence, retrieval
from flask_app.rag.answer import AnswerConfig
from flask_app.services import load_services
from flask_app.settings import Settings


def run_set(
    name: str, split: str, depths: list[int], weights: list[float], units: list[int]
) -> list[dict[str, Any]]:
    evset = eval_sets.load(name)
    documents, questions = evset.passages(), evset.questions
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp), "no_llm": True}, {})
        services = load_services(settings)
        client = create_app(settings, services).test_client()
        for lo in range(0, len(documents), 64):
            body = {"store_mode": "text", "items": documents[lo : lo + 64]}
            assert client.post("/upload", json=body).status_code == 200
        collection = services.store.edge()
        assert services.embedder is not None
        for item in [q for q in questions if q["split"] == split and q["expect"]]:
            vector = services.embedder.embed([item["q"]])[0]
            retriever = retrieval.StoredCollection(collection, vector, embedder=services.embedder)
            expected = item["expect"]
            query = item["q"]

            def closeness(texts: Sequence[str]) -> list[float] | None:
                return retriever.closeness(query, texts)  # noqa: B023 (used in this iteration)

            for depth, weight, wanted in itertools.product(depths, weights, units):
                hits = retriever.passages(query, depth)
                scoring = evidence.Scoring(units_wanted=wanted, meaning=weight)
                chosen = evidence.select(query, [h.text for h in hits], scoring, closeness)
                shown = " ".join(p.text for p in chosen.pieces)
                rows.append(
                    {
                        "set": name,
                        "depth": depth,
                        "meaning": weight,
                        "units": wanted,
                        "in_passages": any(mentions(h.text, expected) for h in hits),
                        "in_evidence": mentions(shown, expected),
                        "evidence_chars": len(shown),
                    }
                )
        services.store.close()
    return rows


def share(rows: list[dict[str, Any]], key: str) -> float:
    return round(sum(r[key] for r in rows) / len(rows), 2) if rows else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--split", choices=["dev", "test"], default="dev")
    parser.add_argument("--depths", type=int, nargs="+", default=[5, 10])
    parser.add_argument(
        "--meaning",
        type=float,
        nargs="+",
        default=[0.0, AnswerConfig().meaning],
        help="weights of embedding closeness against shared words in the evidence ranking",
    )
    parser.add_argument(
        "--units",
        type=int,
        nargs="+",
        default=[AnswerConfig().evidence_units],
        help="evidence units that reach the prompt (fewer: a shorter prompt)",
    )
    args = parser.parse_args()
    names = set_specs(None, args.split)  # a dev run leaves out the held-out sets
    rows = [
        r
        for name in names
        for r in run_set(name, args.split, args.depths, args.meaning, args.units)
    ]
    print(f"{args.split} split, answerable questions: the fact among the passages / in the prompt")
    for depth, weight, wanted in itertools.product(args.depths, args.meaning, args.units):
        at = [
            r
            for r in rows
            if r["depth"] == depth and r["meaning"] == weight and r["units"] == wanted
        ]
        cells = []
        for name in [*names, "overall"]:
            part = [r for r in at if name == "overall" or r["set"] == name]
            cells.append(
                f"{name}: {share(part, 'in_passages'):.2f} / {share(part, 'in_evidence'):.2f}"
            )
        chars = statistics.median(r["evidence_chars"] for r in at)
        head = f"depth {depth:3}, meaning {weight}, units {wanted}: "
        print(head + " | ".join(cells) + f" | {chars:.0f} chars")


if __name__ == "__main__":
    main()
