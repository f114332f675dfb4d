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
    "You answer questions using only the documents in the user's message. "
    "Answer in one short sentence and copy names, numbers and dates exactly as the "
    "documents write them. Do not use any knowledge that is not in the documents. "
    "If the documents do not contain the answer, reply exactly: " + NO_CONTEXT_ANSWER
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


# The answerability check asked before generating (see rag.answer_precheck).
# Measured on benches/eval: a separate short yes/no question about the best
# passage separates answerable from unanswerable questions far better than the
# model's own refusals (which it almost never gives when a passage is on topic).
CHECK_SYSTEM_PROMPT = "You are a strict fact checker. Reply with one word: yes or no."


def check_message(passage: str, question: str) -> str:
    return (
        f"Text: {passage.strip()}\n\nQuestion: {question.strip()}\n\n"
        "Can the question be answered using only the text above? A text about the same "
        "thing that does not give the asked detail does not answer it."
    )
