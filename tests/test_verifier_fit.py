"""benches/quality/verifier_fit.py (its rows, model and simulated serving
too) on rows shaped like the collector's, with a planted direction in the
hidden states that tells right answers from wrong ones: it is found, the
file rebuilds bit for bit from the same rows, and the server reads the
file back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benches.quality import candidates, verifier_fit, verifier_model, verifier_rows
from benches.quality import verifier_serving as serving
from flask_app.inference.presets import PRESETS
from flask_app.rag import verifier

LLM = "qwen2.5-coder-0.5b"
DIM = 16


def write_rows(
    root: Path, family: str, split: str, seed: int, sets: int = 4, answerable_axis: bool = False
) -> None:
    """`sets` sets of 30 questions (a third unanswerable), 6 candidates each;
    a right answer's states lean along the first axis (`answerable_axis`:
    and an answerable question's prompt state along the second, while its
    answers' states say less)."""
    rng = np.random.default_rng(seed)
    layers = len(candidates.LAYERS[LLM])
    for n in range(sets):
        rows, states = [], []
        for q in range(30):
            answerable = q % 3 != 0
            cands = []
            rights = []
            for c in range(6):
                right = answerable and rng.random() < 0.6
                text = "I don't have enough information." if rng.random() < 0.05 else f"a{q}{c}"
                grade = "refusal" if text.startswith("I don't") else ("right" if right else "wrong")
                cands.append({"text": text, "grade": grade, "logprobs": [-0.1], "tokens": 3})
                rights.append(grade == "right")
            rows.append(
                {"query": f"q{q}", "expected": ["x"] if answerable else None, "candidates": cands}
            )
            base = rng.standard_normal((6, layers, DIM)).astype(np.float32)
            for c, right in enumerate(rights):
                base[c, :, 0] += (0.5 if answerable_axis else 2.0) * (1 if right else -1)
            prompt = rng.standard_normal((layers, DIM)).astype(np.float32)
            if answerable_axis:
                prompt[:, 1] += 3.0 if answerable else -3.0
            states.append(
                {
                    "prompt": prompt.astype(np.float16),
                    "last": base.astype(np.float16),
                    "at8": base.astype(np.float16),
                    "at16": base.astype(np.float16),
                    "mean": base[:, :2].astype(np.float16),
                }
            )
        out = root / LLM / family / split / f"set{n}"
        out.mkdir(parents=True)
        (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        stacked: dict[str, Any] = {k: np.stack([s[k] for s in states]) for k in states[0]}
        np.savez(out / "states.npz", **stacked)


@pytest.fixture
def rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "rows"
    write_rows(root, "squad", "train", 1, sets=6)
    write_rows(root, "squad", "dev", 2)
    write_rows(root, "sets", "dev", 3, sets=2)
    monkeypatch.setattr(verifier_rows, "cache_dir", lambda: root)
    monkeypatch.setattr(verifier_fit, "CHOICES", tmp_path / "choices.json")
    monkeypatch.setattr(verifier, "PROBES", tmp_path / "probes")
    monkeypatch.setattr(verifier_fit, "READS", ("last", "at8"))
    monkeypatch.setattr(verifier_fit, "CS", (0.1,))
    return root


def test_the_planted_direction_is_found_and_the_file_rebuilds_bit_for_bit(
    rows: Path, tmp_path: Path
) -> None:
    chosen = verifier_fit.choose(LLM)
    assert chosen["dev_auc"] > 0.9
    (tmp_path / "choices.json").write_text(json.dumps({LLM: chosen}))
    first = verifier_fit.build(LLM).read_bytes()
    again = verifier_fit.build(LLM).read_bytes()
    assert first == again
    built = verifier.Verifier.read(tmp_path / "probes" / f"{LLM}.json")
    preset = PRESETS[LLM]
    assert built.gguf_sha256 == preset.files()[preset.default_quant].sha256
    assert built.samples == chosen["samples"] and 0 < built.threshold < 1
    # its weight on the planted axis dominates the others
    assert built.correct is not None
    weights = np.abs(built.correct.weights)
    assert weights[0] > 3 * np.median(weights[1:])
    # and it reads a right answer's state as likelier right than a wrong one's
    up = np.zeros(DIM, np.float32)
    up[0] = 2.0
    p_right = built.probability(up, "a", [], [-0.1], None)
    p_wrong = built.probability(-up, "a", [], [-0.1], None)
    assert p_right > 0.8 > 0.2 > p_wrong


def test_a_probe_of_mean_states_pauses_candidates_where_the_rows_mean_ends(
    rows: Path, tmp_path: Path
) -> None:
    chosen = verifier_fit.choose(LLM, ("mean",))
    assert chosen["reads"] == "mean" and chosen["dev_auc"] > 0.9
    (tmp_path / "choices.json").write_text(json.dumps({LLM: chosen}))
    built = json.loads(verifier_fit.build(LLM).read_text())
    assert built["correct"]["reads"] == "mean"
    # the rows' longest answers are 3 tokens: their means read the first 2
    assert built["policy"]["candidate_tokens"] == 2


def test_small_store_rows_join_the_train_rows_and_fold_with_their_article(rows: Path) -> None:
    before = verifier_rows.train_rows(LLM)
    write_rows(rows, "squad-small", "train", 4, sets=2)
    after = verifier_rows.train_rows(LLM)
    assert len(after.questions) == len(before.questions) + 60
    assert all(v.shape[0] == len(after.questions) for v in after.states.values())
    assert after.prompt.shape[0] == len(after.questions)
    # the same article's small store folds with its long one
    assert {q["group"] for q in after.questions} == {q["group"] for q in before.questions}
    assert after.digest() != before.digest()
    assert verifier_rows.dev_rows(LLM).keys() == {"squad", "sets"}


def test_the_decline_target_decides_the_threshold(rows: Path) -> None:
    train, devs = verifier_rows.train_rows(LLM), verifier_rows.dev_rows(LLM)
    x, y, _, _ = verifier_rows.candidate_table(train, "last", 8, LLM)
    probe = verifier_model.fit_probe(x, y, "last", 8, 0.1)
    picks = {f: serving.choices(r, probe, LLM, 2, None) for f, r in devs.items()}
    t = serving.threshold_for(LLM, devs, picks)
    assert t is not None
    for family, target in serving.TARGETS[LLM].items():
        assert serving.outcome(devs[family], picks[family], t).declined_share >= target
    # a threshold just below it misses a target: it is the lowest that meets them
    lower = max(p for f in picks for p, _ in picks[f] if p is not None and p < t)
    assert any(
        serving.outcome(devs[f], picks[f], lower).declined_share
        < serving.TARGETS[LLM][f] + serving.MARGIN
        for f in devs
    )


@pytest.fixture
def answerable_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Rows whose answerable questions' prompt states lean along the second axis."""
    root = tmp_path / "rows"
    write_rows(root, "squad", "train", 1, sets=6, answerable_axis=True)
    write_rows(root, "squad", "dev", 2, answerable_axis=True)
    write_rows(root, "sets", "dev", 3, sets=2, answerable_axis=True)
    monkeypatch.setattr(verifier_rows, "cache_dir", lambda: root)
    monkeypatch.setattr(verifier_fit, "CHOICES", tmp_path / "choices.json")
    monkeypatch.setattr(verifier, "PROBES", tmp_path / "probes")
    monkeypatch.setattr(verifier_fit, "READS", ("last",))
    monkeypatch.setattr(verifier_fit, "CS", (0.1,))
    return root


def test_the_shipped_prompt_probe_is_weighed_beside_the_answers_and_carried_on(
    answerable_rows: Path, tmp_path: Path
) -> None:
    layer = candidates.LAYERS[LLM][2]
    weights = [0.0] * DIM
    weights[1] = 1.5
    shipped = {"layer": layer, "reads": "prompt", "weights": weights, "bias": 0.0}
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / f"{LLM}.json").write_text(json.dumps({"answerable": shipped}))
    chosen = verifier_fit.choose(LLM)
    assert "answerable" in chosen["features"]
    (tmp_path / "choices.json").write_text(json.dumps({LLM: chosen}))
    first = verifier_fit.build(LLM).read_bytes()
    assert verifier_fit.build(LLM).read_bytes() == first  # it carried the probe on
    built = verifier.Verifier.read(tmp_path / "probes" / f"{LLM}.json")
    assert built.answerable is not None and built.answerable.layer == layer
    assert list(built.answerable.weights) == weights
    # a floor would replace the prompt probe its weights were fitted with
    with pytest.raises(SystemExit, match="weighs its answerability probe"):
        verifier_fit.floor(LLM)
    assert verifier.verifier_path(LLM).read_bytes() == first
    assert built.layers() == tuple(sorted({layer, chosen["layer"]}))
    # the same answer reads likelier right when the prompt reads answerable
    state = np.zeros(DIM, np.float32)
    assert built.probability(state, "a", [], [-0.1], 0.95) > built.probability(
        state, "a", [], [-0.1], 0.05
    )


def test_a_preset_without_a_prompt_probe_fits_one_on_the_rows_and_ships_it(
    answerable_rows: Path, tmp_path: Path
) -> None:
    # without the option, no answerability is measured: the file ships none
    assert "answerable" not in verifier_fit.choose(LLM)["features"]
    chosen = verifier_fit.choose(LLM, fit_answerable=True)
    assert "answerable" in chosen["features"]
    fit = chosen["answerable_fit"]
    assert fit["layer"] in candidates.LAYERS[LLM] and fit["dev_auc"] > 0.7
    (tmp_path / "choices.json").write_text(json.dumps({LLM: chosen}))
    first = verifier_fit.build(LLM).read_bytes()
    # refitted from the rows, not read back from the file it wrote
    assert verifier_fit.build(LLM).read_bytes() == first
    built = verifier.Verifier.read(tmp_path / "probes" / f"{LLM}.json")
    assert built.answerable is not None and built.answerable.reads == "prompt"
    weights = np.abs(built.answerable.weights)
    assert weights[1] > 3 * np.median(np.delete(weights, 1))
    state = np.zeros(DIM, np.float32)
    assert built.probability(state, "a", [], [-0.1], 0.95) > built.probability(
        state, "a", [], [-0.1], 0.05
    )


def test_the_floor_is_added_to_the_file_as_it_stands_and_costs_few_right_answers(
    answerable_rows: Path, tmp_path: Path
) -> None:
    (tmp_path / "choices.json").write_text(json.dumps({LLM: verifier_fit.choose(LLM)}))
    path = verifier_fit.build(LLM)
    before = json.loads(path.read_text())
    assert before["answerable"] is None and before["policy"]["skip_below"] is None
    first = verifier_fit.floor(LLM).read_bytes()
    assert verifier_fit.floor(LLM).read_bytes() == first  # the same rows, the same file
    after = json.loads(first)
    # the answer probe, its weights and threshold as they were
    for key in ("correct", "combine"):
        assert after[key] == before[key]
    assert after["policy"] == {**before["policy"], "skip_below": after["policy"]["skip_below"]}
    floor = after["policy"]["skip_below"]
    assert floor in verifier_fit.FLOORS
    built = verifier.Verifier.read(path)
    assert built.answerable is not None and built.skip_below == floor
    # on dev, the floor declines many unanswerable questions and few right greedy answers
    lost, declined = [], []
    for rows in verifier_rows.dev_rows(LLM).values():
        at = candidates.LAYERS[LLM].index(built.answerable.layer)
        below = np.array(
            [built.answerability({built.answerable.layer: s[at]}) < floor for s in rows.prompt]
        )
        right = np.array([r["candidates"][0]["grade"] == "right" for r in rows.questions])
        answerable = np.array([r["expected"] is not None for r in rows.questions])
        lost.append((below & right).sum() / answerable.sum())
        declined.append((below & ~answerable).sum() / (~answerable).sum())
    assert max(lost) <= verifier_fit.MAX_RIGHT_LOST and min(declined) > 0.5
