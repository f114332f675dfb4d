"""Which of an answer's candidates is sent: each scored by the verifier,
the likeliest right one that is an answer (not a refusal, not the
question's own words), the greedy one unless another is clearly likelier."""

from __future__ import annotations

import re

from flask_app.inference.llm import Candidate
from flask_app.rag import prompts
from flask_app.rag.text import term_set, terms
from flask_app.rag.verifier import Scored, Verifier


def verify(
    verifier: Verifier,
    candidates: list[Candidate],
    answerable: float | None,
    source: str = "",
) -> list[Scored]:
    """Each candidate with its probability of being right (stage 3;
    `source`: the prompt's passages and question)."""
    probe = verifier.correct
    texts = [c.text.strip() for c in candidates]
    out = []
    for c, text in zip(candidates, texts, strict=True):
        if probe is None:  # the verifier reads only the prompt
            state = None
            if not text:
                continue
        else:
            state = (c.mean_state if probe.reads == "mean" else c.last_state).get(probe.layer)
            if state is None:  # nothing decoded (an empty answer)
                continue
        others = [t for j, t in enumerate(texts) if j != c.index]
        p = verifier.probability(state, text, others, c.logprobs, answerable, source)
        out.append(Scored(c.index, text, p))
    return out


# "A or B?" and yes-or-no questions: their answer may be the question's own words
_OWN_WORDS_ANSWER = re.compile(
    r"\bor\b|^\s*(is|are|was|were|can|could|does|do|did|will|would|should|has|have|had"
    r"|may|must|shall)\b",
    re.IGNORECASE,
)


def restates(text: str, query: str) -> bool:
    """Every content word of `text` is the question's own: it says nothing
    the question did not ("Wi-Fi network" for "What is the name of the
    office guest Wi-Fi network?"). Never for a question whose answer may be
    its own words: "A or B?", or one asking yes or no."""
    said = set(terms(text))
    return bool(said) and said <= term_set(query) and not _OWN_WORDS_ANSWER.search(query)


def is_answer(text: str, query: str) -> bool:
    """`text` may be sent as the answer: not empty, not a refusal, not the question's words."""
    return bool(text) and not prompts.is_refusal(text) and not restates(text, query)


def choose(scored: list[Scored], query: str, first_margin: float = 0.0) -> Scored | None:
    """The likeliest right candidate that is an answer (stage 4); the first
    (greedy) one unless another is likelier by more than `first_margin`."""
    answers = [s for s in scored if is_answer(s.text, query)]
    best = max(answers, key=lambda s: s.probability, default=None)
    first = next((s for s in answers if s.index == 0), None)
    if (
        best is not None
        and first is not None
        and best.probability - first.probability <= first_margin
    ):
        return first
    return best
