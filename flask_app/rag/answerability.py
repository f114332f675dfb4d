"""Whether the documents hold the answer, read from the model's own hidden state.

A small logistic model per chat-model preset, shipped as data
(`flask_app/inference/probes/<preset>.json`, made by
`benches/answer_probe.py build`): a linear probe over the hidden state of
the prompt's last token at one layer — read from the answer's own prefill,
so it costs one dot product — combined with signals the server reads
anyway (the first token's refusal probability, the judge's P(yes) where the
preset asks it, the evidence cosines) into one probability that the answer
will be right. The gate declines below the probe's threshold, chosen on the
evaluation's dev splits to meet the refusal target first.

The file names the sha256 of the GGUF it was trained on: hidden states of
another file (another quantization, another model) mean nothing to it, so
`load` refuses it and the server keeps the refusal and judge gates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

PROBES = Path(__file__).resolve().parent.parent / "inference" / "probes"
FORMAT = 1

# The scalar signals a probe may combine with its hidden-state score, by name.
SIGNALS = ("refusal_logit", "judge_logit", "meaning", "evidence_score", "best_cosine")


class ProbeError(ValueError):
    """A probe file that cannot be used, with the reason."""


def _logit(p: float | None) -> float | None:
    if p is None:
        return None
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


@dataclass(frozen=True)
class Signals:
    """What the gate reads when the answer's first token is drawn."""

    hidden: Mapping[int, npt.NDArray[np.float32]] | None
    refusal_probability: float | None = None
    judge: float | None = None  # P(yes) of "do the documents state the answer?"
    meaning: float | None = None  # cosine of the question and its closest evidence unit
    evidence_score: float | None = None
    best_cosine: float | None = None  # the best prompt passage's dense cosine

    def scalar(self, name: str) -> float | None:
        return {
            "refusal_logit": _logit(self.refusal_probability),
            "judge_logit": _logit(self.judge),
            "meaning": self.meaning,
            "evidence_score": self.evidence_score,
            "best_cosine": self.best_cosine,
        }[name]


@dataclass(frozen=True)
class AnswerProbe:
    """One preset's probe: P(the answer will be right) from the signals."""

    preset: str
    gguf_sha256: str
    layer: int
    weights: npt.NDArray[np.float64]  # over the raw hidden state (standardisation folded in)
    bias: float
    # the second stage: a weight for the hidden-state score ("hidden") and each
    # scalar signal it uses, with the value a missing signal takes
    combine: Mapping[str, float]
    combine_bias: float
    fill: Mapping[str, float]
    threshold: float  # decline below this (the shipped operating point)
    path: Path | None = None
    # True: when the probe lets an answer through but the model starts to
    # refuse, the best evidence line is quoted instead (what the probe's
    # labels were fitted on: docs/answer-quality.md)
    quote_refusals: bool = False
    # True: every yes-or-no question the probe lets through is answered with
    # the best evidence line, not the model's verdict
    quote_yes_no: bool = False

    @property
    def uses_judge(self) -> bool:
        return "judge_logit" in self.combine

    def hidden_score(self, state: npt.NDArray[np.float32]) -> float:
        return float(np.dot(self.weights, state.astype(np.float64)) + self.bias)

    def probability(self, signals: Signals) -> float | None:
        """P(the answer is right); None without the hidden state."""
        if signals.hidden is None or self.layer not in signals.hidden:
            return None
        z = self.combine_bias
        for name, weight in self.combine.items():
            if name == "hidden":
                value: float | None = self.hidden_score(signals.hidden[self.layer])
            else:
                value = signals.scalar(name)
            z += weight * (self.fill[name] if value is None else value)
        return 1.0 / (1.0 + math.exp(-z))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: Path | None = None) -> AnswerProbe:
        where = str(path) if path else "probe"
        try:
            if data["format"] != FORMAT:
                raise ProbeError(f"{where}: format {data['format']}, this server reads {FORMAT}")
            combine = {str(k): float(v) for k, v in data["combine"]["weights"].items()}
            unknown = set(combine) - {"hidden", *SIGNALS}
            if unknown:
                raise ProbeError(f"{where}: unknown signals {sorted(unknown)}")
            quotes = {key: data.get(key, False) for key in ("quote_refusals", "quote_yes_no")}
            for key, value in quotes.items():
                if not isinstance(value, bool):
                    raise ProbeError(f"{where}: {key} must be true or false")
            return cls(
                preset=str(data["preset"]),
                gguf_sha256=str(data["gguf_sha256"]),
                layer=int(data["layer"]),
                weights=np.asarray(data["hidden"]["weights"], dtype=np.float64),
                bias=float(data["hidden"]["bias"]),
                combine=combine,
                combine_bias=float(data["combine"]["bias"]),
                fill={str(k): float(v) for k, v in data["combine"]["fill"].items()},
                threshold=float(data["threshold"]),
                path=path,
                quote_refusals=quotes["quote_refusals"],
                quote_yes_no=quotes["quote_yes_no"],
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ProbeError):
                raise
            raise ProbeError(f"{where}: not a probe file ({exc!r})") from exc

    @classmethod
    def read(cls, path: Path) -> AnswerProbe:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ProbeError(f"{path}: cannot be read ({exc})") from exc
        return cls.from_dict(data, path)


def probe_path(preset: str) -> Path:
    return PROBES / f"{preset}.json"


@dataclass(frozen=True)
class Gate:
    """Which gate declines answers: a probe with its threshold, or (probe
    None) the refusal and judge gates, with the reason."""

    probe: AnswerProbe | None
    threshold: float = 0.5
    reason: str | None = None  # why no probe decides

    def describe(self, refusal_probability: float, judge: float) -> dict[str, Any]:
        """For /health, /info, `edgerag doctor` and the web page (the refusal
        and judge thresholds are those that act without a probe)."""
        if self.probe is None:
            return {
                "kind": "refusal",
                "refusal_probability": refusal_probability,
                "judge": judge,
                "reason": self.reason,
            }
        return {
            "kind": "probe",
            "threshold": self.threshold,
            "layer": self.probe.layer,
            "signals": sorted(self.probe.combine),
            "quote_refusals": self.probe.quote_refusals,
            "quote_yes_no": self.probe.quote_yes_no,
            "file": None if self.probe.path is None else self.probe.path.name,
        }


def choose_gate(
    preset: str | None,
    model_path: Path,
    threshold: float | None,
    probes: Path = PROBES,
    warn: Any = None,
) -> Gate:
    """The probe trained on exactly this GGUF file (by sha256), at `threshold`
    (None: the probe's own); else the refusal and judge gates, and `warn` is
    told why when the preset's probe was trained on another file."""
    from flask_app.inference.pull import known_sha256

    if threshold == 0:
        return Gate(None, reason="off (--answer-probe off)")
    files = sorted(probes.glob("*.json")) if probes.is_dir() else []
    if not files:
        return Gate(None, reason=f"no probe files in {probes}")
    digest = known_sha256(model_path)
    found = [AnswerProbe.read(path) for path in files]
    for probe in found:
        if probe.gguf_sha256 == digest:
            return Gate(probe, probe.threshold if threshold is None else threshold)
    own = [p for p in found if p.preset == preset]
    if not own:
        return Gate(None, reason=f"no probe was trained on {model_path.name}")
    reason = (
        f"the answerability probe of {preset} was trained on a GGUF with sha256 "
        f"{own[0].gguf_sha256[:12]}…, but {model_path} has {digest[:12]}…; the refusal "
        f"and judge gates decide instead (rebuild the probe for this file: "
        f"`.venv/bin/python benches/answer_probe.py build --llms {preset}`)"
    )
    if warn is not None:
        warn(reason)
    return Gate(None, reason=reason)
