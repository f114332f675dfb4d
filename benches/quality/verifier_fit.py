"""The verifier: fitted on the train rows, chosen on dev, written as a file per preset.

    .venv/bin/python -m benches.quality.verifier_fit layers --llm qwen2.5-coder-0.5b
    .venv/bin/python -m benches.quality.verifier_fit frontier --llm qwen2.5-coder-0.5b
    .venv/bin/python -m benches.quality.verifier_fit build --llm qwen2.5-coder-0.5b

Rows come from `benches.quality.candidates` (CACHE/verifier/<preset>/): per
question its candidates (the greedy answer first, then the sampled ones),
each graded right, wrong or a refusal, with the hidden states the server can
read. A refusal is never chosen, so the probe learns right against wrong on
the others; an unanswerable question's every answer is wrong.

- `layers`: the AUC, right against wrong on dev, of a probe fitted on train
  for each state the rows hold (the last token's at each layer, the mean
  over the answer's tokens, the state after 8 and 16 tokens), by family.
- `frontier`: served as the server would serve (the greedy answer, then
  `samples` sampled ones unless the greedy one reaches `accept`; the best
  that is not a refusal; declined below the threshold), the share of
  answerable questions answered right, answered wrong, and of unanswerable
  ones declined, along the threshold, for each number of samples, on dev.
- `build`: the probe file for the choice in `CHOICES` (fitted on train,
  its threshold the highest-right point of dev that meets the decline
  target on every family), with the sha256 of the rows it was fitted on.
  The same rows give the same file, bit for bit.
- `floor`: to the preset's file as it stands, an answerability probe over
  the prompt (fitted on train) and the floor below which no candidate is
  written: the highest that costs at most 2% of dev's right greedy answers.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from benches.quality.candidates import LAYERS, MEAN_LAYERS, cache_dir
from benches.quality.served_answer import cut, served_tokens
from flask_app.inference.presets import PRESETS
from flask_app.rag import verifier
from flask_app.rag.choice import is_answer

FAMILIES = ("squad", "sets")
# the greedy answer is chosen unless a sampled one is likelier by more than
# this (`benches/quality/choice_rules.py`: on dev, 0.05 to 0.08 answered as
# many right with fewer wrong than 0 on SQuAD, the same on our sets)
FIRST_MARGIN = 0.05
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
        for row in rows:
            row["group"] = f"{family}/{where.name}"
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


@dataclass(frozen=True)
class Probe:
    """A standardised logistic regression over one state."""

    reads: str
    layer: int
    mean: Array
    scale: Array
    coef: Array
    intercept: float

    def logits(self, x: Array) -> Array:
        return ((x - self.mean) / self.scale) @ self.coef + self.intercept

    def folded(self) -> tuple[list[float], float]:
        """Weights and bias over the raw state (the standardisation folded in)."""
        w = self.coef / self.scale
        return [float(v) for v in w], float(self.intercept - np.dot(w, self.mean))


def fit_probe(x: Array, y: Array, reads: str, layer: int, c: float) -> Probe:
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    model = LogisticRegression(C=c, max_iter=2000, tol=1e-6)
    model.fit((x - mean) / scale, y)
    return Probe(
        reads, layer, mean, scale, model.coef_[0].astype(np.float64), float(model.intercept_[0])
    )


def auc(y: Array, score: Array) -> float:
    return float(roc_auc_score(y, score)) if 0 < y.sum() < len(y) else float("nan")


# --- the second stage: the probe's logit beside what else the server knows ---------

COMBINED = ("agreement", "logprob", "grounded", "answerable")


def shipped_prompt_probe(llm: str) -> dict[str, Any] | None:
    """The answerability probe over the prompt's last token that the preset's
    shipped file carries, as the file holds it (None: it has none); a rebuilt
    file carries it on unchanged."""
    path = verifier.verifier_path(llm)
    if not path.is_file():
        return None
    return _answerable_entry(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _answerable_entry(path: Path, _mtime_ns: int) -> dict[str, Any] | None:
    """(read once per version of the file: `features` runs many times)"""
    held: dict[str, Any] | None = json.loads(path.read_text()).get("answerable")
    return held


def answerability_logits(rows: Rows, llm: str, qs: np.ndarray) -> Array:
    """The shipped prompt probe's logit for each question of `qs`, as the
    server computes it (NaN: no probe, or its layer not in the rows)."""
    held = shipped_prompt_probe(llm)
    if held is None or held["layer"] not in LAYERS[llm]:
        return np.full(len(qs), np.nan)
    probe = verifier.LinearProbe.from_dict(held)
    at = LAYERS[llm].index(probe.layer)
    return np.array([probe.logit(rows.prompt[int(q), at].astype(np.float32)) for q in qs])


def prompt_table(rows: Rows, llm: str, layer: int) -> tuple[Array, Array]:
    """Per question: the prompt's last-token state at `layer`, and whether
    its greedy answer is right (an unanswerable question's never is)."""
    x = rows.prompt[:, LAYERS[llm].index(layer)].astype(np.float64)
    y = np.array([row["candidates"][0]["grade"] == "right" for row in rows.questions])
    return x, y.astype(np.float64)


def fit_prompt_probe(rows: Rows, llm: str, layer: int, c: float) -> Probe:
    """An answerability probe fitted on the rows: the prompt's state -> the
    greedy answer is right (for a preset whose file ships none)."""
    x, y = prompt_table(rows, llm, layer)
    return fit_probe(x, y, "prompt", layer, c)


def prompt_out_of_fold(rows: Rows, llm: str, layer: int, c: float) -> Array:
    """The fitted prompt probe's logit of every train question from a fit without its article."""
    x, y = prompt_table(rows, llm, layer)
    groups = np.array([row["group"] for row in rows.questions])
    return folded_logits(x, y, groups, "prompt", layer, c)


def prompt_logits(rows: Rows, llm: str, prompt: Probe | None) -> Array:
    """Per question: the answerability logit, from the fitted prompt probe
    when given, else from the shipped one (NaN: neither)."""
    if prompt is None:
        return answerability_logits(rows, llm, np.arange(len(rows.questions)))
    x, _ = prompt_table(rows, llm, prompt.layer)
    return prompt.logits(x)


def features(
    rows: Rows,
    llm: str,
    probe: Probe,
    samples: int | None,
    logits: Array | None = None,
    prompt: Probe | None = None,
    prompt_oof: Array | None = None,
) -> tuple[dict[str, Array], Array, np.ndarray, np.ndarray]:
    """Per candidate of `candidate_table` (same order): each feature the
    verifier may weigh (NaN: not measurable), its label, question and
    candidate index. `logits`: the probe's, when given (out of fold);
    `prompt`: a fitted answerability probe (else the shipped one), its
    per-question logits `prompt_oof` when given (out of fold)."""
    x, y, qs, cs = candidate_table(rows, probe.reads, probe.layer, llm, samples)
    names = [n for n in COMBINED if n != "answerable"]
    served = served_tokens(probe.reads)
    values: dict[str, list[float]] = {name: [] for name in names}
    for qi, ci in zip(qs, cs, strict=True):
        row = rows.questions[int(qi)]
        shown = row["candidates"][: None if samples is None else samples + 1]
        held = [cut(llm, c, served) for c in shown]
        text, logprobs = held[int(ci)]
        others = [t for j, (t, _) in enumerate(held) if j != ci]
        found = {
            "agreement": verifier.agreement(text, others),
            "logprob": float(np.mean(logprobs)) if logprobs else None,
            "grounded": verifier.grounded(text, row.get("prompt", "")),
        }
        for name in names:
            value = found[name]
            values[name].append(np.nan if value is None else float(value))
    out = {name: np.asarray(v, dtype=np.float64) for name, v in values.items()}
    per_question = prompt_oof if prompt_oof is not None else prompt_logits(rows, llm, prompt)
    out["answerable"] = per_question[qs] if len(qs) else np.zeros(0)
    out["correct"] = probe.logits(x) if logits is None else logits
    return out, y, qs, cs


@dataclass(frozen=True)
class Model:
    """What the file holds: the probe, and the weights of the second stage."""

    probe: Probe
    weights: dict[str, float]  # by feature ("correct": the probe's logit)
    bias: float
    fill: dict[str, float]  # a feature that cannot be measured takes this
    prompt: Probe | None = None  # the answerability probe fitted beside it (None: shipped)

    def probabilities(
        self, rows: Rows, llm: str, samples: int | None
    ) -> tuple[Array, np.ndarray, np.ndarray]:
        values, _, qs, cs = features(rows, llm, self.probe, samples, prompt=self.prompt)
        z = np.full(len(qs), self.bias)
        for name, weight in self.weights.items():
            column = values[name]
            z += weight * np.where(np.isnan(column), self.fill.get(name, 0.0), column)
        return 1 / (1 + np.exp(-z)), qs, cs

    def scaled(self, a: float, b: float) -> Model:
        """sigmoid(a * z + b) instead of sigmoid(z): calibrated."""
        return Model(
            self.probe,
            {k: a * w for k, w in self.weights.items()},
            a * self.bias + b,
            self.fill,
            self.prompt,
        )


def stage_one(probe: Probe) -> Model:
    return Model(probe, {"correct": 1.0}, 0.0, {})


def out_of_fold_logits(rows: Rows, reads: str, layer: int, llm: str, c: float) -> Array:
    """The probe's logit of every train candidate from a fit without its article."""
    x, y, qs, _ = candidate_table(rows, reads, layer, llm)
    groups = np.array([rows.questions[int(q)]["group"] for q in qs])
    return folded_logits(x, y, groups, reads, layer, c)


def folded_logits(
    x: Array, y: Array, groups: np.ndarray, reads: str, layer: int, c: float
) -> Array:
    """Each row's logit from a probe fitted without its group (5 folds by article)."""
    from sklearn.model_selection import GroupKFold

    out = np.zeros(len(y))
    for train, held in GroupKFold(5).split(x, y, groups):
        out[held] = fit_probe(x[train], y[train], reads, layer, c).logits(x[held])
    return out


def fit_second_stage(
    rows: Rows,
    llm: str,
    probe: Probe,
    oof: Array,
    names: Sequence[str],
    prompt: Probe | None = None,
    prompt_oof: Array | None = None,
) -> Model:
    """Weights for the probe's (out-of-fold) logit and `names`, fitted on train
    (`prompt`, `prompt_oof`: a fitted answerability probe and its out-of-fold logits)."""
    values, y, _, _ = features(rows, llm, probe, None, oof, prompt, prompt_oof)
    fill = {name: float(np.nanmean(values[name])) for name in names}
    columns = ["correct", *names]
    matrix = np.column_stack(
        [np.where(np.isnan(values[n]), fill.get(n, 0.0), values[n]) for n in columns]
    )
    model = LogisticRegression(C=1.0, max_iter=2000, tol=1e-8)
    model.fit(matrix, y)
    weights = {n: float(w) for n, w in zip(columns, model.coef_[0], strict=True)}
    return Model(probe, weights, float(model.intercept_[0]), fill, prompt)


# --- serving, simulated ---------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    answerable: int
    right: int
    wrong: int  # of the answerable ones, answered wrong
    unanswerable: int
    declined: int  # of the unanswerable ones

    @property
    def right_share(self) -> float:
        return self.right / max(1, self.answerable)

    @property
    def wrong_share(self) -> float:
        return self.wrong / max(1, self.answerable)

    @property
    def declined_share(self) -> float:
        return self.declined / max(1, self.unanswerable)


def choices(
    rows: Rows, model: Model | Probe, llm: str, samples: int, accept: float | None
) -> list[tuple[float | None, str | None]]:
    """Per question, as served: (the chosen answer's P(right), its grade);
    (None, None) when every candidate was a refusal."""
    if isinstance(model, Probe):
        model = stage_one(model)
    p, qs, cs = model.probabilities(rows, llm, samples)
    by_question: dict[int, list[tuple[int, float]]] = {}
    for qi, ci, pi in zip(qs, cs, p, strict=True):
        by_question.setdefault(int(qi), []).append((int(ci), float(pi)))
    out: list[tuple[float | None, str | None]] = []
    for qi, row in enumerate(rows.questions):
        scored = by_question.get(qi, [])
        greedy = next((pi for ci, pi in scored if ci == 0), None)
        if accept is not None and greedy is not None and greedy >= accept:
            scored = [(0, greedy)]
        if not scored:
            out.append((None, None))
            continue
        ci, pi = max(scored, key=lambda t: (t[1], -t[0]))
        if greedy is not None and pi - greedy <= FIRST_MARGIN:
            ci, pi = 0, greedy
        out.append((pi, row["candidates"][ci]["grade"]))
    return out


def outcome(
    rows: Rows, chosen: Sequence[tuple[float | None, str | None]], threshold: float
) -> Outcome:
    answerable = right = wrong = unanswerable = declined = 0
    for row, (p, grade) in zip(rows.questions, chosen, strict=True):
        answered = p is not None and p >= threshold
        if row["expected"] is None:
            unanswerable += 1
            declined += not answered
        else:
            answerable += 1
            right += answered and grade == "right"
            wrong += answered and grade != "right"
    return Outcome(answerable, right, wrong, unanswerable, declined)


def subset(rows: Rows, keep: Iterable[int]) -> Rows:
    idx = list(keep)
    return Rows(
        [rows.questions[i] for i in idx],
        {k: v[idx] for k, v in rows.states.items()},
        rows.prompt[idx],
        rows.files,
    )


def client_prompted(row: dict[str, Any]) -> bool:
    return bool(row.get("header_prompt") or row.get("footer_prompt"))


# --- commands --------------------------------------------------------------------


def train_rows(llm: str) -> Rows:
    return load(llm, "squad", "train")


def dev_rows(llm: str) -> dict[str, Rows]:
    out = {}
    for family in FAMILIES:
        try:
            out[family] = load(llm, family, "dev")
        except SystemExit:
            continue
    return out


def layers_table(llm: str, c: float) -> None:
    train = train_rows(llm)
    devs = dev_rows(llm)
    reads_options = [
        ("last", LAYERS[llm]),
        ("at8", LAYERS[llm]),
        ("at16", LAYERS[llm]),
        ("mean", MEAN_LAYERS[llm]),
    ]
    print(f"{llm}: train {len(train.questions)} questions; C {c}")
    print("reads  layer  " + "  ".join(f"{family:>8}" for family in devs))
    for reads, layers in reads_options:
        if (reads if reads != "mean" else "mean") not in train.states:
            continue
        for layer in layers:
            x, y, _, _ = candidate_table(train, reads, layer, llm)
            probe = fit_probe(x, y, reads, layer, c)
            cells = []
            for rows in devs.values():
                dx, dy, _, _ = candidate_table(rows, reads, layer, llm)
                cells.append(f"{auc(dy, probe.logits(dx)):8.3f}")
            print(f"{reads:5}  {layer:5}  " + "  ".join(cells), flush=True)


def frontier(llm: str, reads: str, layer: int, c: float, accept: float | None) -> None:
    train = train_rows(llm)
    x, y, _, _ = candidate_table(train, reads, layer, llm)
    probe = fit_probe(x, y, reads, layer, c)
    for family, rows in dev_rows(llm).items():
        print(f"\n{llm} dev {family}: {len(rows.questions)} questions ({reads} {layer}, C {c})")
        for samples in (0, 1, 2, 3, 5):
            chosen = choices(rows, probe, llm, samples, accept)
            line = [f"K={samples}:"]
            for t in (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
                o = outcome(rows, chosen, t)
                line.append(
                    f"t{t:.1f} {o.right_share:4.0%}/{o.wrong_share:3.0%}/{o.declined_share:4.0%}"
                )
            print("  ".join(line))


# --- choosing on dev, building the file ---------------------------------------------

# the share of unanswerable dev questions declined that the threshold must
# reach on every family (the targets, and a margin for test)
TARGETS = {
    "qwen2.5-coder-0.5b": {"squad": 0.85, "sets": 0.80},
    "qwen2.5-coder-1.5b": {"squad": 0.90, "sets": 0.90},
}
MARGIN = 0.02
CHOICES = Path(__file__).with_name("verifier_choices.json")
READS = ("last", "at8", "at16", "mean")
CS = (0.001, 0.01, 0.1)
SAMPLES = (0, 1, 2, 3, 5)
ACCEPTS = (None, 0.9, 0.8)


def threshold_for(
    llm: str, devs: dict[str, Rows], chosen: dict[str, list[tuple[float | None, str | None]]]
) -> float | None:
    """The lowest threshold declining at least the target (+ margin) of every
    family's unanswerable dev questions (None: none does)."""
    values = sorted({p for picks in chosen.values() for p, _ in picks if p is not None})
    for t in [0.0, *values, 1.0 + 1e-9]:
        if all(
            outcome(devs[f], chosen[f], t).declined_share >= TARGETS[llm][f] + MARGIN for f in devs
        ):
            return t
    return None


def dev_right(devs: dict[str, Rows], chosen: dict[str, Any], t: float) -> dict[str, Outcome]:
    return {f: outcome(devs[f], chosen[f], t) for f in devs}


def policy_for(
    llm: str, devs: dict[str, Rows], model: Model, samples_options: Sequence[int]
) -> tuple[float, int, float | None, float] | None:
    """The samples and accept point with the most right answers on dev at the
    decline target: (mean right share, samples, accept, threshold)."""
    best: tuple[float, int, float | None, float] | None = None
    stage_two = set(model.weights) != {"correct"}
    for samples in samples_options:
        for accept in ACCEPTS:
            # a greedy answer sure on its own needs no samples; the second
            # stage reads the candidates together, so it scores them all
            if (samples == 0 or stage_two) and accept is not None:
                continue
            picks = {f: choices(rows, model, llm, samples, accept) for f, rows in devs.items()}
            t = threshold_for(llm, devs, picks)
            if t is None:
                continue
            outcomes = dev_right(devs, picks, t)
            right = float(np.mean([o.right_share for o in outcomes.values()]))
            shown = ", ".join(
                f"{f} {o.right_share:.1%} right / {o.wrong_share:.1%} wrong / "
                f"{o.declined_share:.1%} declined"
                for f, o in outcomes.items()
            )
            print(f"  K {samples} accept {accept}: t {t:.3f}: {shown}", flush=True)
            # a sample more must buy a point: each costs time to first token
            if best is None or right > best[0] + 0.01 * (samples - best[1]):
                best = (right, samples, accept, t)
    return best


def choose_prompt_probe(train: Rows, devs: dict[str, Rows], llm: str) -> dict[str, Any]:
    """The layer and C of an answerability probe fitted on the rows, by its
    dev AUC (the greedy answer right, against wrong or unanswerable)."""
    best: dict[str, Any] | None = None
    for layer in LAYERS[llm]:
        for c in CS:
            probe = fit_prompt_probe(train, llm, layer, c)
            aucs = []
            for rows in devs.values():
                x, y = prompt_table(rows, llm, layer)
                aucs.append(auc(y, probe.logits(x)))
            mean_auc = float(np.mean(aucs))
            print(f"prompt {layer:3} C {c:<6} dev AUC {mean_auc:.3f} {aucs}", flush=True)
            if best is None or mean_auc > best["dev_auc"]:
                best = {"layer": layer, "c": c, "dev_auc": round(mean_auc, 4)}
    assert best is not None
    return best


def fitted_prompt(
    train: Rows, llm: str, choice: dict[str, Any]
) -> tuple[Probe | None, Array | None]:
    """The fitted answerability probe the choice names and its out-of-fold
    train logits ((None, None): the shipped one is read instead)."""
    fit = choice.get("answerable_fit")
    if not fit:
        return None, None
    return (
        fit_prompt_probe(train, llm, fit["layer"], fit["c"]),
        prompt_out_of_fold(train, llm, fit["layer"], fit["c"]),
    )


def choose(
    llm: str, reads_options: Sequence[str] = READS, fit_answerable: bool = False
) -> dict[str, Any]:
    """Stage by stage on dev: the state (among `reads_options`) and C by AUC;
    then, with the probe alone and beside each set of the other features,
    the samples and accept point by the right answers at the decline target.
    `fit_answerable`: the answerability feature is a prompt probe fitted on
    the rows (layer and C by dev AUC), not the one the shipped file carries."""
    train, devs = train_rows(llm), dev_rows(llm)
    best: tuple[float, str, int, float] | None = None
    for reads in reads_options:
        if reads not in train.states:
            continue
        for layer in MEAN_LAYERS[llm] if reads == "mean" else LAYERS[llm]:
            x, y, _, _ = candidate_table(train, reads, layer, llm)
            for c in CS:
                probe = fit_probe(x, y, reads, layer, c)
                aucs = []
                for rows in devs.values():
                    dx, dy, _, _ = candidate_table(rows, reads, layer, llm)
                    aucs.append(auc(dy, probe.logits(dx)))
                mean_auc = float(np.mean(aucs))
                print(f"{reads:5} {layer:3} C {c:<6} dev AUC {mean_auc:.3f} {aucs}", flush=True)
                if best is None or mean_auc > best[0]:
                    best = (mean_auc, reads, layer, c)
    assert best is not None
    _, reads, layer, c = best
    x, y, _, _ = candidate_table(train, reads, layer, llm)
    probe = fit_probe(x, y, reads, layer, c)
    oof = out_of_fold_logits(train, reads, layer, llm, c)
    prompt_choice = (
        {"answerable_fit": choose_prompt_probe(train, devs, llm)} if fit_answerable else {}
    )
    prompt, prompt_oof = fitted_prompt(train, llm, prompt_choice)
    chosen: tuple[float, int, float | None, float, tuple[str, ...]] | None = None
    # a feature the rows never measure (agreement without samples, answerability
    # without a prompt probe) is not weighed
    measured, _, _, _ = features(train, llm, probe, None, oof, prompt, prompt_oof)
    combined = [n for n in COMBINED if np.isfinite(measured[n]).any()]
    for names in [(), *(tuple([n]) for n in combined), tuple(combined)]:
        model = (
            stage_one(probe)
            if not names
            else fit_second_stage(train, llm, probe, oof, names, prompt, prompt_oof)
        )
        print(f"features: probe{''.join(' + ' + n for n in names)}", flush=True)
        found = policy_for(llm, devs, model, SAMPLES)
        # another feature must buy a point too
        if found is not None and (chosen is None or found[0] > chosen[0] + 0.01 * len(names)):
            chosen = (*found, names)
    assert chosen is not None, "no policy meets the decline targets on dev"
    out = {
        "reads": reads,
        "layer": layer,
        "c": c,
        "features": list(chosen[4]),
        "samples": chosen[1],
        "accept": chosen[2],
        "dev_auc": round(best[0], 4),
    }
    if "answerable" in chosen[4]:
        out.update(prompt_choice)
    return out


def calibrate(logits: Array, right: Array) -> tuple[float, float]:
    """(a, b) with sigmoid(a * logit + b) calibrated on the chosen answers."""
    model = LogisticRegression(C=1e6, max_iter=1000, tol=1e-8)
    model.fit(logits.reshape(-1, 1), right)
    return float(model.coef_[0][0]), float(model.intercept_[0])


def reliability(p: Array, right: Array) -> list[str]:
    lines = []
    for lo in np.arange(0.0, 1.0, 0.2):
        sel = (p >= lo) & (p < lo + 0.2 + (1e-9 if lo >= 0.8 else 0))
        if sel.sum():
            lines.append(
                f"  P {lo:.1f}-{lo + 0.2:.1f}: {int(sel.sum()):5} answers, "
                f"{right[sel].mean():.0%} right (mean P {p[sel].mean():.2f})"
            )
    return lines


def answerable_entry(llm: str, prompt: Probe | None) -> dict[str, Any] | None:
    """The file's answerability probe: the fitted one, else the shipped one carried on."""
    if prompt is None:
        return shipped_prompt_probe(llm)
    weights, bias = prompt.folded()
    return {"layer": prompt.layer, "reads": "prompt", "weights": weights, "bias": bias}


def candidate_tokens(reads: str, rows: Rows) -> int:
    """Where the server pauses each candidate to read it as the rows did:
    after n tokens for "at<n>"; for "mean", after all but the last of the
    rows' longest answer (the last is sampled, never read), so that its mean
    is theirs; else at 64."""
    if reads.startswith("at"):
        return int(reads[2:])
    if reads == "mean":
        return int(max(c["tokens"] for row in rows.questions for c in row["candidates"])) - 1
    return 64


def build(llm: str) -> Path:
    """The verifier file of `llm`, from the train rows and the choice on dev."""
    choice = json.loads(CHOICES.read_text())[llm]
    train, devs = train_rows(llm), dev_rows(llm)
    reads, layer, names = choice["reads"], choice["layer"], tuple(choice.get("features", ()))
    x, y, _, _ = candidate_table(train, reads, layer, llm)
    probe = fit_probe(x, y, reads, layer, choice["c"])
    model = stage_one(probe)
    prompt, prompt_oof = fitted_prompt(train, llm, choice)
    if names:
        oof = out_of_fold_logits(train, reads, layer, llm, choice["c"])
        model = fit_second_stage(train, llm, probe, oof, names, prompt, prompt_oof)
    picks = {
        f: choices(rows, model, llm, choice["samples"], choice["accept"])
        for f, rows in devs.items()
    }
    # calibrated on the answers dev's questions would get (the best of their candidates)
    chosen_p = np.array([p for f in devs for p, _ in picks[f] if p is not None])
    chosen_right = np.array([g == "right" for f in devs for p, g in picks[f] if p is not None])
    a, b = calibrate(np.log(chosen_p / (1 - chosen_p)), chosen_right.astype(np.float64))
    model = model.scaled(a, b)
    calibrated = {
        f: choices(rows, model, llm, choice["samples"], choice["accept"])
        for f, rows in devs.items()
    }
    t = threshold_for(llm, devs, calibrated)
    assert t is not None, "no threshold meets the decline targets on dev"
    # the accept point was chosen on the uncalibrated scale: carried over
    accept = choice["accept"]
    if accept is not None:
        accept = float(1 / (1 + np.exp(-(a * np.log(accept / (1 - accept)) + b))))
    weights, bias = probe.folded()
    preset = PRESETS[llm]
    served = preset.files()[preset.default_quant]
    data = {
        "format": verifier.FORMAT,
        "preset": llm,
        "gguf": served.filename,
        "gguf_sha256": served.sha256,
        "correct": {
            "layer": layer,
            "reads": "mean" if reads == "mean" else "last",
            "weights": weights,
            "bias": bias,
        },
        "answerable": answerable_entry(llm, prompt) if "answerable" in names else None,
        "combine": {"weights": model.weights, "bias": model.bias, "fill": model.fill},
        "policy": {
            "threshold": t,
            "samples": choice["samples"],
            "temperature": 0.8,
            "candidate_tokens": candidate_tokens(reads, train),
            "accept": accept,
            "skip_below": None,
            "first_margin": FIRST_MARGIN,
        },
        "trained": {
            "rows": f"benches.quality.candidates --llm {llm} (SQuAD v1.1 train, CC BY-SA 4.0)",
            "rows_sha256": train.digest(),
            "train_questions": len(train.questions),
            "train_candidates": len(y),
            "dev_questions": {f: len(rows.questions) for f, rows in devs.items()},
            "choice": choice,
        },
    }
    path: Path = verifier.verifier_path(llm)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    for f in devs:
        o = outcome(devs[f], calibrated[f], t)
        print(
            f"{llm} dev {f}: {o.right_share:.1%} right, {o.wrong_share:.1%} wrong, "
            f"{o.declined_share:.1%} declined at threshold {t:.3f}"
        )
    final_p = np.array([p for f in devs for p, _ in calibrated[f] if p is not None])
    print("reliability on dev (the chosen answers):")
    print("\n".join(reliability(final_p, chosen_right)))
    print(f"wrote {path}")
    return path


# the answerability floors tried, and the share of dev's right greedy answers
# (on every family) a floor may cost
FLOORS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3)
MAX_RIGHT_LOST = 0.02


def floor(llm: str) -> Path:
    """An answerability floor for the preset's file as it stands: a prompt
    probe fitted on train (layer and C by dev AUC) and the highest of
    `FLOORS` that, on every dev family, declines no more than
    `MAX_RIGHT_LOST` of the questions whose greedy answer is right. Below
    it no candidate is written (the surface's decline, sooner); the file's
    answer probe, weights and threshold stay as they are."""
    path: Path = verifier.verifier_path(llm)
    data = json.loads(path.read_text())
    if "answerable" in data["combine"]["weights"]:
        raise SystemExit(
            f"{path} weighs its answerability probe beside the answer's: "
            "a floor would replace the probe those weights were fitted with"
        )
    train, devs = train_rows(llm), dev_rows(llm)
    fit = choose_prompt_probe(train, devs, llm)
    probe = fit_prompt_probe(train, llm, fit["layer"], fit["c"])
    chosen = None
    for at in FLOORS:
        lost, declined = [], []
        for rows in devs.values():
            x, y = prompt_table(rows, llm, fit["layer"])
            below = 1 / (1 + np.exp(-probe.logits(x))) < at
            answerable = np.array([row["expected"] is not None for row in rows.questions])
            lost.append(float((below & (y == 1)).sum() / max(1, answerable.sum())))
            declined.append(float((below & ~answerable).sum() / max(1, (~answerable).sum())))
        print(
            f"floor {at}: right greedy answers lost {lost}, unanswerable declined {declined}",
            flush=True,
        )
        if max(lost) > MAX_RIGHT_LOST:
            break
        chosen = at
    data["answerable"] = answerable_entry(llm, probe)
    data["policy"]["skip_below"] = chosen
    data.setdefault("trained", {})["floor"] = {
        "rows": f"benches.quality.candidates --llm {llm} (SQuAD v1.1 train, CC BY-SA 4.0)",
        "rows_sha256": train.digest(),
        "train_questions": len(train.questions),
        "answerable_fit": fit,
        "max_right_lost": MAX_RIGHT_LOST,
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{llm}: answerability floor {chosen} (layer {fit['layer']}, C {fit['c']}) -> {path}")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["layers", "frontier", "choose", "build", "floor"])
    parser.add_argument("--llm", choices=list(PRESETS), required=True)
    parser.add_argument("--reads", default="last")
    parser.add_argument("--layer", type=int, default=14)
    parser.add_argument("--c", type=float, default=0.01)
    parser.add_argument("--accept", type=float, default=None)
    parser.add_argument(
        "--choose-reads",
        nargs="+",
        choices=READS,
        default=list(READS),
        help="choose: the states it may pick from (the state after 8 or 16 tokens: "
        "the answer waits for no more than that many tokens before its first is sent; "
        "'last' only for rows written as long as served answers)",
    )
    parser.add_argument(
        "--fit-answerable",
        action="store_true",
        help="choose: weigh an answerability probe fitted on the rows' prompt states "
        "instead of the one the shipped file carries",
    )
    args = parser.parse_args()
    if args.command == "layers":
        layers_table(args.llm, args.c)
    elif args.command == "frontier":
        frontier(args.llm, args.reads, args.layer, args.c, args.accept)
    elif args.command == "choose":
        chosen = choose(args.llm, args.choose_reads, args.fit_answerable)
        every = json.loads(CHOICES.read_text()) if CHOICES.is_file() else {}
        every[args.llm] = chosen
        CHOICES.write_text(json.dumps(every, indent=1, sort_keys=True) + "\n")
        print(f"{args.llm}: {chosen} -> {CHOICES}")
    elif args.command == "floor":
        floor(args.llm)
    else:
        build(args.llm)


if __name__ == "__main__":
    main()
