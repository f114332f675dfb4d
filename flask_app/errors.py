"""The one error model: every error a request can meet carries what kind of
failure it is, its HTTP status, how soon a retry may work, the message a
client may read, and a code (its kind's name unless the error has a shape of
its own: `item_limit_exceeded`, `malformed_json`, …). Each surface renders
these in its own documented shape through one table keyed by that code,
for its JSON responses and its streams alike, and maps a kind differently
only where its API documents another status (e.g. Lucidworks and OpenAI say
429 where moorcheh and the Engine say 503).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any


class Kind(enum.Enum):
    INVALID = "invalid"  # the request cannot be served as sent
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"  # the request conflicts with the store's state
    TOO_LARGE = "too_large"  # the body is over a limit
    BUSY = "busy"  # every slot is taken: retry after `retry_after`
    UNAVAILABLE = "unavailable"  # a part of the server is down for a moment
    TIMEOUT = "timeout"  # the request's deadline passed
    MODEL_FAILED = "model_failed"  # the model raised: a server fault, logged
    CANCELLED = "cancelled"  # the client left; nobody reads the answer


# the status a kind gets where a surface documents nothing else
STATUS: dict[Kind, int] = {
    Kind.INVALID: 400,
    Kind.NOT_FOUND: 404,
    Kind.CONFLICT: 409,
    Kind.TOO_LARGE: 413,
    Kind.BUSY: 503,
    Kind.UNAVAILABLE: 503,
    Kind.TIMEOUT: 504,
    Kind.MODEL_FAILED: 500,
    Kind.CANCELLED: 499,
}


class ServiceError(Exception):
    """Base of every error a request can be answered with (not a server bug).

    `kind` is set per class (an instance may narrow it); `status` follows
    the class's kind unless the class or the instance says otherwise;
    `retry_after` (seconds) is set when a retry may work; `public_message`
    is what a client may read (the `str` of the error may hold details
    meant for the log)."""

    kind: Kind = Kind.INVALID
    status: int = STATUS[Kind.INVALID]
    retry_after: int | None = None
    code: str | None = None  # a shape of its own (None: the kind's)
    details: Mapping[str, Any] = MappingProxyType({})  # what that shape adds

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "status" not in cls.__dict__:
            cls.status = STATUS[cls.kind]

    @property
    def public_message(self) -> str:
        return str(self)

    @property
    def retryable(self) -> bool:
        return self.retry_after is not None

    @property
    def error_code(self) -> str:
        """What the surfaces' tables are keyed on."""
        return self.code or self.kind.value
