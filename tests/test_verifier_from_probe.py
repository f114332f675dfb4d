"""Format-1 answerability probes carried into the verifier format, and the
shipped verifier files: each loads and names its preset's default GGUF."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benches.quality.verifier_from_probe import convert
from flask_app.inference.presets import PRESETS
from flask_app.rag import verifier


def format_1(weights: list[float], bias: float, scale: float, shift: float) -> dict[str, object]:
    return {
        "format": 1,
        "preset": "scripted",
        "gguf_sha256": "0" * 64,
        "layer": 5,
        "hidden": {"weights": weights, "bias": bias},
        "combine": {"weights": {"hidden": scale}, "bias": shift, "fill": {}},
        "threshold": 0.6,
    }


def test_a_converted_probe_gives_the_old_probability_and_declines_below_its_threshold() -> None:
    old = format_1([0.5, -2.0], 0.25, 0.8, -0.3)
    new = verifier.Verifier.from_dict(convert(old))
    state = np.array([1.5, 0.2], dtype=np.float32)
    expected = 1 / (1 + math.exp(-(0.8 * (0.5 * 1.5 - 2.0 * 0.2 + 0.25) - 0.3)))
    answerable = new.answerability({5: state})
    assert answerable == pytest.approx(expected, rel=1e-6)
    # every candidate's probability is the prompt's answerability
    assert new.probability(None, "an answer", [], [], answerable) == pytest.approx(expected)
    assert new.correct is None and new.samples == 0 and new.layers() == (5,)
    assert new.threshold == new.skip_below == 0.6


def test_a_probe_weighing_other_signals_is_not_converted() -> None:
    old = format_1([1.0], 0.0, 1.0, 0.0)
    old["combine"] = {"weights": {"hidden": 1.0, "judge_logit": 0.5}, "bias": 0.0}
    with pytest.raises(ValueError, match="judge_logit"):
        convert(old)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_preset_ships_a_verifier_for_its_default_file(preset: str) -> None:
    shipped = verifier.Verifier.read(verifier.verifier_path(preset))
    default = PRESETS[preset]
    assert shipped.preset == preset
    assert shipped.gguf_sha256 == default.files()[default.default_quant].sha256
