"""Prompt text and passage formatting for grounded answers (nothing else).

Measured with the default 0.5B model: passages labelled "Document 1:",
"Document 2:" work better than "[1]" labels (which it tends to echo back), and
without an explicit instruction to refuse it invents plausible facts. The
system prompt is fixed so that llama.cpp can reuse its KV cache across
requests; everything that varies goes into the last user message.
"""

from __future__ import annotations

from collections.abc import Sequence

NO_CONTEXT_ANSWER = "I don't have enough information to answer that question."

DEFAULT_SYSTEM_PROMPT = (
    "You answer questions using only the text in the user's message. Answer in one "
    "short sentence and copy the exact words of the text for names, commands, options, "
    "numbers and dates. If the text does not contain the answer, reply exactly: "
    + NO_CONTEXT_ANSWER
)


def format_passages(passages: Sequence[str]) -> str:
    return "\n\n".join(f"Document {i}:\n{text.strip()}" for i, text in enumerate(passages, 1))


def user_message(passages: Sequence[str], question: str, footer: str | None = None) -> str:
    """Passages first, then the footer instruction, then the question."""
    parts = [format_passages(passages)]
    if footer and footer.strip():
        parts.append(footer.strip())
    parts.append(f"Question: {question.strip()}")
    return "\n\n".join(parts)


# How a refusal starts: the first-token probability of these is the refusal
# signal read from the answer's own generation (rag.answer).
REFUSAL_STARTS = ("I", "Sorry")


def quote_suffix(line: str, after_answer: bool) -> str:
    """The best evidence line, quoted: appended to an answer that only restated
    the question (or replaces an empty one)."""
    quoted = f'The documents say: "{line.strip()}"'
    return f" {quoted}" if after_answer else quoted
