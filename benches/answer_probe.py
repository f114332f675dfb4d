"""Answerability probes: what the model's hidden state says about whether the
documents hold the answer, collected from the evaluation's dev splits.

    .venv/bin/python benches/answer_probe.py collect --llms qwen2.5-coder-0.5b

`collect` asks every dev question of the tuned sets (benches/eval_sets.TUNED:
never a test split, never the held-out set) the way `/answer` does — hybrid
retrieval, evidence units, the preset's prompt — with every gate recording
and none declining, and keeps for each: the hidden state of the prompt's last
token at every layer (read from the answer's own prefill), the signals the
server already has (the first token's refusal probability, the judge's P(yes),
the evidence score and cosines), the ungated answer and its grade, and the
best evidence line a server quoting refusals would answer with instead
(`quote`, `quote_correct`; see `probe_fit.with_quotes`). Each
answerable question is asked a second time with every passage that holds its
fact withheld from the store: an on-topic question whose documents no
longer answer it (labelled by construction, as `withheld`). Then each
question again in the rewordings of benches/results/answer_probe/reworded.json
(`reworded`: written by the 1.5B, `reword`), and once over a store holding
only its two closest notes, the set's evidence units stored one per document
(`few`: the README tour's kind of store).
Rows go to CACHE/answer_probe/<preset>[-reworded|-few].npz (the states) and
.json (the rest).

    .venv/bin/python benches/answer_probe.py search    # choose on dev: layer, C, weights, signals
    .venv/bin/python benches/answer_probe.py fit       # the probe files, from the committed rows
    .venv/bin/python benches/answer_probe.py build     # all of it: collect, search, fit
    .venv/bin/python benches/answer_probe.py cost      # time to first token: old gates vs the probe
    .venv/bin/python benches/answer_probe.py nested    # the dev frontier read by the shipped probe
    .venv/bin/python benches/answer_probe.py quotes    # best evidence lines of committed rows
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from flask import Flask

from benches import eval_sets, probe_fit
from benches.rag_eval import UNGATED, grounded, is_refusal, mentions, upload_items
from flask_app.api.http.extensions import answer_config_of
from flask_app.app import create_app
from flask_app.inference.hidden_state import FINAL
from flask_app.inference.llm import LlamaBackend, Sampling
from flask_app.inference.presets import PRESETS
from flask_app.inference.pull import known_sha256
from flask_app.rag import answerability
from flask_app.rag.answer import AnswerConfig, open_answer
from flask_app.rag.text import units
from flask_app.services import Services, load_services
from flask_app.settings import Settings


def cache_dir() -> Path:
    return Settings.load({}, os.environ).cache_dir / "answer_probe"


def ask(services: Services, config: AnswerConfig, query: str) -> dict[str, Any]:
    """One question through the core pipeline as the moorcheh route asks it."""
    llm = services.llm
    assert llm is not None
    started = time.perf_counter()
    question, grounding = grounded(services, config, query)
    assert grounding.prompt is not None
    first = None
    parts = []
    with open_answer(llm, grounding, question, config) as stream:
        for delta in stream:
            first = first or time.perf_counter()
            parts.append(delta)
    states = stream.hidden_states or {}
    reading = stream.first_token
    assert reading is not None
    return {
        "answer": "".join(parts),
        "top_probability": reading.top_probability,
        "entropy": reading.entropy,
        "prompt": grounding.prompt.messages[-1]["content"],
        # what a server quoting refusals answers instead (probe_fit.with_quotes)
        "quote": grounding.quotable(),
        "refusal_probability": stream.outcome.refusal_probability,
        "judge": stream.outcome.answerable_probability,
        "evidence_score": grounding.evidence_score,
        "closest_meaning": grounding.closest_meaning,
        "best_cosine": max((hit.score for hit in grounding.sources), default=0.0),
        "prompt_tokens": grounding.prompt.prompt_tokens,
        "ttft_s": round((first or time.perf_counter()) - started, 3),
        "states": [states[layer] for layer in sorted(states)],
    }


def graded(asked: dict[str, Any], expected: list[str] | None) -> dict[str, Any]:
    refused = is_refusal(asked["answer"])
    holds = expected is not None and mentions(asked["prompt"], expected)
    return {
        "refused": refused,
        "correct": expected is not None and not refused and mentions(asked["answer"], expected),
        "evidence_holds": holds,
        "quote_correct": quote_right(asked["quote"], expected),
    }


def quote_right(quote: str | None, expected: list[str] | None) -> bool:
    """A quoted evidence line holds the expected fact."""
    return expected is not None and quote is not None and mentions(quote, expected)


def variants(
    evset: eval_sets.EvalSet, reworded: dict[str, list[str]] | None, few: bool = False
) -> list[tuple[dict[str, Any], str, str, list[str] | None]]:
    """(question, kind, text asked, expected fact) for each dev question: asked
    as written, and with its fact's passages withheld when it has one; with
    `reworded`, each of its rewordings instead; with `few`, asked over a store
    holding only its FEW closest notes (see `notes`)."""
    out = []
    for q in [q for q in evset.questions if q["split"] == "dev"]:
        if few:
            out.append((q, "few", q["q"], q["expect"]))
            continue
        if reworded is not None:
            out += [(q, "reworded", text, q["expect"]) for text in reworded.get(q["q"], [])]
            continue
        out.append((q, "asked", q["q"], q["expect"]))
        if q["expect"] is not None:
            out.append((q, "withheld", q["q"], None))
    return out


FEW = 2  # notes in a "few" row's store: a user's handful of short documents


def closest_notes(
    services: Services, short: list[dict[str, Any]], embedded: np.ndarray, text: str
) -> list[dict[str, Any]]:
    """The FEW notes closest in meaning to `text` (`embedded`: the notes' vectors)."""
    assert services.embedder is not None
    scores = embedded @ services.embedder.embed([text])[0]
    return [short[i] for i in np.argsort(-scores, kind="stable")[:FEW]]


def notes(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The set's passages cut into their evidence units, each stored as a
    document of its own: the one-line notes the README tour uploads."""
    return [
        {"id": f"{it['id']}#{k}", "text": unit.text}
        for it in items
        for k, unit in enumerate(units(it["text"]))
    ]


@contextlib.contextmanager
def swapped(
    services: Services, client: Any, out: list[dict[str, Any]], into: list[dict[str, Any]]
) -> Iterator[None]:
    """The store with the passages `out` deleted and `into` uploaded, for
    one question; as it was afterwards (`into` may reuse `out`'s ids)."""
    edge = services.store.edge()
    if out:
        edge.delete([it["id"] for it in out])
    upload_items(client, into)
    try:
        yield
    finally:
        if into:
            edge.delete([it["id"] for it in into])
        upload_items(client, out)


@contextlib.contextmanager
def ungated_app(llm: str) -> Iterator[tuple[Services, Flask]]:
    """An app over an empty store in a temporary directory: every gate
    records, none declines, the probe is off (what it is made from)."""
    with tempfile.TemporaryDirectory() as tmp:
        overrides = {**UNGATED, "answer_probe": "off"}
        settings = Settings.load({"data_dir": Path(tmp), "llm": llm, **overrides}, os.environ)
        services = load_services(settings)
        try:
            yield services, create_app(settings, services)
        finally:
            services.store.close()


def collect_set(
    evset: eval_sets.EvalSet,
    llm: str,
    quiet: bool,
    reworded: dict[str, list[str]] | None,
    few: bool = False,
) -> list[dict[str, Any]]:
    items = evset.passages()
    rows: list[dict[str, Any]] = []
    with ungated_app(llm) as (services, app):
        client = app.test_client()
        assert services.llm is not None and isinstance(services.llm.backend, LlamaBackend)
        assert services.embedder is not None
        if few:  # the store stays empty but for each question's closest notes
            short = notes(items)
            embedded = services.embedder.embed([it["text"] for it in short])
        else:
            upload_items(client, items)
        layers = (FINAL, *range(services.llm.backend.n_layers))
        with app.app_context():
            config = replace(answer_config_of(app), hidden_layers=layers)
        for q, kind, text, expect in variants(evset, reworded, few):
            expected = q["expect"]
            held = (
                [it for it in items if mentions(it["text"], expected)] if kind == "withheld" else []
            )
            closest = closest_notes(services, short, embedded, text) if kind == "few" else []
            with swapped(services, client, held, closest):
                asked = ask(services, config, text)
            assert len(asked["states"]) == len(layers), "the backend read no hidden state"
            row = {
                "llm": llm,
                "set": evset.name,
                "split": q["split"],
                "question": text,
                "of": q["q"],  # the set's question it asks (folds keep them together)
                "expected": expected,
                "kind": kind,
                "answerable": expect is not None,
                **{k: v for k, v in asked.items() if k != "states"},
                **graded(asked, expect),
                "withheld_passages": len(held),
                "states": np.stack(asked["states"]).astype(np.float16),
                "layers": list(layers),
            }
            rows.append(row)
            if not quiet:
                mark = "ok " if (row["correct"] or (expect is None and row["refused"])) else "BAD"
                print(f"[{llm} {evset.name} {kind}] {mark} {text}\n      -> {row['answer'][:160]}")
    return rows


# --- the dev questions asked again in other words ----------------------------------------

PARAPHRASES = Path(__file__).parent / "results" / "answer_probe" / "reworded.json"
REWORDINGS = 2
REWRITE = (
    "Rewrite the question below the way another person would ask it: other everyday "
    "words, the same meaning, every name and number kept. Reply with the new question only."
)
_NAMED = re.compile(r"\b(?:[A-Z][\w'-]*|\w*\d[\w.,:/-]*)")


def keeps_names(original: str, rewritten: str) -> bool:
    """Every capitalised word after the first and every number of the original is kept."""
    words = _NAMED.findall(original)[1:] if original[:1].isupper() else _NAMED.findall(original)
    return all(w.lower() in rewritten.lower() for w in words)


def reword(args: argparse.Namespace) -> None:
    """Each dev question of the tuned sets rewritten `REWORDINGS` times by the
    1.5B (seeded sampling, so the file remakes the same): more questions of
    the same kinds, their labels by construction (the original's expected
    fact, or none), for training only."""
    settings = Settings.load({"llm": "qwen2.5-coder-1.5b"}, os.environ)
    backend = LlamaBackend(settings.llm_path(), n_ctx=1024, n_threads=settings.llm_threads)
    out: dict[str, dict[str, list[str]]] = {}
    for name in args.sets:
        evset = eval_sets.load(name)
        out[name] = {}
        for q in [q for q in evset.questions if q["split"] == "dev"]:
            kept: list[str] = []
            for seed in range(REWORDINGS * 4):
                if len(kept) == REWORDINGS:
                    break
                messages = [{"role": "user", "content": f"{REWRITE}\n\nQuestion: {q['q']}"}]
                text = (
                    "".join(
                        backend.generate(
                            backend.render(messages),  # type: ignore[arg-type]
                            max_tokens=60,
                            sampling=Sampling(temperature=0.8, seed=seed),
                            probe=None,
                        )
                    )
                    .strip()
                    .strip('"')
                )
                text = text.removeprefix("Question:").strip()
                fresh = text.lower() != q["q"].lower() and text.lower() not in map(str.lower, kept)
                if text.endswith("?") and "\n" not in text and fresh and keeps_names(q["q"], text):
                    kept.append(text)
            out[name][q["q"]] = kept
            print(f"[{name}] {q['q']} -> {kept}", flush=True)
    PARAPHRASES.parent.mkdir(parents=True, exist_ok=True)
    PARAPHRASES.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {PARAPHRASES}")


def save(rows: list[dict[str, Any]], directory: Path, llm: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(directory / f"{llm}.npz", states=np.stack([r["states"] for r in rows]))
    meta = [{k: v for k, v in r.items() if k != "states"} for r in rows]
    (directory / f"{llm}.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")


def load(directory: Path, llm: str) -> tuple[list[dict[str, Any]], np.ndarray]:
    """The collected rows of `llm`, its rewordings' after the rest when collected."""
    rows: list[dict[str, Any]] = []
    states = []
    for stem in (llm, f"{llm}-reworded", f"{llm}-few"):
        if stem == llm or (directory / f"{stem}.json").is_file():
            rows += json.loads((directory / f"{stem}.json").read_text())
            states.append(np.load(directory / f"{stem}.npz")["states"])
    for row in rows:
        row.setdefault("of", row["question"])
    return rows, np.concatenate(states)


def collect(args: argparse.Namespace) -> None:
    """The rows of every preset: the questions as asked and withheld (`<llm>`),
    then their rewordings (`<llm>-reworded`)."""
    rewordings = json.loads(PARAPHRASES.read_text()) if PARAPHRASES.is_file() else {}
    for llm in args.llms:
        for name in ("asked", "reworded", "few") if rewordings else ("asked", "few"):
            if name in args.skip:
                continue
            rows: list[dict[str, Any]] = []
            started = time.perf_counter()
            for set_name in args.sets:
                reworded = rewordings.get(set_name, {}) if name == "reworded" else None
                evset = eval_sets.load(set_name)
                rows += collect_set(evset, llm, args.quiet, reworded, few=name == "few")
                print(
                    f"{llm}: {set_name} ({name}) done, {len(rows)} rows, "
                    f"{time.perf_counter() - started:.0f} s",
                    file=sys.stderr,
                )
            stem = llm if name == "asked" else f"{llm}-{name}"
            save(rows, args.data, stem)
            print(f"wrote {args.data / stem}.json and .npz ({len(rows)} rows)")


# --- search and fit (dev rows only) ---------------------------------------------------

TRAINING = Path(__file__).parent / "results" / "answer_probe"
# The share of the dev splits' unanswerable questions a probe must decline: the
# test targets (0.5B 70%, 1.5B 85%) with a margin for 52 dev questions (42 and
# 48 of 52 are the fewest whose one-sided 90% Clopper-Pearson bound reaches them).
REFUSAL_TARGETS = {"qwen2.5-coder-0.5b": 0.80, "qwen2.5-coder-1.5b": 0.92}
C_GRID = (0.003, 0.01, 0.03, 0.1)
# the refusal targets of the dev frontier's table (docs/answer-quality.md)
DEV_TARGETS = (0.70, 0.75, 0.80, 0.85, 0.90, 0.92, 0.95)
WITHHELD_WEIGHTS = (0.0, 0.5, 1.0)
SIGNAL_SETS = (
    (),
    ("refusal_logit",),
    ("refusal_logit", "meaning"),
    ("refusal_logit", "meaning", "judge_logit"),
    ("refusal_logit", "meaning", "evidence_score", "best_cosine"),
)


def rows_at(meta: list[dict[str, Any]], states: np.ndarray, layer: int) -> probe_fit.Rows:
    index = meta[0]["layers"].index(layer)
    return probe_fit.Rows(meta, states[:, index, :].astype(np.float64))


def stage1_aucs(rows: probe_fit.Rows, choice: probe_fit.HiddenChoice) -> tuple[float, float]:
    """Stage 1's out-of-fold AUC over six folds, and with each set left out in
    turn; where few-passage rows were collected, each the mean of the asked
    rows' AUC and theirs (a handful of documents is how many users start)."""
    kfold = probe_fit.stage1_oof(rows, choice, probe_fit.kfolds(rows))
    by_set = probe_fit.stage1_oof(rows, choice, probe_fit.set_folds(rows))
    return _auc(rows, kfold), _auc(rows, by_set)


def _auc(rows: probe_fit.Rows, score: np.ndarray) -> float:
    kinds = ("asked", "few") if rows.kind("few").any() else ("asked",)
    return sum(probe_fit.gate_auc(rows, score, kind) for kind in kinds) / len(kinds)


def search(args: argparse.Namespace) -> None:
    """Layers first (C 0.01, no withheld rows), then C × withheld weight on the
    three best, then the signal sets; each by the mean of the six-fold and the
    set-left-out AUCs. The choice and the chosen layer's rows go to TRAINING."""
    for llm in args.llms:
        meta, states = load(args.data, llm)
        report: dict[str, Any] = {"layers": {}, "grid": [], "signals": {}}
        for layer in args.layers or meta[0]["layers"]:
            aucs = stage1_aucs(rows_at(meta, states, layer), probe_fit.HiddenChoice(0.01, 0.0))
            report["layers"][layer] = aucs
            print(
                f"{llm} layer {layer}: AUC {aucs[0]:.3f}, sets left out {aucs[1]:.3f}", flush=True
            )
        best_layers = sorted(report["layers"], key=lambda k: -sum(report["layers"][k]))[:3]
        grid = []
        kinds = {r["kind"] for r in meta}
        reworded_weights = (0.0, 1.0) if "reworded" in kinds else (0.0,)
        few_weights = (0.0, 1.0) if "few" in kinds else (0.0,)
        for layer in best_layers:
            rows = rows_at(meta, states, layer)
            for c in C_GRID:
                for withheld in WITHHELD_WEIGHTS:
                    for reworded in reworded_weights:
                        for few in few_weights:
                            tried = probe_fit.HiddenChoice(c, withheld, reworded, few)
                            aucs = stage1_aucs(rows, tried)
                            grid.append((sum(aucs) / 2, layer, c, withheld, reworded, few, aucs))
                            print(
                                f"{llm} layer {layer} C {c} withheld {withheld} "
                                f"reworded {reworded} few {few}: "
                                f"AUC {aucs[0]:.3f}, sets left out {aucs[1]:.3f}",
                                flush=True,
                            )
        report["grid"] = [g[1:] for g in grid]
        _, layer, c, withheld, reworded, few, _ = max(grid)
        rows = rows_at(meta, states, layer)
        hidden = probe_fit.HiddenChoice(c, withheld, reworded, few)
        folds, by_set = probe_fit.kfolds(rows), probe_fit.set_folds(rows)
        h_k, h_s = (probe_fit.stage1_oof(rows, hidden, f) for f in (folds, by_set))
        best_signals: tuple[str, ...] = ()
        best_score = -1.0
        # the judge is a second prefill: only for a preset that asks it anyway
        asks_judge = PRESETS[llm].calibration.judge > 0
        for signals in SIGNAL_SETS:
            if "judge_logit" in signals and not asks_judge:
                continue
            learn = hidden.learns(rows)
            p_k = probe_fit.stage2_oof(rows, h_k, signals, folds, learn)
            p_s = probe_fit.stage2_oof(rows, h_s, signals, by_set, learn)
            aucs = _auc(rows, p_k), _auc(rows, p_s)
            report["signals"]["+".join(signals) or "hidden only"] = aucs
            print(f"{llm} signals {signals}: AUC {aucs[0]:.3f}, sets left out {aucs[1]:.3f}")
            if sum(aucs) / 2 > best_score + 1e-9:
                best_signals, best_score = signals, sum(aucs) / 2
        choice = probe_fit.Choice(
            layer,
            c,
            withheld,
            best_signals,
            REFUSAL_TARGETS[llm],
            reworded_weight=reworded,
            few_weight=few,
        )
        refusals, yes_no = quoting(llm, rows, choice)
        choice = replace(choice, quote_refusals=refusals, quote_yes_no=yes_no)
        save_training(llm, meta, rows.hidden, choice, report)
        print(f"{llm}: chose {choice}")


def save_training(
    llm: str,
    meta: list[dict[str, Any]],
    hidden: np.ndarray,
    choice: probe_fit.Choice,
    report: dict[str, Any],
) -> None:
    """What `fit` needs, committed: the dev rows (labels and signals), the chosen
    layer's states as float16 (as collected) and the choice."""
    TRAINING.mkdir(parents=True, exist_ok=True)
    keep = (
        "set",
        "split",
        "question",
        "of",
        "expected",
        "kind",
        "answerable",
        "answer",
        "refused",
        "correct",
        "evidence_holds",
        "refusal_probability",
        "judge",
        "evidence_score",
        "closest_meaning",
        "best_cosine",
        "top_probability",
        "entropy",
        "quote",
        "quote_correct",
    )
    rows = [{k: r[k] for k in keep} for r in meta]
    path = Settings.load({"llm": llm}, os.environ).llm_path()
    body = {
        "llm": llm,
        "gguf": path.name,
        "gguf_sha256": known_sha256(path),
        "choice": dataclasses.asdict(choice),
        "search": report,
        "rows": rows,
    }
    (TRAINING / f"{llm}.json").write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")
    np.save(TRAINING / f"{llm}.npy", hidden.astype(np.float16))


def load_training(
    llm: str, directory: Path = TRAINING
) -> tuple[probe_fit.Rows, probe_fit.Choice, dict[str, Any]]:
    body = json.loads((directory / f"{llm}.json").read_text())
    hidden = np.load(directory / f"{llm}.npy").astype(np.float64)
    choice = choice_of(body)
    rows = probe_fit.Rows(body["rows"], hidden)
    return probe_fit.as_served(rows, choice, refusal_gate(llm)), choice, body


def choice_of(body: dict[str, Any]) -> probe_fit.Choice:
    """The choice a training file records (its JSON holds the signals as a list)."""
    return probe_fit.Choice(**{**body["choice"], "signals": tuple(body["choice"]["signals"])})


def refusal_gate(llm: str) -> float:
    """The first-token refusal probability above which the preset's server
    stops its model (and quotes, when its probe says so)."""
    return PRESETS[llm].calibration.refusal_probability


def probe_document(llm: str, directory: Path = TRAINING) -> str:
    """The probe file's text for `llm`, made from its committed training rows."""
    rows, choice, body = load_training(llm, directory)
    fitted = probe_fit.fit(rows, choice)
    dev = probe_fit.outcome(rows, fitted.oof, fitted.threshold)
    names = ("hidden", *choice.signals)
    doc = {
        "format": answerability.FORMAT,
        "preset": llm,
        "gguf": body["gguf"],
        "gguf_sha256": body["gguf_sha256"],
        "layer": choice.layer,
        "hidden": {"weights": fitted.hidden.weights.tolist(), "bias": fitted.hidden.bias},
        "combine": {
            "weights": dict(zip(names, fitted.combine.weights.tolist(), strict=True)),
            "bias": fitted.combine.bias,
            "fill": fitted.fill,
        },
        "threshold": fitted.threshold,
        "quote_refusals": choice.quote_refusals,
        "quote_yes_no": choice.quote_yes_no,
        "trained": {
            "command": f".venv/bin/python benches/answer_probe.py build --llms {llm}",
            "rows": len(rows.meta),
            "choice": dataclasses.asdict(choice),
            "dev_out_of_fold": {
                "auc": round(probe_fit.gate_auc(rows, fitted.oof), 4),
                "refusals": round(dev.refusals, 4),
                "accuracy": round(dev.accuracy, 4),
            },
        },
    }
    return json.dumps(doc, indent=1) + "\n"


def ground_again(evset: eval_sets.EvalSet, llm: str, kinds: set[str]) -> dict[str, str | None]:
    """Each dev question's best evidence line, by "kind|text", grounded as
    `collect_set` grounds it (without asking the model): over the whole
    store (asked, reworded) and over its FEW closest notes (few)."""
    items = evset.passages()
    rewordings = json.loads(PARAPHRASES.read_text()) if "reworded" in kinds else {}
    dev = [q for q in evset.questions if q["split"] == "dev"]
    out: dict[str, str | None] = {}
    with ungated_app(llm) as (services, app):
        client = app.test_client()
        assert services.embedder is not None
        with app.app_context():
            config = answer_config_of(app)

        def best(text: str) -> str | None:
            return grounded(services, config, text)[1].quotable()

        if "few" in kinds:
            short = notes(items)
            embedded = services.embedder.embed([it["text"] for it in short])
            for q in dev:
                closest = closest_notes(services, short, embedded, q["q"])
                with swapped(services, client, [], closest):
                    out[f"few|{q['q']}"] = best(q["q"])
        upload_items(client, items)
        for q in dev:
            out[f"asked|{q['q']}"] = best(q["q"])
            for text in rewordings.get(evset.name, {}).get(q["q"], []):
                out[f"reworded|{text}"] = best(text)
    return out


def quoting(llm: str, rows: probe_fit.Rows, choice: probe_fit.Choice) -> tuple[bool, bool]:
    """Whether `llm`'s server quotes refusals and yes-or-no questions
    (`probe_fit.chosen_quoting`), with dev's outcome of each way printed."""
    outcomes = probe_fit.quoting_outcomes(rows, choice, refusal_gate(llm))
    for (by_refusal, by_yes_no), dev in outcomes.items():
        print(
            f"{llm}: refusals quoted {by_refusal}, yes-or-no questions {by_yes_no}: "
            f"dev {dev.refusals:.1%} declined / {dev.accuracy:.1%} right "
            f"(threshold {dev.threshold:.3f})"
        )
    return probe_fit.chosen_quoting(outcomes)


def quotes(args: argparse.Namespace) -> None:
    """The committed rows' best evidence lines (`quote`, `quote_correct`),
    grounded again without the model, and which quoting dev prefers
    (`quoting`: refusals, yes-or-no questions, both or neither):
    for rows collected before `collect` recorded them."""
    for llm in args.llms:
        path = TRAINING / f"{llm}.json"
        body = json.loads(path.read_text())
        kinds = {r["kind"] for r in body["rows"]} - {"withheld"}
        lines: dict[str, str | None] = {}
        for name in sorted({r["set"] for r in body["rows"]}):
            lines |= ground_again(eval_sets.load(name), llm, kinds)
            print(f"{llm}: {name} grounded again", file=sys.stderr)
        for r in body["rows"]:
            quote = None if r["kind"] == "withheld" else lines[f"{r['kind']}|{r['question']}"]
            r["quote"] = quote
            r["quote_correct"] = quote_right(quote, r["expected"] if r["answerable"] else None)
        rows = probe_fit.Rows(body["rows"], np.load(TRAINING / f"{llm}.npy").astype(np.float64))
        refusals, yes_no = quoting(llm, rows, choice_of(body))
        body["choice"] = {**body["choice"], "quote_refusals": refusals, "quote_yes_no": yes_no}
        path.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")
        print(f"{llm}: quote refusals {refusals}, yes-or-no questions {yes_no} (wrote {path})")


def fit(args: argparse.Namespace) -> None:
    for llm in args.llms:
        path = answerability.PROBES / f"{llm}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(probe_document(llm))
        print(f"wrote {path}")


def dev_frontier(rows: probe_fit.Rows, fitted: probe_fit.Fitted) -> list[probe_fit.Outcome]:
    """Each of DEV_TARGETS met by `fitted`'s out-of-fold probabilities: the
    lowest threshold that meets it, and what dev says it gives."""
    return [probe_fit.threshold_for(rows, fitted.oof, target) for target in DEV_TARGETS]


def nested(args: argparse.Namespace) -> None:
    """Does the threshold read off out-of-fold probabilities hold for the probe
    that ships? Each dev row scored by the whole fit made without its fold,
    at the thresholds the out-of-fold probabilities give each refusal target."""
    for llm in args.llms:
        rows, choice, _ = load_training(llm)
        shipped = probe_fit.fit(rows, choice)
        p_nested, thresholds = probe_fit.nested(rows, choice)
        print(f"{llm}: threshold {shipped.threshold:.3f}; each fold's: ", end="")
        print(", ".join(f"{t:.3f}" for t in thresholds))
        for target, oof in zip(DEV_TARGETS, dev_frontier(rows, shipped), strict=True):
            held = probe_fit.outcome(rows, p_nested, oof.threshold)
            print(
                f"  target {target:.0%}: threshold {oof.threshold:.3f}, out-of-fold "
                f"{oof.refusals:.0%} declined / {oof.accuracy:.0%} right, nested "
                f"{held.refusals:.0%} / {held.accuracy:.0%}"
            )
        print(f"  per set at {shipped.threshold:.3f}, out-of-fold / nested, declined / right:")
        oof_sets = probe_fit.outcome_per_set(rows, shipped.oof, shipped.threshold)
        held_sets = probe_fit.outcome_per_set(rows, p_nested, shipped.threshold)
        for name, oof in oof_sets.items():
            held = held_sets[name]
            print(
                f"    {name}: {oof.refusals:.0%} / {oof.accuracy:.0%}, "
                f"{held.refusals:.0%} / {held.accuracy:.0%}"
            )


def cost(args: argparse.Namespace) -> None:
    """Time to first token of the dev questions of two own-words sets, three
    ways in turn per question, each after another question's prompt (the
    system prompt cached, the documents not): the old gates; the old gates
    reading the probe's layer (what the tap costs); the shipped probe (no
    judge unless the probe uses it). Medians and ratios to the first."""
    results: dict[str, Any] = {}
    for llm in args.llms:
        times: dict[str, list[float]] = {
            "old gates": [],
            "old gates + hidden state": [],
            "probe": [],
        }
        for name in ("town-notices", "product-help"):
            evset = eval_sets.load(name)
            with tempfile.TemporaryDirectory() as tmp:
                settings = Settings.load({"data_dir": Path(tmp), "llm": llm}, os.environ)
                services = load_services(settings)
                app = create_app(settings, services)
                client = app.test_client()
                items = evset.passages()
                r = client.post("/upload", json={"store_mode": "text", "items": items})
                assert r.status_code == 200, r.get_json()
                assert services.gate.probe is not None, services.gate.reason
                with app.app_context():
                    shipped = replace(answer_config_of(app), max_tokens=1)
                calibration = settings.calibration()
                old = replace(shipped, probe=None, judge=calibration.judge)
                configs = {
                    "old gates": old,
                    "old gates + hidden state": replace(
                        old, hidden_layers=(services.gate.probe.layer,)
                    ),
                    "probe": shipped,
                }
                questions = [q["q"] for q in evset.questions if q["split"] == "dev"]
                questions = questions[: args.questions // 2]
                for i, query in enumerate(questions):
                    order = list(configs)[i % 3 :] + list(configs)[: i % 3]
                    for key in order:
                        other = questions[(i + 1) % len(questions)]
                        ask(services, configs[key], other)  # the cache now holds another prompt
                        times[key].append(ask(services, configs[key], query)["ttft_s"])
                services.store.close()
        base = statistics.median(times["old gates"])
        results[llm] = {
            key: {
                "median_ttft_s": statistics.median(v),
                "ratio": statistics.median(v) / base,
                "n": len(v),
            }
            for key, v in times.items()
        }
        for key, row in results[llm].items():
            median, ratio = row["median_ttft_s"], row["ratio"]
            print(f"{llm} {key}: TTFT median {median:.3f} s ({ratio:.3f}x), n {row['n']}")
    out = Path(__file__).parent / "results" / "answer_probe_cost.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    steps = {
        "build": "collect, search and fit: the probe files from the sets",
        "collect": "ask the dev questions, keep states and signals (in --data)",
        "search": "choose layer, C, withheld weight and signals on dev (-> benches/results)",
        "fit": "make the probe files from the committed training rows",
        "cost": "time to first token with and without reading the hidden state",
        "reword": "the dev questions in other words, written by the 1.5B (-> benches/results)",
        "nested": "the dev frontier read by the shipped kind of probe (nested folds)",
        "quotes": "the committed rows' best evidence lines, and whether dev quotes refusals",
    }
    for name, text in steps.items():
        step = sub.add_parser(name, help=text)
        step.add_argument("--llms", nargs="+", choices=list(PRESETS), default=list(PRESETS))
        step.add_argument("--data", type=Path, default=cache_dir(), help="the collected rows")
        if name in ("build", "collect", "reword"):
            step.add_argument("--sets", nargs="+", default=eval_sets.TUNED)
            step.add_argument("--quiet", action="store_true")
            step.add_argument(
                "--skip",
                nargs="*",
                default=[],
                choices=["asked", "reworded", "few"],
                help="row kinds already collected",
            )
        if name == "cost":
            step.add_argument("--questions", type=int, default=40)
        if name == "search":
            step.add_argument(
                "--layers", nargs="+", type=int, help="the layers to try (default: every one)"
            )
    args = parser.parse_args()
    args.layers = getattr(args, "layers", None)
    if args.command == "reword" or (args.command == "build" and not PARAPHRASES.is_file()):
        reword(args)
    if args.command in ("build", "collect"):
        collect(args)
    if args.command in ("build", "search"):
        search(args)
    if args.command in ("build", "fit"):
        fit(args)
    if args.command == "cost":
        cost(args)
    if args.command == "nested":
        nested(args)
    if args.command == "quotes":
        quotes(args)


if __name__ == "__main__":
    main()
