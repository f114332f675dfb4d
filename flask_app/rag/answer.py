"""Grounded answers, verified before they are sent: the one answer path
every surface takes (each supplies its question's form: system prompt,
labels, refusal).

    with answer(llm, retriever, question, config) as stream:
        stream.grounding   # the passages and evidence the prompt holds
        for delta in stream: ...
    stream.outcome

1. **Ground**: the retriever's best passages are cut into evidence units;
   the best few (with their neighbours) go into a short prompt in the
   surface's form (its system prompt, labels and refusal).
2. **Propose**: the prompt is read once; the model writes its greedy answer
   and stops at `candidate_tokens` for a choice.
3. **Verify**: the verifier reads the model's hidden state over the
   answer's tokens (where, its file says) and says how likely it is right.
   Below `accept`, a few sampled answers are written from the same read of
   the prompt and scored too.
4. **Choose**: among the candidates that are not a refusal nor the
   question's own words, the answer whose probabilities sum highest (one
   written twice counts twice; `rag/choice.py`); below the threshold, the
   surface's own decline. Its probability is the confidence every surface
   reports.
5. **Send**: the chosen answer's text, then the rest of it if it was longer
   than `candidate_tokens`, as the model writes it.

Without a verifier for the served model file (or with a conversation
history, which it was not trained on), the first answer streams as the
model writes it and the first token's refusal probability is the only gate.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from flask_app.inference.llm import LLM, Ask, Generation, Sampling
from flask_app.rag import evidence, retrieval
from flask_app.rag.choice import choose, is_answer, verify
from flask_app.rag.pipeline import LLMNotConfigured, Prompt, Question, build_prompt, clean_stream
from flask_app.rag.verifier import Verifier
from flask_app.store import Hit

GREEDY = Sampling(temperature=0.0)


@dataclass(frozen=True)
class AnswerConfig:
    max_tokens: int = 256
    context_tokens: int = 1024
    min_cosine: float | None = None  # passages less similar than this are not used
    evidence_units: int = 3
    # an evidence unit of at least this many words goes into the prompt
    # without its neighbours (None: every unit with them)
    evidence_alone_words: int | None = None
    meaning: float = 0.5  # weight of embedding closeness against shared words in evidence
    # passages whose units are ranked for evidence (None: top_k); the prompt
    # still holds evidence of at most top_k of them
    candidates: int | None = None
    # False: the prompt holds the chosen passages whole, not just their evidence
    evidence_only: bool = True
    # True: each evidence piece is its own prompt passage (Grounding.sources
    # then holds one hit per piece, repeated for pieces of the same passage)
    piece_blocks: bool = False
    verifier: Verifier | None = None  # None: answers go out unverified
    threshold: float = 0.5  # the verifier's: decline below this
    # unverified: decline when the first token starts a refusal with more
    # than this probability (None: never)
    refusal_probability: float | None = 0.3


@dataclass(frozen=True)
class Grounding:
    sources: list[Hit]  # the passages whose evidence is in the prompt, best first
    pieces: list[evidence.Evidence]  # the evidence; `passage` indexes `sources`
    best: evidence.Evidence | None
    evidence_score: float
    prompt: Prompt | None  # None: nothing retrieved, the answer is the fixed sentence

    @classmethod
    def nothing(cls) -> Grounding:
        """Nothing retrieved (or nothing asked): the answer is the fixed
        sentence, without the model."""
        return cls(sources=[], pieces=[], best=None, evidence_score=0.0, prompt=None)


def _evidence_query(question: Question) -> str:
    """The question, preceded by the previous one in a conversation (a
    follow-up's "it" is found in the turn before)."""
    asked = [t["content"] for t in question.chat_history if t["role"] == "user"]
    return f"{asked[-1]} {question.query}" if asked else question.query


def ground(
    llm: LLM | None,
    retriever: retrieval.Retriever,
    question: Question,
    config: AnswerConfig,
) -> Grounding:
    """Retrieval, evidence units and the prompt (stage 1)."""
    if llm is None:
        raise LLMNotConfigured()
    passages = retriever.passages(question.query, max(question.top_k, config.candidates or 0))
    floors = [f for f in (question.min_cosine, config.min_cosine) if f is not None]
    candidates = [hit for hit in passages if all(hit.score >= f for f in floors)]
    selection = evidence.select(
        _evidence_query(question),
        [hit.text for hit in candidates],
        evidence.Scoring(
            units_wanted=config.evidence_units,
            meaning=config.meaning,
            alone_words=config.evidence_alone_words,
        ),
        lambda texts: retriever.closeness(question.query, texts),
    )
    if not selection.pieces:
        return Grounding.nothing()
    # passages in the order of their best evidence, at most top_k of them
    used = list(dict.fromkeys(piece.passage for piece in selection.pieces))[: question.top_k]
    renumber = {old: new for new, old in enumerate(used)}
    pieces = [
        replace(p, passage=renumber[p.passage]) for p in selection.pieces if p.passage in renumber
    ]
    # the best unit is always among the chosen, so its passage is in the prompt
    best = selection.best and replace(selection.best, passage=renumber[selection.best.passage])
    if config.piece_blocks:
        by_rank = sorted(pieces, key=lambda p: p.passage)
        prompt = build_prompt(
            llm,
            question,
            [candidates[used[p.passage]] for p in by_rank],
            texts=[p.text for p in by_rank],
            answer_tokens=config.max_tokens,
            context_tokens=config.context_tokens,
        )
        kept = by_rank[: len(prompt.sources)]
        return Grounding(prompt.sources, kept, best, selection.best_score, prompt)
    sources = [candidates[i] for i in used]
    if config.evidence_only:
        blocks = [" … ".join(p.text for p in pieces if p.passage == i) for i in range(len(used))]
    else:
        blocks = [hit.text for hit in sources]
    prompt = build_prompt(
        llm,
        question,
        sources,
        texts=blocks,
        answer_tokens=config.max_tokens,
        context_tokens=config.context_tokens,
    )
    kept_sources = len(prompt.sources)
    pieces = [p for p in pieces if p.passage < kept_sources]
    return Grounding(sources[:kept_sources], pieces, best, selection.best_score, prompt)


def repeating_tail(text: str, longest: int = 8, run: int = 24) -> bool:
    """`text` ends with one short piece (≤ `longest` characters, not only
    spaces) repeated to at least `run` characters and at least 8 times: the
    small model sometimes loops on a digit or a phrase until max_tokens."""
    for period in range(1, longest + 1):
        times = max(8, -(-run // period))
        span = period * times
        if len(text) < span:
            break
        piece = text[-period:]
        if piece.strip() and text[-span:] == piece * times:
            return True
    return False


@dataclass(frozen=True)
class Outcome:
    """How an answer ended: known once its last delta is out."""

    declined: bool  # the surface's refusal stands for the answer (no word of the model's)
    # the probability that the answer is right (for a decline: the best
    # candidate's, which fell short); None when no verifier read it
    confidence: float | None
    refusal_probability: float | None  # the first token's, when read
    answerability: float | None  # the prompt's, when the verifier reads it
    candidates: int  # answers written to choose from
    stopped_repeating: bool  # cut where the model began to loop
    # seconds: the prompt read, the candidates written, the verifier's reading
    prefill_s: float | None = None
    candidates_s: float | None = None
    verify_s: float | None = None


class AnswerStream:
    """Deltas of one answer; joined they are exactly the final answer. Its
    `outcome` is there once the last delta was taken."""

    def __init__(
        self,
        generation: Generation | None,
        grounding: Grounding,
        question: Question,
        config: AnswerConfig,
        verifier: Verifier | None,
    ) -> None:
        self._generation = generation
        self._grounding = grounding
        self._question = question
        self._config = config
        self._verifier = verifier
        self._outcome: Outcome | None = None
        self._timing: dict[str, float | None] = {}
        self._confidence: float | None = None
        self._answerability: float | None = None
        self._refusal: float | None = None
        self._written = 0

    @property
    def grounding(self) -> Grounding:
        return self._grounding

    @property
    def outcome(self) -> Outcome:
        """How the answer ended (RuntimeError before its last delta was taken)."""
        if self._outcome is None:
            raise RuntimeError("the answer's outcome is known once its last delta is taken")
        return self._outcome

    def _ended(self, declined: bool, stopped_repeating: bool = False) -> None:
        self._outcome = Outcome(
            declined=declined,
            confidence=self._confidence,
            refusal_probability=self._refusal,
            answerability=self._answerability,
            candidates=self._written,
            stopped_repeating=stopped_repeating,
            prefill_s=self._timing.get("prefill"),
            candidates_s=self._timing.get("candidates"),
            verify_s=self._timing.get("verify"),
        )

    def _source(self) -> str:
        """What the answer was written from: the prompt's last message."""
        prompt = self._grounding.prompt
        return "" if prompt is None else prompt.messages[-1]["content"]

    def _seed(self) -> int:
        """The request's seed, else one of the prompt: the same question over
        the same passages is answered the same way."""
        given = self._question.sampling.seed
        if given is not None:
            return given
        prompt = self._grounding.prompt
        text = "" if prompt is None else "\n".join(m["content"] for m in prompt.messages)
        return zlib.crc32(text.encode("utf-8"))

    def _read(self, generation: Generation) -> None:
        started = time.monotonic()
        first, states = generation.reading()
        self._timing["prefill"] = time.monotonic() - started
        self._refusal = first.refusal_probability
        if self._verifier is not None:
            self._answerability = self._verifier.answerability(states)

    def _unverified(self, generation: Generation) -> int | None:
        """The first answer, unless the model is about to refuse."""
        self._read(generation)
        floor = self._config.refusal_probability
        if floor is not None and (self._refusal or 0.0) > floor:
            return None
        self._written = 1
        return 0

    def _verified(self, generation: Generation, verifier: Verifier) -> int | None:
        """Stages 2-4: the chosen candidate's index (None: declined)."""
        self._read(generation)
        skip = verifier.skip_below
        if skip is not None and self._answerability is not None and self._answerability < skip:
            if verifier.correct is None:  # its every answer would have this probability
                self._confidence = verifier.probability(None, "", [], [], self._answerability)
            return None  # the documents hardly hold an answer: none is written
        clock = time.monotonic()
        candidates = generation.settle()
        writing, clock = time.monotonic() - clock, time.monotonic()
        scored = verify(verifier, candidates, self._answerability, self._source())
        checking = time.monotonic() - clock
        query = self._question.query
        first = next((s for s in scored if s.index == 0), None)
        sure = (
            verifier.accept is not None
            and first is not None
            and is_answer(first.text, query)
            and first.probability >= verifier.accept
        )
        if verifier.samples and not sure:
            sampling = replace(
                self._question.sampling,
                temperature=verifier.temperature,
                top_p=0.95,
                top_k=40,
                seed=self._seed(),
            )
            clock = time.monotonic()
            generation.spawn(verifier.samples, sampling, self._config.max_tokens, verifier.pause_at)
            candidates = generation.settle()
            writing, clock = writing + time.monotonic() - clock, time.monotonic()
            scored = verify(verifier, candidates, self._answerability, self._source())
            checking += time.monotonic() - clock
        self._timing["candidates"] = writing
        self._timing["verify"] = checking
        self._written = len(candidates)
        best = choose(scored, query)
        self._confidence = None if best is None else best.probability
        if best is None or best.probability < self._config.threshold:
            return None
        return best.index

    def __iter__(self) -> Iterator[str]:
        form = self._question.form
        generation = self._generation
        if generation is None:
            yield form.refusal
            self._ended(declined=True)
            return
        verifier = self._verifier
        chosen = (
            self._unverified(generation)
            if verifier is None
            else self._verified(generation, verifier)
        )
        if chosen is None:
            generation.close()
            yield form.refusal
            self._ended(declined=True)
            return
        parts: list[str] = []
        stopped = False
        for delta in clean_stream(generation.stream(chosen)):
            parts.append(delta)
            yield delta
            if repeating_tail("".join(parts[-64:])):
                generation.close()  # a loop ("1000000…") would run to max_tokens
                stopped = True
                break
        self._ended(declined=False, stopped_repeating=stopped)

    def close(self) -> None:
        if self._generation is not None:
            self._generation.close()

    def __enter__(self) -> AnswerStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_answer(
    llm: LLM | None,
    grounding: Grounding,
    question: Question,
    config: AnswerConfig,
    abandoned: Callable[[], bool] | None = None,
    timeout: float | None = None,
) -> AnswerStream:
    """Wait for the model and start the answer (raises LLMOverloaded, LLMTimeout,
    LLMCancelled); with nothing retrieved, the fixed sentence without the model."""
    if llm is None:
        raise LLMNotConfigured()
    if grounding.prompt is None:
        return AnswerStream(None, grounding, question, config, None)
    # the verifier learnt single questions; a follow-up reads differently
    verifier = None if question.chat_history else config.verifier
    if verifier is None:
        ask = Ask(
            max_tokens=config.max_tokens,
            sampling=question.sampling,
            refusal_starts=question.form.refusal_starts,
        )
    else:
        ask = Ask(
            max_tokens=config.max_tokens,
            sampling=replace(GREEDY, stop=question.sampling.stop),
            spare=verifier.samples,
            pause_at=verifier.pause_at,
            layers=verifier.layers(),
            refusal_starts=question.form.refusal_starts,
        )
    generation = llm.generate(grounding.prompt.messages, ask, timeout=timeout, abandoned=abandoned)
    return AnswerStream(generation, grounding, question, config, verifier)


def answer(
    llm: LLM | None,
    retriever: retrieval.Retriever | None,
    question: Question,
    config: AnswerConfig,
    *,
    abandoned: Callable[[], bool] | None = None,
    timeout: float | None = None,
) -> AnswerStream:
    """Ground `question` in `retriever`'s passages (None: nothing to retrieve
    from, the fixed sentence) and start its answer: the one call every
    surface makes (raises what `ground` and `open_answer` raise)."""
    if llm is None:
        raise LLMNotConfigured()
    grounding = (
        Grounding.nothing() if retriever is None else ground(llm, retriever, question, config)
    )
    return open_answer(llm, grounding, question, config, abandoned=abandoned, timeout=timeout)
