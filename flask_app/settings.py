"""One typed settings object: CLI flags > EDGERAG_* environment variables > defaults.

Every field below is a server option: `edgerag serve --help` lists them all,
generated from this table, and each reads `EDGERAG_<NAME>` from the environment.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from flask_app.index_kinds import INDEX_KINDS
from flask_app.inference.presets import (
    PRESETS,
    QWEN_05B,
    AnswerCalibration,
    LLMPreset,
)
from flask_app.options import (
    FREE_HTTP_THREADS,
    OFF,
    AnswerOptions,
    ModelOptions,
    ServerOptions,
)

_log = logging.getLogger("edgerag")


class SettingsError(ValueError):
    """An option has a value of the wrong kind or out of range."""


# Numbers that once meant "off" (or "the default"), still read with a
# deprecation line: option -> (old number, what it means now).
DEPRECATED_NUMBERS: dict[str, tuple[float, Any]] = {
    "answer_candidates": (0, None),
    "answer_refusal_probability": (1, OFF),
    "answer_probe": (0, OFF),
    "max_items": (0, OFF),
    "replicas": (0, None),
}


@dataclass(frozen=True)
class Settings(AnswerOptions, ModelOptions, ServerOptions):
    """Every option (`options.py`), with their checks and what they imply."""

    def __post_init__(self) -> None:
        for name, (number, meaning) in DEPRECATED_NUMBERS.items():
            value = getattr(self, name)
            if not isinstance(value, str) and value is not None and value == number:
                shown = "the default" if meaning is None else meaning
                _log.warning(
                    "%s %g is deprecated: it means %s; write %s",
                    name,
                    number,
                    shown,
                    "nothing (the default)" if meaning is None else f"{name}={meaning}",
                )
                object.__setattr__(self, name, meaning)
        checks = [
            (1 <= self.port <= 65535, "port must be 1..65535"),
            (self.http_threads >= 1, "http_threads must be >= 1"),
            (self.n_ctx >= 256, "n_ctx must be >= 256"),
            (self.llm_threads >= 1, "llm_threads must be >= 1"),
            (1 <= self.llm_sequences <= 64, "llm_sequences must be 1..64"),
            (self.embed_threads >= 1, "embed_threads must be >= 1"),
            (self.embed_idle_threads >= 1, "embed_idle_threads must be >= 1"),
            (self.search_threads >= 1, "search_threads must be >= 1"),
            (self.queue_size >= 0, "queue_size must be >= 0"),
            (
                self.queue_size + 1 + FREE_HTTP_THREADS <= self.http_threads,
                f"http_threads ({self.http_threads}) must be at least queue_size + "
                f"{1 + FREE_HTTP_THREADS} ({self.queue_size + 1 + FREE_HTTP_THREADS}): requests "
                "waiting for the LLM hold a thread each, and health, search and uploads "
                f"need {FREE_HTTP_THREADS} free ones",
            ),
            (self.request_timeout > 0, "request_timeout must be > 0"),
            (1 <= self.max_tokens < self.n_ctx, "max_tokens must be 1..n_ctx-1"),
            (self.llm in PRESETS, f"llm must be one of {', '.join(PRESETS)}"),
            (
                self.quant is None
                or self.model is not None
                or self.quant in PRESETS.get(self.llm, QWEN_05B).files(),
                f"quant must be one of {', '.join(PRESETS.get(self.llm, QWEN_05B).files())} "
                f"for {self.llm}",
            ),
            (
                isinstance(self.max_items, str) or self.max_items >= 1,
                "max_items must be >= 1 or off",
            ),
            (1 <= self.shards <= 1024, "shards must be 1..1024"),
            (self.replicas is None or 1 <= self.replicas <= 1024, "replicas must be 1..1024"),
            (self.memory_turns >= 1, "memory_turns must be >= 1"),
            (self.memory_ttl_hours > 0, "memory_ttl_hours must be > 0"),
            (self.context_tokens >= 16, "context_tokens must be >= 16"),
            (0.0 <= self.answer_min_score <= 1.0, "answer_min_score must be 0..1"),
            (
                self.answer_candidates is None or 1 <= self.answer_candidates <= 100,
                "answer_candidates must be 1..100",
            ),
            (_unit_or_off(self.answer_probe), "answer_probe must be 0..1 or off"),
            (
                _unit_or_off(self.answer_refusal_probability),
                "answer_refusal_probability must be 0..1 or off",
            ),
            (self.max_body_mb > 0, "max_body_mb must be > 0"),
            (
                all(k.isprintable() and " " not in k for k in self.api_key_specs()),
                "api keys must be printable and without spaces",
            ),
            (
                all(_namespaces_valid(k) for k in self.api_key_specs()),
                "a scoped api key is KEY:ns1+ns2 with namespace names like ops or team-2",
            ),
            (self.score_mapping in ("clip", "shift"), "score_mapping must be clip or shift"),
            (
                self.store_index in ("", *INDEX_KINDS),
                f"store_index must be one of: {', '.join(INDEX_KINDS)}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise SettingsError(message)

    @classmethod
    def options(cls) -> list[tuple[str, type, str, Any]]:
        """(name, value type, help, default) for every option."""
        hints = get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = f.default
            out.append((f.name, _base_type(hints[f.name]), f.metadata["help"], default))
        return out

    @classmethod
    def may_be_off(cls, name: str) -> bool:
        """Whether the option takes `off`."""
        return OFF in _literals(get_type_hints(cls)[name])

    @classmethod
    def load(cls, cli: Mapping[str, Any], environ: Mapping[str, str]) -> Settings:
        """Build from CLI values (None = not given) over `EDGERAG_*` variables over defaults."""
        values: dict[str, Any] = {}
        for name, kind, _help, _default in cls.options():
            off = cls.may_be_off(name)
            if cli.get(name) is not None:
                values[name] = _coerce(name, kind, cli[name], off)
            elif (raw := environ.get(f"EDGERAG_{name.upper()}")) is not None:
                values[name] = _coerce(f"EDGERAG_{name.upper()}", kind, raw, off)
        return cls(**values)

    def api_key_specs(self) -> tuple[str, ...]:
        """Each configured key as given: `KEY` or `KEY:ns1+ns2`."""
        return tuple(k.strip() for k in self.api_keys.split(",") if k.strip())

    def llm_preset(self) -> LLMPreset | None:
        """The named model served, or None for a `--model` file."""
        return None if self.model is not None else PRESETS[self.llm]

    def llm_path(self) -> Path:
        if self.model is not None:
            return self.model
        return PRESETS[self.llm].path(self.model_dir, self.quant)

    def calibration(self) -> AnswerCalibration:
        """The answer settings: those given, else the served preset's (the
        default model's for a `--model` file)."""
        base = (self.llm_preset() or QWEN_05B).calibration
        refusal = self.answer_refusal_probability
        return AnswerCalibration(
            refusal_probability=None
            if isinstance(refusal, str)
            else (base.refusal_probability if refusal is None else refusal),
            evidence_alone_words=base.evidence_alone_words,
        )

    def verifier_off(self) -> bool:
        return isinstance(self.answer_probe, str)

    def verifier_threshold(self) -> float | None:
        """The verifier's threshold as given (None: the verifier file's own)."""
        return None if isinstance(self.answer_probe, str) else self.answer_probe

    def item_cap(self) -> int | None:
        """The moorcheh-edge store's item cap (None: no cap)."""
        return None if isinstance(self.max_items, str) else self.max_items

    def embed_path(self) -> Path:
        from flask_app.inference.pull import MINILM_F16

        return self.embed_model or self.model_dir / MINILM_F16.filename


def _unit_or_off(value: float | str | None) -> bool:
    return value is None or value == OFF or (not isinstance(value, str) and 0.0 <= value <= 1.0)


def _literals(hint: Any) -> set[Any]:
    """The literal values a type hint allows (`float | Literal["off"]` → {"off"})."""
    if get_origin(hint) is Literal:
        return set(get_args(hint))
    if get_origin(hint) in (Union, types.UnionType):
        return set().union(*(_literals(a) for a in get_args(hint)))
    return set()


def _base_type(hint: Any) -> type:
    if get_origin(hint) in (Union, types.UnionType):
        hint = next(
            a for a in get_args(hint) if a is not type(None) and get_origin(a) is not Literal
        )
    return hint  # type: ignore[no-any-return]


def _coerce(name: str, kind: type, value: Any, off: bool = False) -> Any:
    if off and isinstance(value, str) and value.strip().lower() == OFF:
        return OFF
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise SettingsError(f"{name}: expected a boolean, got {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError) as exc:
        expected = f"{kind.__name__} or off" if off else kind.__name__
        raise SettingsError(f"{name}: expected {expected}, got {value!r}") from exc


def _namespaces_valid(key_spec: str) -> bool:
    key, sep, scope = key_spec.partition(":")
    if not sep:
        return bool(key)
    names = scope.split("+")
    return bool(key) and all(re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", n) for n in names)
