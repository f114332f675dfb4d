"""Citation markers `[[SRC:NNNN]]` that are valid by construction: a marker
the model wrote survives only if its ref was given to it; an answer without
one gets the ref of the passage that holds its own words (or of the best
evidence), placed before its final punctuation; `sources: "none"` strips
them all. Adjacent repeats collapse to one."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# what small models write for a marker: [[SRC:0001]], [SRC:1], [[SRC: 12]]
_LOOSE = re.compile(r"\s?\[\[?\s*SRC\s*:\s*(\d{1,4})\s*\]?\]")
_MARKER = re.compile(r"\[\[SRC:(\d{4})\]\]")
_REPEAT = re.compile(r"(\[\[SRC:\d{4}\]\])(\s*\1)+")


def ref(position: int) -> str:
    """The ref of the passage at `position` (0-based) in the prompt."""
    return f"SRC:{position + 1:04d}"


def without_markers(answer: str) -> str:
    return _MARKER.sub("", answer)


def marker(position: int) -> str:
    return f"[[{ref(position)}]]"


def _place(answer: str, markers: str) -> str:
    """`markers` before the answer's final punctuation (or at its end)."""
    body = answer.rstrip()
    tail = ""
    while body and body[-1] in ".!?":
        tail = body[-1] + tail
        body = body[:-1]
    return f"{body.rstrip()} {markers}{tail}"


def finalize(
    answer: str,
    passages: int,
    mode: str,
    supported: Callable[[], Sequence[int]],
) -> tuple[str, list[int]]:
    """The answer with only valid markers, and the cited positions in order of
    first citation. `supported()` gives the positions holding the answer (asked
    only when the model cited nothing)."""

    def normal(m: re.Match[str]) -> str:
        n = int(m.group(1))
        return f" {marker(n - 1)}" if 1 <= n <= passages and mode != "none" else ""

    text = _LOOSE.sub(normal, answer).strip()
    text = re.sub(r"\s+([.,;:!?])", r"\1", text) if mode == "none" else text
    if mode != "none" and not _MARKER.search(text):
        positions = list(supported())
        if positions:
            text = _place(text, "".join(marker(p) for p in positions))
    text = _REPEAT.sub(r"\1", text)
    cited: list[int] = []
    for m in _MARKER.finditer(text):
        position = int(m.group(1)) - 1
        if position not in cited:
            cited.append(position)
    return text, cited
