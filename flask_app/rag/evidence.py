"""Evidence selection below the passage level.

The retrieved passages are cut into units (paragraphs, sentences); each unit
is scored half by meaning (the cosine of its embedding and the question's,
when the caller can measure it; the vectors are remembered across questions,
`unit_vectors.py`) and half by how much of the question's content words
(weighted by rarity among the units) it contains. The few best units, each
with its neighbours (a definition's heading, a following "it defaults
to..."; a long unit alone where the preset says so), become the prompt's
text instead of whole passages: the small model
sees the lines that answer, and the prompt stays short.

A passage naming product codes ("P3", "AX3000"), none of them the
question's, is about a sibling product and is left out (`on_subject`); a
question's code counts when a passage names it first (a sheet names its
product before its features).

The best unit's score is reported with the answer (`evidence_score`); it
decides nothing (a question asked in other words than its passage shares few
of its words). Every selected piece keeps its passage id and code-point
span, so citations point at the exact text the answer rests on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flask_app.rag.text import Unit, codes, leading_code, term_set, terms, units
from flask_app.rag.text import sentences as text_sentences


@dataclass(frozen=True)
class Scoring:
    units_wanted: int = 3
    neighbours: int = 1
    # a chosen unit of at least this many words is shown without its
    # neighbours: it states enough alone, and the neighbours were 38% of the
    # tokens an answer read (benches/prompt_cost.py); None: every unit gets them
    alone_words: int | None = None
    max_units: int = 96  # bounds the work per question
    # weight of meaning (embedding cosine with the question) against shared
    # words in a unit's score, when the caller can measure it
    meaning: float = 0.5


# Cosine of the question and each text by the embedding model, or None when
# it cannot be measured (vectors of an unknown model).
Closeness = Callable[[Sequence[str]], "list[float] | None"]


@dataclass(frozen=True)
class Evidence:
    """A contiguous piece of one passage: `text == passage[start:end]`."""

    passage: int  # index into the passages given to `select`
    start: int
    end: int
    text: str
    score: float  # best unit score inside the piece
    # the best unit inside the piece (what a citation points at): passage offsets
    focus_start: int = 0
    focus_end: int = 0


@dataclass(frozen=True)
class Selection:
    pieces: list[Evidence]  # grouped by passage, best passage first, text order inside
    best: Evidence | None  # the single best unit
    best_score: float


@dataclass(frozen=True)
class _Scored:
    passage: int
    index: int  # position among the passage's units
    unit: Unit
    score: float


def _coverage(question_terms: list[str], unit_terms: list[set[str]]) -> list[float]:
    """Share of the question's content (idf-weighted over the units) each unit holds."""
    n = len(unit_terms)
    idf = {t: math.log(1 + n / (1 + sum(t in u for u in unit_terms))) for t in question_terms}
    total = sum(idf.values()) or 1.0
    return [sum(idf[t] for t in question_terms if t in u) / total for u in unit_terms]


def supporting(answer: str, question: str, passages: Sequence[str]) -> list[int]:
    """The passages the answer's own content comes from: those sharing the
    most of its content words that are not already in the question (none when
    no passage holds any of them)."""
    said = set(terms(answer)) - set(terms(question))
    if not said:
        return []
    overlap = [len(said & term_set(p)) for p in passages]
    best = max(overlap, default=0)
    return [i for i, n in enumerate(overlap) if n == best] if best else []


def cited_sentence(answer: str, question: str, passage: str, piece: Evidence) -> tuple[int, int]:
    """Where a citation of `piece` for `answer` points (passage offsets): the
    fewest consecutive sentences of the piece that hold every content word of
    the answer (beyond the question's) that the piece holds at all; of
    equals, the one sharing most of the question. The piece's best unit when
    the piece holds none of the answer's words."""
    said = set(terms(answer)) - set(terms(question))
    asked = set(terms(question))
    found = text_sentences(passage, piece.start, piece.end)
    words = [term_set(s.text) for s in found]
    target = said & set().union(*words)
    if not target:
        return piece.focus_start, piece.focus_end
    best: tuple[int, int, int] | None = None  # (length, -question overlap, start index)
    for i in range(len(found)):
        held: set[str] = set()
        for j in range(i, len(found)):
            held |= words[j]
            if target <= held:
                key = (j - i, -len(asked & held), i)
                if best is None or key < best:
                    best = key
                break
    assert best is not None  # the whole piece holds the target
    first = best[2]
    return found[first].start, found[first + best[0]].end


def select(
    question: str,
    passages: Sequence[str],
    scoring: Scoring = Scoring(),
    closeness: Closeness | None = None,
) -> Selection:
    """The evidence for `question` in `passages`: every passage not about
    another product (`on_subject`) cut into units, each unit scored (shared
    words, and meaning when `closeness` can measure it), the best
    `units_wanted` kept with their neighbours, and each passage's kept units
    joined into contiguous pieces."""
    # a passage about another product than the question's is not evidence:
    # the P3's "not for swimming" reads as close to a question about the P5
    # as the P5's own line, and both models answered from the wrong sheet
    about = on_subject(question, passages)
    per_passage = [units(text) if on else [] for text, on in zip(passages, about, strict=True)]
    slots = _first_units(per_passage, scoring.max_units)
    if not slots:
        return Selection([], None, 0.0)
    texts = [per_passage[p][i].text for p, i in slots]
    cosines = closeness(texts) if closeness and scoring.meaning else None
    scored = _score(question, slots, per_passage, cosines, scoring.meaning)
    ranked = sorted(scored, key=lambda s: -s.score)
    chosen = ranked[: scoring.units_wanted]
    wanted = _with_neighbours(chosen, per_passage, scoring.neighbours, scoring.alone_words)
    pieces = _pieces(passages, per_passage, wanted, {(s.passage, s.index): s for s in scored})
    return Selection(pieces, _alone(ranked[0]), ranked[0].score)


Slot = tuple[int, int]  # (passage, index of the unit among the passage's)


def _first_units(per_passage: list[list[Unit]], limit: int) -> list[Slot]:
    """The first `limit` units in passage order: the work per question is bounded."""
    slots = [(p, i) for p, found in enumerate(per_passage) for i in range(len(found))]
    return slots[:limit]


def _score(
    question: str,
    slots: list[Slot],
    per_passage: list[list[Unit]],
    cosines: list[float] | None,
    meaning_weight: float,
) -> list[_Scored]:
    """Each unit's share of the question's words, blended with its meaning."""
    found = [per_passage[p][i] for p, i in slots]
    scores = _coverage(terms(question), [term_set(u.text) for u in found])
    if cosines is not None:
        w = meaning_weight
        scores = [(1 - w) * c + w * max(0.0, m) for c, m in zip(scores, cosines, strict=True)]
    return [
        _Scored(p, i, unit, score) for (p, i), unit, score in zip(slots, found, scores, strict=True)
    ]


def _with_neighbours(
    chosen: list[_Scored],
    per_passage: list[list[Unit]],
    neighbours: int,
    alone_words: int | None = None,
) -> dict[int, dict[int, float]]:
    """Per passage, the unit indices to show and each one's score (a
    neighbour shown for context scores 0); a unit of `alone_words` words or
    more is shown without neighbours."""
    wanted: dict[int, dict[int, float]] = {}
    for s in chosen:
        alone = alone_words is not None and len(s.unit.text.split()) >= alone_words
        around = 0 if alone else neighbours
        lo = max(0, s.index - around)
        hi = min(len(per_passage[s.passage]), s.index + around + 1)
        shown = wanted.setdefault(s.passage, {})
        for i in range(lo, hi):
            shown[i] = max(shown.get(i, 0.0), s.score if i == s.index else 0.0)
    return wanted


def _runs(indices: list[int]) -> list[list[int]]:
    """Sorted indices split where they stop being consecutive."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _pieces(
    passages: Sequence[str],
    per_passage: list[list[Unit]],
    wanted: dict[int, dict[int, float]],
    by_slot: dict[Slot, _Scored],
) -> list[Evidence]:
    """Each passage's shown units joined into contiguous pieces, the passage
    with the best unit first, text order inside a passage."""
    pieces: list[Evidence] = []
    for p in sorted(wanted, key=lambda p: -max(wanted[p].values())):
        for run in _runs(sorted(wanted[p])):
            first, last = per_passage[p][run[0]], per_passage[p][run[-1]]
            # the run's best unit (units past max_units were not scored)
            top = max((by_slot[(p, j)] for j in run if (p, j) in by_slot), key=lambda s: s.score)
            pieces.append(
                Evidence(
                    p,
                    first.start,
                    last.end,
                    passages[p][first.start : last.end],
                    max(wanted[p][j] for j in run),
                    top.unit.start,
                    top.unit.end,
                )
            )
    return pieces


def on_subject(question: str, passages: Sequence[str]) -> list[bool]:
    """Per passage, whether it may be about what the question asks: not when
    it names product codes and none of the question's (the P3's sheet, asked
    about the P5). A passage naming no code (a later chunk of a manual) may
    be. Only a question's code that some passage names first counts: that is
    the product a sheet is about, where "IPv6" in a question is a feature
    (the router's sheet saying "IPv4" stays) and a code no passage names
    tells nothing apart."""
    held = [codes(text) for text in passages]
    named = codes(question) & {leading_code(text) for text in passages}
    return [not named or not h or bool(named & h) for h in held]


def _alone(scored: _Scored) -> Evidence:
    """One scored unit as a piece of its own."""
    unit = scored.unit
    return Evidence(
        scored.passage, unit.start, unit.end, unit.text, scored.score, unit.start, unit.end
    )
