"""Where the expected fact is lost before the LLM: for each evaluation set and
each depth of the evidence ranking, the share of answerable questions whose
fact is among the retrieved passages and among the evidence units that reach
the prompt, and the share of questions (answerable / unanswerable) that pass
the evidence gate. No LLM; the real default embedder.

    .venv/bin/python benches/evidence_recall.py                 # dev splits
    .venv/bin/python benches/evidence_recall.py --depths 5 10 20
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benches import eval_sets
from benches.rag_eval import mentions, set_specs
from flask_app.app import create_app
from flask_app.rag import evidence, retrieval
from flask_app.services import load_services
from flask_app.settings import Settings


def run_set(name: str, split: str, depths: list[int], gate: float) -> list[dict[str, Any]]:
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
        for item in [q for q in questions if q["split"] == split]:
            vector = services.embedder.embed([item["q"]])[0]
            retriever = retrieval.StoredCollection(collection, vector)
            expected = item["expect"]
            for depth in depths:
                hits = retriever.passages(item["q"], depth)
                chosen = evidence.select(item["q"], [h.text for h in hits])
                shown = " ".join(p.text for p in chosen.pieces)
                rows.append(
                    {
                        "set": name,
                        "depth": depth,
                        "answerable": expected is not None,
                        "in_passages": expected is not None
                        and any(mentions(h.text, expected) for h in hits),
                        "in_evidence": expected is not None and mentions(shown, expected),
                        "passes_gate": chosen.best_score >= gate,
                    }
                )
        services.store.close()
    return rows


def share(rows: list[dict[str, Any]], key: str) -> float:
    return round(sum(r[key] for r in rows) / len(rows), 2) if rows else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--split", choices=["dev", "test"], default="dev")
    parser.add_argument("--depths", type=int, nargs="+", default=[5, 8, 10, 15, 20])
    parser.add_argument("--gate", type=float, default=Settings().answer_min_evidence)
    args = parser.parse_args()
    names = set_specs(None, args.split)  # a dev run leaves out the held-out sets
    rows = [r for name in names for r in run_set(name, args.split, args.depths, args.gate)]
    print(f"{args.split} split, evidence gate {args.gate}")
    for depth in args.depths:
        at = [r for r in rows if r["depth"] == depth]
        cells = []
        for name in [*names, "overall"]:
            part = [r for r in at if name == "overall" or r["set"] == name]
            answerable = [r for r in part if r["answerable"]]
            cells.append(
                f"{name}: passages {share(answerable, 'in_passages'):.2f} "
                f"evidence {share(answerable, 'in_evidence'):.2f}"
            )
        unanswerable = [r for r in at if not r["answerable"]]
        answerable = [r for r in at if r["answerable"]]
        print(
            f"depth {depth:3}: " + " | ".join(cells) + f" | gate passes answerable "
            f"{share(answerable, 'passes_gate'):.2f}, unanswerable "
            f"{share(unanswerable, 'passes_gate'):.2f}"
        )


if __name__ == "__main__":
    main()
