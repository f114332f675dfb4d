"""Grounded answers: hybrid retrieval → evidence units → a short prompt →
generation gated by the model's own refusal probability.

    grounding = ground(llm, retriever, question, config)
    with open_answer(llm, grounding, question, config) as answer:
        for delta in answer: ...

`retriever` is a stored collection or the documents of one request
(`rag.retrieval`); evidence units are ranked over its `top_k` best passages
(or `candidates`, when more) and those of at most `top_k` passages reach the
prompt; `question.form` says how the surface wants the model
asked and refusals worded. The answer is the refusal, without generating, when
nothing was retrieved; instead of generating when the model, asked on the
answer's own prompt whether the documents state the answer, says yes with less
than `judge` probability (a judge calibrated per model; 0 = not asked); and
when the first token's distribution gives the refusal more than
`refusal_probability` (read from the answer's own prompt: no extra prompt, so
the system prompt stays in the KV cache). A yes-or-no question the gates
decline gets the evidence line closest to it in meaning quoted instead,
said not to answer it directly, when close enough ("Can I visit on a
Monday?" → the opening hours): the models cannot read a schedule into a
yes or no, and cannot tell when the documents settle it. Where the
answerability probe let the answer through and its file says so, a model
about to refuse gets the best evidence line quoted as the answer instead
(the 0.5B words fewer answers than the documents hold), and so does a
yes-or-no question where the file says so (the models answer "Can I go on
a Monday?" with a yes over "closed on Mondays"). Over a client's own
system prompt or footer the probe reads the prompt it was fitted on (the
same passages and question, the default system prompt, no footer) in a
one-token pass first, and the answer comes from the client's. Shared words
between question and passage decide nothing on their own: a question in
other words than its passage still reaches the model. An answer that only restates the
question, or answers "Which …" with the question's own subject and names
nothing, gets an evidence line appended as a quote (the one it paraphrased,
else the best); one that starts looping on a short piece ("1000000…") is
stopped there.
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from flask_app.inference.llm import (
    LLM,
    ChatMessage,
    FirstTokenProbe,
    HiddenStateProbe,
    JudgeProbe,
    TokenStream,
)
from flask_app.rag import evidence, prompts, retrieval
from flask_app.rag.answerability import AnswerProbe, Signals
from flask_app.rag.pipeline import (
    LLMNotConfigured,
    Prompt,
    Question,
    build_prompt,
    clean_stream,
)
from flask_app.rag.text import STOPWORDS, asks_yes_or_no, terms, words
from flask_app.store import Hit


@dataclass(frozen=True)
class AnswerConfig:
    max_tokens: int = 256
    context_tokens: int = 1024
    # refuse when P(first token starts a refusal) > this
    refusal_probability: float = 0.3
    # refuse when the model, asked whether the documents state the answer,
    # says yes with less than this probability (0: the judge is not asked)
    judge: float = 0.0
    min_cosine: float | None = None  # passages less similar than this are not used
    evidence_units: int = 3
    # an evidence unit of at least this many words goes into the prompt
    # without its neighbours (None: every unit with them)
    evidence_alone_words: int | None = None
    meaning: float = 0.5  # weight of embedding closeness against shared words in evidence
    # passages whose units are ranked for evidence (0 or below top_k: top_k);
    # the prompt still holds evidence of at most top_k of them
    candidates: int = 0
    # False: the prompt holds the chosen passages whole, not just their evidence
    evidence_only: bool = True
    # True: each evidence piece is its own prompt passage (Grounding.sources
    # then holds one hit per piece, repeated for pieces of the same passage)
    piece_blocks: bool = False
    # a yes-or-no question the gates decline gets the evidence line closest
    # to it in meaning quoted, said not to be a verdict, instead of the
    # refusal, when their cosine is at least this (None: never); the models
    # cannot read a schedule into a yes or no (docs/answer-quality.md)
    closest_line_min_cosine: float | None = 0.4
    # the answerability probe (None: the refusal and judge gates decide) and
    # the probability it must reach for the model's answer to be kept
    probe: AnswerProbe | None = None
    probe_threshold: float = 0.5
    # more layers whose hidden state the prefill reads (measuring probes)
    hidden_layers: tuple[int, ...] = ()

    def asks_judge(self) -> bool:
        if self.probe is not None:
            return self.probe.uses_judge
        return self.judge > 0

    def reads_layers(self) -> tuple[int, ...]:
        own = () if self.probe is None else (self.probe.layer,)
        return tuple(dict.fromkeys((*own, *self.hidden_layers)))


@dataclass(frozen=True)
class Grounding:
    sources: list[Hit]  # the passages whose evidence is in the prompt, best first
    pieces: list[evidence.Evidence]  # the evidence; `passage` indexes `sources`
    best: evidence.Evidence | None
    evidence_score: float
    prompt: Prompt | None  # None: nothing retrieved, the answer is the fixed sentence
    # the chosen unit closest in meaning to the question, with its cosine
    # (None: not measured, or its passage did not fit the prompt)
    closest: evidence.Evidence | None = None
    closest_meaning: float | None = None

    def quotable(self) -> str | None:
        """The best evidence unit's text when it states something (5 words
        or more, not a heading such as "Pulse P3 earbuds."): what a refusal
        is answered with where the probe's file says so."""
        best = self.best
        if best is None or len(words(best.text)) < evidence.STATEMENT_WORDS:
            return None
        return best.text

    @classmethod
    def nothing(cls) -> Grounding:
        """Nothing retrieved (or nothing asked): the answer is the fixed
        sentence, without the model."""
        return cls(sources=[], pieces=[], best=None, evidence_score=0.0, prompt=None)

    @classmethod
    def of_prompt(
        cls,
        prompt: Prompt,
        sources: list[Hit],
        pieces: list[evidence.Evidence],
        selection: evidence.Selection,
        best: evidence.Evidence | None,
        closest: tuple[evidence.Evidence | None, float | None],
    ) -> Grounding:
        """A prompt built from `selection`'s evidence, with the chosen unit
        closest in meaning when the prompt shows it."""
        return cls(
            sources=sources,
            pieces=pieces,
            best=best,
            evidence_score=selection.best_score,
            prompt=prompt,
            closest=closest[0],
            closest_meaning=closest[1],
        )


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
    if llm is None:
        raise LLMNotConfigured()
    passages = retriever.passages(question.query, max(question.top_k, config.candidates))
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
            probe_reads=config.probe is not None,
        )
        kept = len(prompt.sources)
        pieces = by_rank[:kept]
        closest = _closest_shown(selection, renumber, pieces)
        return Grounding.of_prompt(prompt, prompt.sources, pieces, selection, best, closest)
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
        probe_reads=config.probe is not None,
    )
    kept = len(prompt.sources)
    pieces = [p for p in pieces if p.passage < kept]
    closest = _closest_shown(selection, renumber, pieces)
    return Grounding.of_prompt(prompt, sources[:kept], pieces, selection, best, closest)


def _closest_shown(
    selection: evidence.Selection, renumber: dict[int, int], shown: list[evidence.Evidence]
) -> tuple[evidence.Evidence | None, float | None]:
    """The selection's closest unit (numbered as the prompt's passages) and
    its cosine, or (None, None) when no piece in the prompt holds it."""
    unit = selection.closest
    if unit is None or unit.passage not in renumber:
        return None, None
    unit = replace(unit, passage=renumber[unit.passage])
    if not any(p.passage == unit.passage and p.start <= unit.start < p.end for p in shown):
        return None, None
    return unit, selection.closest_meaning


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


def restates(answer: str, question: str) -> bool:
    """The answer's content words are all the question's: it adds nothing."""
    said = set(terms(answer)) - STOPWORDS
    return bool(said) and said <= set(terms(question))


# a token that names something: an option, a number, code, a quoted string
_NAME_LIKE = re.compile(r"^-|\d|[._:()/`'\"=]")


def names_something(answer: str, question: str) -> bool:
    """The answer holds a name-like token the question does not ("-s",
    "1024", "str.zfill", "`-c`")."""
    asked = {token.strip(".,;!?").lower() for token in question.split()}
    for token in answer.split():
        word = token.strip(".,;!?")
        if word and word.lower() not in asked and _NAME_LIKE.search(word):
            return True
    return False


def echoes_subject(answer: str, question: str) -> bool:
    """A "Which …" question answered with its own subject and nothing that
    names an answer ("Which ls option sets the output width?" → "The ls
    option sets the output width to COLS."): the answer never says which."""
    asked, said = words(question), words(answer)
    if len(asked) < 4 or asked[0] != "which":
        return False
    echoed = said[:1] == ["the"] and said[1:4] == asked[1:4]
    return echoed and not names_something(answer, question)


@dataclass(frozen=True)
class Outcome:
    """How an answer ended: known once its last delta is out."""

    refused: bool  # the fixed sentence stands for the answer
    # the answer holds no word of the model's: nothing was retrieved, or the
    # gates declined (the fixed sentence, or a declined question's quote)
    declined: bool
    stopped_repeating: bool  # cut where the model began to loop
    refusal_probability: float | None  # the first token's, when read
    # how likely the documents hold the answer: the probe's probability when
    # it read the prefill, else the judge's P(yes) (None: neither)
    answerable_probability: float | None


@dataclass(frozen=True)
class PrefillReading:
    """What the answer gates read from one prefill: the hidden state, the
    first token's refusal probability and the judge's P(yes), each where
    asked for."""

    hidden: HiddenStateProbe | None = None
    first_token: FirstTokenProbe | None = None
    judge: JudgeProbe | None = None

    @classmethod
    def of(
        cls,
        messages: list[ChatMessage],
        config: AnswerConfig,
        refusal_starts: tuple[str, ...],
        gates: bool = True,
    ) -> PrefillReading:
        """The probes a prefill of `messages` is read with: the first token's
        always (where the form has refusal starts), the probe's layers and
        the judge where `gates` read this prefill."""
        layers = config.reads_layers() if gates else ()
        asks_judge = gates and config.asks_judge()
        return cls(
            hidden=HiddenStateProbe(layers) if layers else None,
            first_token=FirstTokenProbe(refusal_starts) if refusal_starts else None,
            judge=JudgeProbe(prompts.judge_messages(messages)) if asks_judge else None,
        )


class Decline(enum.Enum):
    GATE = "gate"  # the probe or the judge: the documents do not hold the answer
    REFUSAL = "refusal"  # the first token: the model is about to refuse


class AnswerStream:
    """Deltas of one answer; joined they are exactly the final answer. Its
    `outcome` is there once the last delta was taken."""

    def __init__(
        self,
        tokens: TokenStream | None,
        own: PrefillReading,
        grounding: Grounding,
        question: Question,
        config: AnswerConfig,
        fitted: PrefillReading | None = None,
    ) -> None:
        self._tokens = tokens
        self._own = own  # the answer's own prefill: its first token says "refusing"
        # what the gates read: the prompt the probe was fitted on, where the
        # answer's own prompt is a client's; else the answer's own
        self._gates = own if fitted is None else fitted
        self._grounding = grounding
        self._question = question
        self._config = config
        self.refusal_probability: float | None = None
        self.probe_probability: float | None = None  # the probe's, once it read the prefill
        self.first_token: FirstTokenProbe | None = own.first_token  # its distribution's readings
        self._outcome: Outcome | None = None

    @property
    def outcome(self) -> Outcome:
        """How the answer ended (RuntimeError before its last delta was taken)."""
        if self._outcome is None:
            raise RuntimeError("the answer's outcome is known once its last delta is taken")
        return self._outcome

    def _answerable_probability(self) -> float | None:
        if self.probe_probability is not None:
            return self.probe_probability
        return self._judged()

    def _judged(self) -> float | None:
        judge = self._gates.judge
        return None if judge is None else judge.probability

    def _ended(self, *, refused: bool, declined: bool, stopped_repeating: bool = False) -> None:
        self._outcome = Outcome(
            refused=refused,
            declined=declined,
            stopped_repeating=stopped_repeating,
            refusal_probability=self.refusal_probability,
            answerable_probability=self._answerable_probability(),
        )

    def _signals(self) -> Signals:
        grounding = self._grounding
        first = self._gates.first_token
        return Signals(
            hidden=self.hidden_states,
            refusal_probability=None if first is None else first.probability,
            judge=self._judged(),
            meaning=grounding.closest_meaning,
            evidence_score=grounding.evidence_score,
            best_cosine=max((hit.score for hit in grounding.sources), default=None),
        )

    @property
    def hidden_states(self) -> dict[int, npt.NDArray[np.float32]] | None:
        """The last prompt token's hidden state by layer that the probe
        reads (of the fitted prompt, where one was read), once the first
        delta came."""
        hidden = self._gates.hidden
        return None if hidden is None else hidden.states

    def _declines(self) -> Decline | None:
        """At the first delta: the probe, where it read the prefill, else the
        judge, says decline (GATE); or the first token's distribution says the
        model is about to refuse (REFUSAL: then the fixed sentence, or a
        yes-or-no question's closest line, stands in for the model's own
        refusal, or the best evidence line where the probe let it through and
        its file says to quote)."""
        first = self._own.first_token
        if first is not None:
            self.refusal_probability = first.probability
        probe = self._config.probe
        if probe is not None:
            self.probe_probability = probe.probability(self._signals())
        judged = self._judged()
        if self.probe_probability is not None:
            if self.probe_probability < self._config.probe_threshold:
                return Decline.GATE
        elif judged is not None and judged < self._config.judge:
            return Decline.GATE
        if first is None:
            return None
        if (self.refusal_probability or 0.0) > self._config.refusal_probability:
            return Decline.REFUSAL
        return None

    def __iter__(self) -> Iterator[str]:
        form = self._question.form
        if self._tokens is None:
            yield form.refusal
            self._ended(refused=True, declined=True)
            return
        parts: list[str] = []
        stopped_repeating = False
        for delta in clean_stream(self._tokens):
            decline = None if parts or not self._grounding.sources else self._declines()
            if not parts and self._answers_with_quote(decline):
                # the probe says the documents hold the answer; the model
                # cannot word it (a refusal) or read it into a yes or no:
                # their best line is the answer
                self._tokens.close()
                line = self._grounding.quotable()
                if line is not None:
                    yield prompts.quote_suffix(line, after_answer=False)
                    self._ended(refused=False, declined=False)
                    return
                decline = decline or Decline.REFUSAL  # no line to quote: declined
            if decline is not None:
                self._tokens.close()
                quote = self._quote_instead_of_refusal()
                yield form.refusal if quote is None else quote
                self._ended(refused=quote is None, declined=True)
                return
            parts.append(delta)
            yield delta
            if repeating_tail("".join(parts[-64:])):
                self._tokens.close()  # a loop ("1000000…") would run to max_tokens
                stopped_repeating = True
                break
        text = "".join(parts)
        best = self._grounding.best
        query = self._question.query
        if best is not None and (
            not text.strip() or restates(text, query) or echoes_subject(text, query)
        ):
            line = evidence.supporting_unit(text, query, self._grounding.pieces) or best.text
            yield prompts.quote_suffix(line, bool(text.strip()))
        self._ended(refused=False, declined=False, stopped_repeating=stopped_repeating)

    def _answers_with_quote(self, decline: Decline | None) -> bool:
        """The probe let the answer through, and its file was fitted with the
        best evidence line answering a refusal (`quote_refusals`) or a
        yes-or-no question (`quote_yes_no`)."""
        probe = self._config.probe
        if probe is None or self.probe_probability is None or decline is Decline.GATE:
            return False
        if decline is Decline.REFUSAL and probe.quote_refusals:
            return True
        return probe.quote_yes_no and asks_yes_or_no(self._question.query)

    def _quote_instead_of_refusal(self) -> str | None:
        """A declined yes-or-no question's closest evidence line, quoted
        (None: the refusal stands)."""
        floor = self._config.closest_line_min_cosine
        line, meaning = self._grounding.closest, self._grounding.closest_meaning
        if floor is None or line is None or meaning is None or meaning < floor:
            return None
        return prompts.closest_line(line.text) if asks_yes_or_no(self._question.query) else None

    def close(self) -> None:
        if self._tokens is not None:
            self._tokens.close()

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
        return AnswerStream(None, PrefillReading(), grounding, question, config)
    if question.chat_history and config.probe is not None:
        # the probe learnt single questions; a follow-up ("Who manages it?")
        # reads differently, so the refusal and judge gates decide it
        config = replace(config, probe=None)
    deadline = None if timeout is None else time.monotonic() + timeout

    def start(
        messages: list[ChatMessage],
        reading: PrefillReading,
        tokens: int,
        prompt_tokens: int | None = None,
    ) -> TokenStream:
        return llm.stream(
            messages,
            max_tokens=tokens,
            sampling=question.sampling,
            probe=reading.first_token,
            judge=reading.judge,
            hidden=reading.hidden,
            abandoned=abandoned,
            timeout=None if deadline is None else max(0.0, deadline - time.monotonic()),
            prompt_tokens=prompt_tokens,
        )

    fitted = grounding.prompt.fitted if config.probe is not None else None
    reading = None
    if fitted is not None:
        # a client's own system prompt or footer: the probe reads the prompt
        # it was fitted on (the 0.5B's, over a client's "You are a helpful
        # assistant.", passed 80% of the unanswerable questions), from a
        # prefill and one token
        reading = PrefillReading.of(fitted, config, prompts.DEFAULT_FORM.refusal_starts)
        with closing(start(fitted, reading, 1)) as read:
            next(iter(read), None)
    messages = grounding.prompt.messages
    own = PrefillReading.of(messages, config, question.form.refusal_starts, reading is None)
    tokens = start(messages, own, config.max_tokens, grounding.prompt.prompt_tokens)
    return AnswerStream(tokens, own, grounding, question, config, reading)
