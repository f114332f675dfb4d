"""Whether a written answer is right, read from the model's own hidden state.

A small logistic model per chat-model preset, shipped as data
(`flask_app/inference/probes/<preset>.json`, made by
`benches/quality/verifier_fit.py`): a linear probe over the hidden state at
the answer's last token at one layer (read while the answer is written, so
it costs one dot product), combined with a few numbers the server has
anyway — how many of the other candidates say the same, the answer's mean
token log-probability, the answerability probe over the prompt's last
token — into one calibrated probability that the answer is right.

The file also holds the policy chosen on the dev splits: how many sampled
candidates are written when the greedy one is not already sure enough
(`accept`), below what probability the surface's own decline is given
instead (`threshold`), and below what answerability no answer is written
at all (`skip_below`).

The file names the sha256 of the GGUF it was trained on: hidden states of
another file mean nothing to it, so `choose_verifier` refuses it and the
server answers unverified (the model's first answer, its own refusals).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from flask_app.rag.text import term_set, terms

PROBES = Path(__file__).resolve().parent.parent / "inference" / "probes"
FORMAT = 2

# The scalar features the second stage may weigh, by name.
FEATURES = ("correct", "answerable", "agreement", "logprob", "grounded")

State = npt.NDArray[np.float32]


class VerifierError(ValueError):
    """A verifier file that cannot be used, with the reason."""


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


@dataclass(frozen=True)
class LinearProbe:
    """w·state + b at one layer; `reads` says which state: the prompt's last
    token ("prompt"), the answer's last token ("last") or the mean over the
    answer's tokens ("mean")."""

    layer: int
    reads: str
    weights: npt.NDArray[np.float64]  # over the raw state (standardisation folded in)
    bias: float

    def logit(self, state: State) -> float:
        return float(np.dot(self.weights, state.astype(np.float64)) + self.bias)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LinearProbe:
        reads = str(data["reads"])
        if reads not in ("prompt", "last", "mean"):
            raise VerifierError(f"a probe reads prompt, last or mean, not {reads!r}")
        return cls(
            layer=int(data["layer"]),
            reads=reads,
            weights=np.asarray(data["weights"], dtype=np.float64),
            bias=float(data["bias"]),
        )


_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def answer_key(text: str) -> frozenset[str]:
    """The answer's words, lower-cased (for agreement between candidates)."""
    return frozenset(w.lower() for w in _WORD.findall(text))


def agreement(text: str, others: Sequence[str]) -> float | None:
    """Mean word overlap (Jaccard) of `text` with the other candidates
    (None: it has none)."""
    if not others:
        return None
    mine = answer_key(text)
    scores = []
    for other in others:
        theirs = answer_key(other)
        union = mine | theirs
        scores.append(len(mine & theirs) / len(union) if union else 1.0)
    return sum(scores) / len(scores)


def grounded(text: str, source: str) -> float | None:
    """The share of the answer's content words found in `source` (the
    prompt's passages and question); None when it has none."""
    said = terms(text)
    if not said:
        return None
    held = term_set(source)
    return sum(word in held for word in said) / len(said)


def held_tokens(read_after: int) -> int:
    """The tokens a candidate holds when the state after `read_after` of them
    is read: one more (a token's state is computed as the next is drawn)."""
    return read_after + 1


@dataclass(frozen=True)
class Scored:
    """One candidate with the verifier's reading of it."""

    index: int
    text: str
    probability: float  # that it is right


@dataclass(frozen=True)
class Verifier:
    """One preset's verifier: P(the answer is right), and the policy it was chosen with."""

    preset: str
    gguf_sha256: str
    # over the answer's state (None: the file reads only the prompt, and a
    # candidate's probability is its prompt's answerability and the other features)
    correct: LinearProbe | None
    answerable: LinearProbe | None
    # the second stage: a weight per feature (FEATURES), a value for a missing one
    combine: Mapping[str, float]
    combine_bias: float
    fill: Mapping[str, float]
    threshold: float  # decline below this probability
    samples: int  # sampled candidates beside the greedy one
    temperature: float  # of the sampled ones
    # each candidate pauses for the choice once this many of its tokens were
    # read: the state of the last of them is what the probe reads
    candidate_tokens: int
    accept: float | None = None  # no samples when the greedy answer reaches this
    skip_below: float | None = None  # no answer written when answerability is below this
    path: Path | None = field(default=None, compare=False)

    @property
    def pause_at(self) -> int:
        """Where each candidate pauses for the choice: held_tokens(candidate_tokens)."""
        return held_tokens(self.candidate_tokens)

    @property
    def layer(self) -> int:
        """The layer of the answer's probe, else of the prompt's."""
        probe = self.correct or self.answerable
        if probe is None:
            raise VerifierError(f"the {self.preset} verifier reads neither answer nor prompt")
        return probe.layer

    def layers(self) -> tuple[int, ...]:
        probes = (self.correct, self.answerable)
        return tuple(sorted({p.layer for p in probes if p is not None}))

    def answerability(self, prompt_states: Mapping[int, State]) -> float | None:
        """P(the documents hold the answer), from the prompt's last token."""
        probe = self.answerable
        if probe is None or probe.layer not in prompt_states:
            return None
        return _sigmoid(probe.logit(prompt_states[probe.layer]))

    def probability(
        self,
        state: State | None,
        text: str,
        others: Sequence[str],
        logprobs: Sequence[float],
        answerable: float | None,
        source: str = "",
    ) -> float:
        """P(this candidate is right) (`source`: the passages and question
        the answer was written from)."""
        values: dict[str, float | None] = {
            "correct": None if self.correct is None or state is None else self.correct.logit(state),
            "answerable": None if answerable is None else _logit(answerable),
            "agreement": agreement(text, others) if "agreement" in self.combine else None,
            "logprob": float(np.mean(logprobs)) if logprobs else None,
            "grounded": grounded(text, source) if "grounded" in self.combine else None,
        }
        z = self.combine_bias
        for name, weight in self.combine.items():
            value = values[name]
            z += weight * (self.fill.get(name, 0.0) if value is None else value)
        return _sigmoid(z)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: Path | None = None) -> Verifier:
        where = str(path) if path else "verifier"
        try:
            if data["format"] != FORMAT:
                raise VerifierError(f"{where}: format {data['format']}, this server reads {FORMAT}")
            combine = {str(k): float(v) for k, v in data["combine"]["weights"].items()}
            unknown = set(combine) - set(FEATURES)
            if unknown:
                raise VerifierError(f"{where}: unknown features {sorted(unknown)}")
            policy = data["policy"]
            answerable = data.get("answerable")
            correct = data.get("correct")
            if correct is None and answerable is None:
                raise VerifierError(f"{where}: reads neither the answer nor the prompt")
            return cls(
                preset=str(data["preset"]),
                gguf_sha256=str(data["gguf_sha256"]),
                correct=None if correct is None else LinearProbe.from_dict(correct),
                answerable=None if answerable is None else LinearProbe.from_dict(answerable),
                combine=combine,
                combine_bias=float(data["combine"]["bias"]),
                fill={str(k): float(v) for k, v in data["combine"].get("fill", {}).items()},
                threshold=float(policy["threshold"]),
                samples=int(policy["samples"]),
                temperature=float(policy["temperature"]),
                candidate_tokens=int(policy["candidate_tokens"]),
                accept=None if policy.get("accept") is None else float(policy["accept"]),
                skip_below=None
                if policy.get("skip_below") is None
                else float(policy["skip_below"]),
                path=path,
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, VerifierError):
                raise
            raise VerifierError(f"{where}: not a verifier file ({exc!r})") from exc

    @classmethod
    def read(cls, path: Path) -> Verifier:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise VerifierError(f"{path}: cannot be read ({exc})") from exc
        return cls.from_dict(data, path)


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def verifier_path(preset: str) -> Path:
    return PROBES / f"{preset}.json"


@dataclass(frozen=True)
class Gate:
    """Which verifier checks answers (None: answers go out unverified, with the reason)."""

    verifier: Verifier | None
    threshold: float = 0.5
    reason: str | None = None

    def describe(self) -> dict[str, Any]:
        """For /health, /info, `edgerag doctor` and the web page."""
        v = self.verifier
        if v is None:
            return {"kind": "unverified", "reason": self.reason}
        return {
            "kind": "verifier",
            "threshold": self.threshold,
            "layer": v.layer,
            "reads": "prompt" if v.correct is None else v.correct.reads,
            "samples": v.samples,
            "accept": v.accept,
            "floor": v.skip_below,
            "features": sorted(v.combine),
            "file": None if v.path is None else v.path.name,
        }


def choose_gate(
    preset: str | None,
    model_path: Path,
    threshold: float | None,
    probes: Path = PROBES,
    warn: Any = None,
    off: bool = False,
) -> Gate:
    """The verifier trained on exactly this GGUF file (by sha256), at
    `threshold` (None: its own); else none, and `warn` is told why when the
    preset's verifier was trained on another file."""
    from flask_app.inference.pull import known_sha256

    if off:
        return Gate(None, reason="off (--answer-probe off)")
    files = sorted(probes.glob("*.json")) if probes.is_dir() else []
    if not files:
        return Gate(None, reason=f"no verifier files in {probes}")
    digest = known_sha256(model_path)
    found = [Verifier.read(path) for path in files]
    for verifier in found:
        if verifier.gguf_sha256 == digest:
            return Gate(verifier, verifier.threshold if threshold is None else threshold)
    own = [v for v in found if v.preset == preset]
    if not own:
        return Gate(None, reason=f"no verifier was trained on {model_path.name}")
    reason = (
        f"the verifier of {preset} was trained on a GGUF with sha256 "
        f"{own[0].gguf_sha256[:12]}…, but {model_path} has {digest[:12]}…; answers go out "
        f"unverified (rebuild it for this file: "
        f"`.venv/bin/python -m benches.quality.verifier_fit build --llm {preset}`)"
    )
    if warn is not None:
        warn(reason)
    return Gate(None, reason=reason)
