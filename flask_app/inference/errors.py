"""What the LLM layer raises: each error carries its kind (and so its HTTP
status and retry hint) once; surfaces map only where their API differs."""

from __future__ import annotations

from flask_app.errors import Kind, ServiceError


class LLMError(ServiceError):
    """Base of every error the LLM layer raises."""

    kind = Kind.MODEL_FAILED


class LLMOverloaded(LLMError):
    """The wait queue is full (or the context window is); try again after
    `retry_after` seconds."""

    kind = Kind.BUSY
    retry_after: int

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(f"{detail}; retry in {retry_after} s")
        self.retry_after = retry_after


class ReplicaLost(LLMError):
    """A model replica of the cluster died (Ray restarts it): retry shortly."""

    kind = Kind.UNAVAILABLE

    def __init__(self, detail: str, retry_after: int = 5) -> None:
        super().__init__(f"a model replica failed ({detail}); retry in {retry_after} s")
        self.retry_after = retry_after


class LLMTimeout(LLMError):
    """The request's deadline passed while waiting or generating."""

    kind = Kind.TIMEOUT


class LLMFailed(LLMError):
    """The model raised while generating (the detail is for the log)."""

    kind = Kind.MODEL_FAILED

    @property
    def public_message(self) -> str:
        return "LLM request failed"


class LLMCancelled(LLMError):
    """The client left while its request waited for the model."""

    kind = Kind.CANCELLED
