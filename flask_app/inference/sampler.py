"""Drawing one token from a logits row: penalties, top-k, top-p, temperature.

The order is llama.cpp's default chain (penalties, top-k, top-p,
temperature, draw); temperature 0 is the argmax. Each branch of a
generation draws from its own `numpy.random.Generator`, so a seeded
request draws the same tokens whatever else is decoded beside it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Logits = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Sampling:
    """How tokens are drawn (`top_k` None: no top-k cut); penalties as in OpenAI's API."""

    temperature: float = 0.2
    top_p: float = 0.95
    top_k: int | None = 40
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    seed: int | None = None  # None: a fresh draw per request

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


DEFAULT = Sampling()


def penalised(logits: Logits, sampling: Sampling, drawn: Counter[int]) -> Logits:
    """`logits` less the presence and frequency penalties of the tokens drawn so far."""
    if not drawn or (sampling.presence_penalty == 0 and sampling.frequency_penalty == 0):
        return logits
    out = logits.copy()
    ids = np.fromiter(drawn.keys(), dtype=np.int64, count=len(drawn))
    counts = np.fromiter(drawn.values(), dtype=np.float32, count=len(drawn))
    out[ids] -= sampling.presence_penalty + sampling.frequency_penalty * counts
    return out


def draw(logits: Logits, sampling: Sampling, rng: np.random.Generator, drawn: Counter[int]) -> int:
    """The next token from `logits` (one row over the vocabulary)."""
    row = penalised(logits, sampling, drawn)
    if sampling.greedy:
        return int(np.argmax(row))
    if sampling.top_k is not None and sampling.top_k < row.shape[0]:
        ids = np.argpartition(row, -sampling.top_k)[-sampling.top_k :]
    else:
        ids = np.arange(row.shape[0])
    values = row[ids].astype(np.float64)
    order = np.argsort(-values, kind="stable")
    ids, values = ids[order], values[order]
    p = np.exp(values - values[0])
    p /= p.sum()
    if sampling.top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(p), sampling.top_p) + 1)
        ids, values = ids[:keep], values[:keep]
    p = np.exp((values - values[0]) / sampling.temperature)
    p /= p.sum()
    return int(ids[rng.choice(len(ids), p=p)])


def logprob(logits: Logits, token: int) -> float:
    """log P(token) under the model's own distribution (before any sampling cut)."""
    top = float(logits.max())
    return float(logits[token]) - top - float(np.log(np.exp(logits - top).sum()))


@dataclass(frozen=True)
class FirstStep:
    """What the distribution of an answer's first token says: how likely it
    starts with one of the refusal's first tokens, how sure the model is."""

    refusal_probability: float | None
    top_probability: float
    entropy: float  # nats


def first_step(logits: Logits, refusal_ids: list[int]) -> FirstStep:
    z = logits.astype(np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    return FirstStep(
        refusal_probability=float(p[refusal_ids].sum()) if refusal_ids else None,
        top_probability=float(p.max()),
        entropy=float(-(p * np.log(np.maximum(p, 1e-30))).sum()),
    )
