"""Which retrieved passages the product-code rule leaves out, for every
question of the evaluation sets that names a code: as served (a question's
code counts when a passage names it first, `evidence.on_subject`) and with
every code a passage names counted. No LLM; the real default embedder and
the served retrieval depth.

    .venv/bin/python benches/code_rule.py            # every set, both splits
    .venv/bin/python benches/code_rule.py --sets product-help own
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benches import eval_sets
from benches.rag_eval import upload_items
from flask_app.app import create_app
from flask_app.rag import evidence, retrieval
from flask_app.rag.answer import AnswerConfig
from flask_app.rag.text import codes
from flask_app.services import load_services
from flask_app.settings import Settings


def every_code(question: str, passages: Sequence[str]) -> list[bool]:
    """The rule counting any code a passage names, not only its first."""
    held = [codes(text) for text in passages]
    named = codes(question) & set().union(*held)
    return [not named or not h or bool(named & h) for h in held]


def compare(name: str) -> tuple[int, int, int]:
    """(questions naming a code, of them losing a passage, of them where the
    two rules leave out different passages) over the set's whole store."""
    evset = eval_sets.load(name)
    depth = max(5, AnswerConfig().candidates)  # what /answer retrieves for top_k 5
    naming = losing = differing = 0
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp), "no_llm": True}, {})
        services = load_services(settings)
        client = create_app(settings, services).test_client()
        upload_items(client, evset.passages())
        collection = services.store.edge()
        assert services.embedder is not None
        for item in evset.questions:
            query = item["q"]
            if not codes(query):
                continue
            naming += 1
            vector = services.embedder.embed([query])[0]
            retriever = retrieval.StoredCollection(collection, vector, embedder=services.embedder)
            passages = [hit.text for hit in retriever.passages(query, depth)]
            served, every = evidence.on_subject(query, passages), every_code(query, passages)
            losing += not all(served)
            if served != every:
                differing += 1
                left = [p[:60] for p, k in zip(passages, served, strict=True) if not k]
                other = [p[:60] for p, k in zip(passages, every, strict=True) if not k]
                print(f"[{name}/{item['split']}] {query}\n  served leaves out {left}")
                print(f"  every code would leave out {other}")
        services.store.close()
    return naming, losing, differing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=eval_sets.SETS)
    args = parser.parse_args()
    totals = [0, 0, 0]
    for name in args.sets:
        counts = compare(name)
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
        print(
            f"{name}: {counts[0]} questions name a code, {counts[1]} lose a passage, "
            f"{counts[2]} differ between the rules",
            flush=True,
        )
    print(f"all: {totals[0]} name a code, {totals[1]} lose a passage, {totals[2]} differ")


if __name__ == "__main__":
    main()
