"""The SOURCES / ANSWER output contract: how the model is asked (the answer
form) and how its raw output is read back (spec §3.1, tolerant: models drift).

    SOURCES:
    - 0
    ANSWER: The reason for going to Germany was to attend Oktoberfest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from flask_app.rag.prompts import AnswerForm

DEFAULT_NOT_FOUND = "Not possible to answer given this content."

_SYSTEM = (
    "You answer questions using only the numbered documents in the user's message. "
    "Answer in one short sentence and copy the exact words of the documents for names, "
    "commands, options, numbers and dates.\n"
    "Reply in exactly this format:\n"
    "SOURCES:\n"
    "- <number of a document you used>\n"
    "ANSWER: <the answer>\n"
    "If the documents do not contain the answer, reply exactly:\n"
    "SOURCES:\n"
    "ANSWER: {not_found}"
)


def label(position: int, passage_id: str, metadata: dict[str, object] | None) -> str:
    """`[i] title: … | date: … | source: …`, i being the document's index in the request."""
    meta = metadata or {}
    parts = [f"{key}: {meta[key]}" for key in ("title", "date", "source") if meta.get(key)]
    return f"[{passage_id}] " + " | ".join(parts) if parts else f"[{passage_id}]"


def refusal(not_found: str) -> str:
    """The raw output of a refusal (also what the server reports as the
    response when it refuses without asking the model)."""
    return f"SOURCES:\nANSWER: {not_found}"


# Two worked turns teach the 0.5B model the format (without them it answers in
# plain prose); they follow the system prompt, so they stay in the KV cache.
_EXAMPLES = (
    (
        "[0] source: http://example.com/a\nThe bakery sells rye bread.\n\n"
        "[1] source: http://example.com/b\nThe bakery opens at 7:00 on weekdays.\n\n"
        "Question: When does the bakery open?",
        "SOURCES:\n- 1\nANSWER: The bakery opens at 7:00 on weekdays.",
    ),
    (
        "[0] source: http://example.com/a\nThe bakery sells rye bread.\n\n"
        "Question: Who owns the bakery?",
        "SOURCES:\nANSWER: {not_found}",
    ),
)


def answer_form(not_found: str) -> AnswerForm:
    return AnswerForm(
        system=_SYSTEM.format(not_found=not_found),
        examples=tuple((q, a.format(not_found=not_found)) for q, a in _EXAMPLES),
        label=label,
        refusal=refusal(not_found),
        refusal_starts=(),  # the first token is always "SOURCES": nothing to read there
        quote_restatements=False,
    )


_ANSWER = re.compile(r"^\s*ANSWER\s*:\s*", re.IGNORECASE | re.MULTILINE)
_SOURCES = re.compile(r"^\s*SOURCES\s*:", re.IGNORECASE | re.MULTILINE)
_INT = re.compile(r"\d+")


@dataclass(frozen=True)
class Parsed:
    answer: str
    indices: list[int]  # documents named under SOURCES:, valid and in order
    found: bool


def _normal(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".")


def _sources_block(response: str, answer_at: int | None, answer_end: int | None) -> str:
    """The text after `SOURCES:` up to the ANSWER line (or the end)."""
    marks = list(_SOURCES.finditer(response))
    if not marks:
        return ""
    start = marks[-1].end()
    if answer_at is not None and start <= answer_at:
        return response[start:answer_at]
    # SOURCES after ANSWER: up to the end of the SOURCES line block
    block = response[start:]
    lines = []
    for i, line in enumerate(block.split("\n")):
        if i > 0 and not re.fullmatch(r"\s*[-*]?\s*\[?\d+\]?[\s,\d\[\]]*", line):
            break
        lines.append(line)
    return "\n".join(lines)


def parse(response: str, documents: int, not_found: str) -> Parsed:
    """Read the model's raw output (`documents`: how many the request had)."""
    marks = list(_ANSWER.finditer(response))
    if marks:
        last = marks[-1]
        rest = response[last.end() :]
        after = _SOURCES.search(rest)
        answer = (rest[: after.start()] if after else rest).strip()
        block = _sources_block(response, last.start(), last.end())
    else:
        block = _sources_block(response, None, None)
        first = _SOURCES.search(response)
        answer = (response if first is None else response.replace(block, "")).strip()
        answer = _SOURCES.sub("", answer).strip()
    picked: list[int] = []
    for number in _INT.findall(block):
        i = int(number)
        if 0 <= i < documents and i not in picked:
            picked.append(i)
    wanted = _normal(not_found)
    said = _normal(answer)
    if said == wanted or said.startswith(wanted):
        return Parsed(answer, [], False)
    return Parsed(answer, picked, True)


def urls(indices: Sequence[int], sources: Sequence[str]) -> list[str]:
    """The documents' `source` values, de-duplicated in order."""
    return list(dict.fromkeys(sources[i] for i in indices))


class AnswerDeltas:
    """Turns raw output deltas into answer-text deltas while it streams: the
    text after the `ANSWER:` marker, without a SOURCES block that follows it.
    A line is held back until it cannot be a marker line any more."""

    def __init__(self) -> None:
        self._raw = ""
        self._sent = 0  # characters of the answer already sent

    def _answer_so_far(self, final: bool) -> str | None:
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
