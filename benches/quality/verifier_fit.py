"""The verifier: fitted on the train rows, chosen on dev, written as a file per preset.

    .venv/bin/python -m benches.quality.verifier_fit layers --llm qwen2.5-coder-0.5b
    .venv/bin/python -m benches.quality.verifier_fit frontier --llm qwen2.5-coder-0.5b
    .venv/bin/python -m benches.quality.verifier_fit build --llm qwen2.5-coder-0.5b

Rows come from `benches.quality.candidates` (CACHE/verifier/<preset>/): per
question its candidates (the greedy answer first, then the sampled ones),
each graded right, wrong or a refusal, with the hidden states the server can
read. A refusal is never chosen, so the probe learns right against wrong on
the others; an unanswerable question's every answer is wrong. The rows are
read by `verifier_rows`, the probe and its second stage fitted by
`verifier_model`, and serving simulated on them by `verifier_serving`.

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
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benches.quality.candidates import LAYERS, MEAN_LAYERS
from benches.quality.served_answer import read_after
from benches.quality.verifier_model import (
    COMBINED,
    Model,
    Probe,
    auc,
    calibrate,
    features,
    fit_probe,
    fit_prompt_probe,
    fit_second_stage,
    out_of_fold_logits,
    prompt_out_of_fold,
    prompt_table,
    shipped_prompt_probe,
    stage_one,
)
from benches.quality.verifier_rows import Array, Rows, candidate_table, dev_rows, train_rows
from benches.quality.verifier_serving import (
    choices,
    dev_right,
    outcome,
    reliability,
    threshold_for,
)
from flask_app.inference.presets import PRESETS
from flask_app.rag import verifier


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

CHOICES = Path(__file__).with_name("verifier_choices.json")
READS = ("last", "at8", "at16", "mean")
CS = (0.001, 0.01, 0.1)
SAMPLES = (0, 1, 2, 3, 5)
# cheapest first: an accept point writes samples only below it, so on a tie
# the one that writes fewer is kept
ACCEPTS = (0.8, 0.9, None)


def policy_for(
    llm: str, devs: dict[str, Rows], model: Model, samples_options: Sequence[int]
) -> tuple[float, int, float | None, float] | None:
    """The samples and accept point with the most right answers less wrong
    ones on dev at the decline target (a wrong answer costs a user what a
    right one gains): (mean net share, samples, accept, threshold)."""
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
            net = float(np.mean([o.right_share - o.wrong_share for o in outcomes.values()]))
            shown = ", ".join(
                f"{f} {o.right_share:.1%} right / {o.wrong_share:.1%} wrong / "
                f"{o.declined_share:.1%} declined"
                for f, o in outcomes.items()
            )
            print(f"  K {samples} accept {accept}: t {t:.3f}: {shown}; net {net:.1%}", flush=True)
            # a sample more must buy a point: each costs time to first token
            if best is None or net > best[0] + 0.01 * (samples - best[1]):
                best = (net, samples, accept, t)
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
    the samples and accept point by the right answers less the wrong ones
    at the decline target.
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
    n = read_after(reads)
    if n is not None:
        return n
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
