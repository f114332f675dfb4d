"""The SOURCES / ANSWER output contract (spec §3.1):

    SOURCES:
    - 0
    ANSWER: The reason for going to Germany was to attend Oktoberfest.

The model is asked as `/answer` asks it (same system prompt, same refusal
gates: the 0.5B model answers and refuses far better in plain prose than in
this format, docs/answer-quality.md), so its output is usually prose. The
tolerant parser reads the contract when the output has it; otherwise the
whole output is the answer and the server writes the contract around it,
with SOURCES from the checked evidence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from flask_app.rag.prompts import NO_CONTEXT_ANSWER, AnswerForm, is_refusal, starts_with

DEFAULT_NOT_FOUND = "Not possible to answer given this content."


def label(position: int, passage_id: str, metadata: dict[str, object] | None) -> str:
    """`Document 1 (title: …; date: …; source: …):` with what is given."""
    meta = metadata or {}
    parts = [f"{key}: {meta[key]}" for key in ("title", "date", "source") if meta.get(key)]
    return (
        f"Document {position + 1} ({'; '.join(parts)}):" if parts else f"Document {position + 1}:"
    )


def render(indices: Sequence[int], answer: str) -> str:
    """The contract text for an answer resting on the documents `indices`."""
    return "SOURCES:\n" + "".join(f"- {i}\n" for i in indices) + f"ANSWER: {answer}"


def answer_form() -> AnswerForm:
    # a refusal without the model is rendered by `predict`; the text here only
    # marks it in the stream (see AnswerDeltas)
    return AnswerForm(label=label, refusal=render([], NO_CONTEXT_ANSWER))


_ANSWER = re.compile(r"^\s*ANSWER\s*:\s*", re.IGNORECASE | re.MULTILINE)
_SOURCES = re.compile(r"^\s*SOURCES\s*:", re.IGNORECASE | re.MULTILINE)
_INT = re.compile(r"\d+")


@dataclass(frozen=True)
class Parsed:
    answer: str
    indices: list[int]  # documents named under SOURCES:, valid and in order
    found: bool
    marked: bool  # the output had the contract's markers


def _sources_block(response: str, answer_at: int | None) -> str:
    """The text after `SOURCES:` up to the ANSWER line (or the end)."""
    marks = list(_SOURCES.finditer(response))
    if not marks:
        return ""
    start = marks[-1].end()
    if answer_at is not None and start <= answer_at:
        return response[start:answer_at]
    # SOURCES after ANSWER: the lines of numbers that follow it
    lines = []
    for i, line in enumerate(response[start:].split("\n")):
        if i > 0 and not re.fullmatch(r"\s*[-*]?\s*\[?\d+\]?[\s,\d\[\]]*", line):
            break
        lines.append(line)
    return "\n".join(lines)


def is_not_found(answer: str, not_found: str) -> bool:
    """The answer is the not-found message (or the model's own refusal sentence)."""
    return starts_with(answer, not_found) or is_refusal(answer)


def parse(response: str, documents: int, not_found: str) -> Parsed:
    """Read the model's raw output (`documents`: how many the request had)."""
    marks = list(_ANSWER.finditer(response))
    if marks:
        last = marks[-1]
        rest = response[last.end() :]
        after = _SOURCES.search(rest)
        answer = (rest[: after.start()] if after else rest).strip()
        block = _sources_block(response, last.start())
    else:
        block = _sources_block(response, None)
        answer = (response.replace(block, "") if block else response).strip()
        answer = _SOURCES.sub("", answer).strip()
    marked = bool(marks) or _SOURCES.search(response) is not None
    picked: list[int] = []
    for number in _INT.findall(block):
        i = int(number)
        if 0 <= i < documents and i not in picked:
            picked.append(i)
    if is_not_found(answer, not_found):
        return Parsed(not_found, [], False, marked)
    return Parsed(answer, picked, True, marked)


def urls(indices: Sequence[int], sources: Sequence[str]) -> list[str]:
    """The documents' `source` values, de-duplicated in order."""
    return list(dict.fromkeys(sources[i] for i in indices))


class AnswerDeltas:
    """Turns raw output deltas into answer-text deltas while it streams.

    Prose passes through (held back only while it could still become the
    refusal sentence, which is reported as the not-found message); output
    in the contract form yields the text after `ANSWER:` without a SOURCES
    block that follows it, each line held until it cannot be a marker line.
    """

    def __init__(self) -> None:
        self._raw = ""
        self._sent = 0  # characters of the answer already sent

    def _marked(self) -> bool | None:
        """True: contract form; False: prose; None: cannot tell yet."""
        head = self._raw.lstrip().upper()
        for marker in ("SOURCES:", "ANSWER:"):
            if head.startswith(marker):
                return True
            if marker.startswith(head):
                return None
        return False

    def _answer_so_far(self, final: bool) -> str | None:
        text = self._text_so_far(final)
        if text is None:
            return None
        # held while it is, or could still become, the refusal sentence
        if not final and (NO_CONTEXT_ANSWER.startswith(text.strip()) or is_refusal(text)):
            return None
        return text

    def _text_so_far(self, final: bool) -> str | None:
        marked = self._marked()
        if marked is None:
            return None
        if not marked:
            return self._raw.lstrip()
        marks = list(_ANSWER.finditer(self._raw))
        if not marks:
            return None
        rest = self._raw[marks[-1].end() :]
        after = _SOURCES.search(rest)
        if after:
            return rest[: after.start()].rstrip()
        if not final:
            cut = rest.rfind("\n")  # the last line may still become "SOURCES:"
            tail = rest[cut + 1 :] if cut >= 0 else ""
            if cut >= 0 and "SOURCES:".startswith(tail.strip().upper()[:8]):
                rest = rest[:cut]
        return rest

    def feed(self, delta: str) -> str:
        self._raw += delta
        answer = self._answer_so_far(final=False)
        if answer is None or len(answer) <= self._sent:
            return ""
        out = answer[self._sent :]
        self._sent = len(answer)
        return out

    def finish(self, parsed_answer: str) -> str:
        """What is left to send once the whole output is known."""
        if self._sent == 0:
            return parsed_answer
        answer = self._answer_so_far(final=True) or ""
        out = answer.rstrip()[self._sent :]
        self._sent = len(answer)
        return out
