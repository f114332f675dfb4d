"""Which of an answer's candidates is sent: each scored by the verifier;
among those that are answers (not a refusal, not the question's own
words), the one whose candidates' probabilities sum highest, the same
answer written twice counted together."""

from __future__ import annotations

import re
from collections.abc import Sequence

from flask_app.inference.llm import Candidate
from flask_app.rag import prompts
from flask_app.rag.text import term_set, terms, words
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


def same_answer(text: str) -> str:
    """What two candidates share when they say the same in the same words
    (case, punctuation and spacing aside)."""
    return " ".join(words(text))


def pooled(entries: Sequence[tuple[int, str, float]]) -> tuple[int, float] | None:
    """Of (index, text, P(right)) entries, the answer whose entries' P sum
    highest (ties: the earliest, the greedy one first) as (its earliest
    index, its likeliest P): the model writing an answer again is evidence
    for it. On dev it answered as many right less wrong as the likeliest
    single candidate, with fewer wrong (docs/answer-quality.md)."""
    groups: dict[str, list[tuple[int, float]]] = {}
    for index, text, p in entries:
        groups.setdefault(same_answer(text), []).append((index, p))
    if not groups:
        return None
    best = max(groups.values(), key=lambda g: (sum(p for _, p in g), -min(i for i, _ in g)))
    return min(i for i, _ in best), max(p for _, p in best)


def choose(scored: list[Scored], query: str) -> Scored | None:
    """The chosen candidate among those that are answers (stage 4), with
    the probability of its answer (`pooled`)."""
    answers = {s.index: s for s in scored if is_answer(s.text, query)}
    chosen = pooled([(s.index, s.text, s.probability) for s in answers.values()])
    if chosen is None:
        return None
    index, probability = chosen
    return Scored(index, answers[index].text, probability)
