"""Error messages never echo unbounded client input back."""

from __future__ import annotations

MAX_MESSAGE_CHARS = 1000


def capped(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`message` cut to `limit` characters, saying how much was left out."""
    if len(message) <= limit:
        return message
    return f"{message[: limit - 40]}… ({len(message) - limit + 40} more characters)"
