"""Prompt text and passage formatting for grounded answers (nothing else).

Measured with the default 0.5B model: passages labelled "Document 1:",
"Document 2:" work better than "[1]" labels (which it tends to echo back), and
without an explicit instruction to refuse it invents plausible facts. The
system prompt is fixed so that llama.cpp can reuse its KV cache across
requests; everything that varies goes into the last user message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

NO_CONTEXT_ANSWER = "I don't have enough information to answer that question."


def starts_with(text: str, sentence: str) -> bool:
    """`text` begins with `sentence`, ignoring case, spacing and a final period."""

    def normal(t: str) -> str:
        return " ".join(t.lower().split()).rstrip(".")

    return normal(text).startswith(normal(sentence))


def is_refusal(text: str) -> bool:
    """The model said the fixed no-information sentence itself."""
    return starts_with(text, NO_CONTEXT_ANSWER)


# The system prompt is grounding + style + refusal; a surface may replace the
# style (Engine `instructions`), never the grounding and refusal rules.
GROUNDING_RULE = "You answer questions using only the text in the user's message."
DEFAULT_STYLE = (
    "Answer in one short sentence and copy the exact words of the text for names, "
    "commands, options, numbers and dates."
)
REFUSAL_RULE = "If the text does not contain the answer, reply exactly: " + NO_CONTEXT_ANSWER


def system_prompt(style: str = DEFAULT_STYLE) -> str:
    return f"{GROUNDING_RULE} {style.strip()} {REFUSAL_RULE}"


DEFAULT_SYSTEM_PROMPT = system_prompt()


def document_label(position: int, passage_id: str, metadata: dict[str, object] | None) -> str:
    """The default passage label: "Document 1:", "Document 2:", ... by position."""
    return f"Document {position + 1}:"


# (position in the prompt, passage id, passage metadata) -> the line above the passage
Label = Callable[[int, str, dict[str, object] | None], str]


@dataclass(frozen=True)
class AnswerForm:
    """How a surface wants the model asked and refusals worded: its system
    prompt, passage labels, the text of a refusal and the first words a
    refusal starts with (read by the refusal probe; empty = no probe)."""

    system: str = DEFAULT_SYSTEM_PROMPT
    label: Label = document_label
    refusal: str = NO_CONTEXT_ANSWER
    refusal_starts: tuple[str, ...] = ("I", "Sorry")


DEFAULT_FORM = AnswerForm()


def format_passages(labels: Sequence[str], passages: Sequence[str]) -> str:
    return "\n\n".join(
        f"{label}\n{text.strip()}" for label, text in zip(labels, passages, strict=True)
    )


def user_message(
    labels: Sequence[str], passages: Sequence[str], question: str, footer: str | None = None
) -> str:
    """Passages first, then the footer instruction, then the question."""
    parts = [format_passages(labels, passages)] if passages else []
    if footer and footer.strip():
        parts.append(footer.strip())
    parts.append(f"Question: {question.strip()}")
    return "\n\n".join(parts)
