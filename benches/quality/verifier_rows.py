"""The verifier's rows as `verifier_fit` reads them: per question its
candidates (the greedy answer first, then the sampled ones), each graded
right, wrong or refusal, and the hidden states the server can read
(written by `benches.quality.candidates` under CACHE/verifier/<preset>/)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benches.quality.candidates import LAYERS, MEAN_LAYERS, cache_dir
from flask_app.rag.choice import is_answer

FAMILIES = ("squad", "sets")
Array = npt.NDArray[np.float64]


@dataclass
class Rows:
    """Every question of some splits: its row and its states."""

    questions: list[dict[str, Any]]
    states: dict[str, npt.NDArray[np.float16]]  # key -> (question, candidate, layer, dim)
    prompt: npt.NDArray[np.float16]  # (question, layer, dim)
    files: list[Path]

    def digest(self) -> str:
        h = hashlib.sha256()
        for path in self.files:
            h.update(path.read_bytes())
        return h.hexdigest()


def load(llm: str, family: str, split: str, root: Path | None = None) -> Rows:
    base = (root or cache_dir()) / llm / family / split
    questions: list[dict[str, Any]] = []
    states: dict[str, list[npt.NDArray[np.float16]]] = {}
    prompts = []
    files: list[Path] = []
    for where in sorted(p for p in base.glob("*") if (p / "rows.jsonl").is_file()):
        rows = [json.loads(line) for line in (where / "rows.jsonl").read_text().splitlines()]
        with np.load(where / "states.npz") as held:
            for key in held.files:
                if key != "prompt":
                    states.setdefault(key, []).append(held[key])
            prompts.append(held["prompt"])
        for row in rows:  # folds split by article, whatever its store's size
            row["group"] = where.name
        questions += rows
        files += [where / "rows.jsonl", where / "states.npz"]
    if not questions:
        raise SystemExit(f"no rows under {base}: run benches.quality.candidates first")
    stacked = {k: np.concatenate(v) for k, v in states.items()}
    return Rows(questions, stacked, np.concatenate(prompts), files)


def state_key(reads: str, layer: int, llm: str) -> tuple[str, int]:
    """Where a state is in the rows: (array key, layer index)."""
    if reads == "mean":
        return "mean", MEAN_LAYERS[llm].index(layer)
    return reads, LAYERS[llm].index(layer)


def refusal(text: str, query: str) -> bool:
    """What the server never chooses (rag.choice.is_answer): empty answers,
    refusals, the question's own words."""
    from benches.quality.rag_eval import is_refusal

    return not is_answer(text.strip(), query) or is_refusal(text)


def candidate_table(
    rows: Rows, reads: str, layer: int, llm: str, samples: int | None = None
) -> tuple[Array, Array, np.ndarray, np.ndarray]:
    """(states, labels, question index, candidate index) of every candidate
    that is an answer (not a refusal), among the first 1 + `samples`."""
    key, at = state_key(reads, layer, llm)
    held = rows.states[key]
    xs, ys, qs, cs = [], [], [], []
    for qi, row in enumerate(rows.questions):
        for ci, cand in enumerate(row["candidates"]):
            if samples is not None and ci > samples:
                break
            if refusal(cand["text"], row["query"]):
                continue
            xs.append(held[qi, ci, at])
            ys.append(cand["grade"] == "right")
            qs.append(qi)
            cs.append(ci)
    return (
        np.asarray(xs, dtype=np.float64),
        np.asarray(ys, dtype=np.float64),
        np.asarray(qs),
        np.asarray(cs),
    )


def merged(parts: list[Rows]) -> Rows:
    """One Rows of several, in order."""
    if len(parts) == 1:
        return parts[0]
    return Rows(
        [q for part in parts for q in part.questions],
        {k: np.concatenate([part.states[k] for part in parts]) for k in parts[0].states},
        np.concatenate([part.prompt for part in parts]),
        [f for part in parts for f in part.files],
    )


def train_rows(llm: str) -> Rows:
    """SQuAD's long stores, and its small ones where their rows exist."""
    parts = [load(llm, "squad", "train")]
    if any((cache_dir() / llm / "squad-small" / "train").glob("*/rows.jsonl")):
        parts.append(load(llm, "squad-small", "train"))
    return merged(parts)


def dev_rows(llm: str) -> dict[str, Rows]:
    out = {}
    for family in FAMILIES:
        try:
            out[family] = load(llm, family, "dev")
        except SystemExit:
            continue
    return out
