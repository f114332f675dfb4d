"""Everything a running server holds — the store, the models, the records,
the file collections, conversation memory and the queues of async work —
built once from the settings before the app is made (`load_services`, or
`assemble` around a store and models a test chose). The surfaces read it and
change none of it."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from flask_app.file_collections import FileCollections
from flask_app.inference.embed import Embedder, LlamaEmbedder
from flask_app.inference.llama_backend import LlamaBackend
from flask_app.inference.llm import LLM, Backend
from flask_app.rag.jobs import Jobs
from flask_app.rag.memory import Conversations
from flask_app.rag.verifier import Gate, choose_gate
from flask_app.records import LocalRecords, Records
from flask_app.settings import Settings
from flask_app.store import CollectionUnavailable, Store
from flask_app.store.protocols import CollectionStore

_log = logging.getLogger("edgerag")


class ModelMissing(RuntimeError):
    """A configured model file does not exist."""


# how long finished async work is kept for its client to read
PREDICTION_RETENTION_S = 3600.0  # Lucidworks async predictions
RESEARCH_RETENTION_S = 7 * 24 * 3600.0  # Engine research runs


@dataclass(frozen=True)
class Services:
    store: CollectionStore
    llm: LLM | None
    embedder: Embedder | None
    # which verifier checks answers (none: they go out unverified)
    gate: Gate
    records: Records  # the catalog's, memory's and jobs' files (a cluster's: its actor)
    collections: FileCollections
    conversations: Conversations  # Lucidworks' conversation memory
    predictions: Jobs  # Lucidworks async predictions
    research_runs: Jobs  # Engine research runs


def assemble(
    settings: Settings,
    store: CollectionStore,
    llm: LLM | None,
    embedder: Embedder | None,
    *,
    gate: Gate | None = None,
    records: Records | None = None,
) -> Services:
    """The services around a store and models: records in the data
    directory unless given, and everything built on them."""
    records = records if records is not None else LocalRecords(settings.data_dir)

    def queue(name: str, retention_s: float) -> Jobs:
        jobs = Jobs(records.job_table(name, retention_s=retention_s), poll_s=records.poll_s)
        if llm is not None:
            jobs.yield_to(lambda: llm.slots.waiting > 0)  # a client's answer goes first
        return jobs

    return Services(
        store=store,
        llm=llm,
        embedder=embedder,
        gate=gate if gate is not None else Gate(None, reason="not loaded"),
        records=records,
        collections=FileCollections.open(records, store, embedder),
        conversations=records.conversations(
            max_turns=settings.memory_turns, ttl_s=settings.memory_ttl_hours * 3600
        ),
        predictions=queue("jobs", PREDICTION_RETENTION_S),
        research_runs=queue("research_runs", RESEARCH_RETENTION_S),
    )


def _require(path_desc: str, path: object, pull: str | None = "edgerag pull") -> None:
    """`pull`: the command that fetches the missing file (None: a file the
    user named, which no pull makes)."""
    from pathlib import Path

    assert isinstance(path, Path)
    if not path.is_file():
        fix = f"Run `{pull}`, or pass" if pull else "Pass"
        raise ModelMissing(
            f"{path_desc} not found: {path}. {fix} a GGUF file with --model / --embed-model."
        )


def load_services(settings: Settings) -> Services:
    """The store first (a locked data directory fails fast), then the models."""
    store: CollectionStore
    records: Records | None = None  # the data directory's
    if settings.ray_address:
        from flask_app.cluster.records import ClusterRecords  # the default server imports no Ray
        from flask_app.cluster.store import ClusterStore

        store = ClusterStore.connect(
            settings.ray_address,
            settings.shards,
            settings.data_dir,
            timeout=settings.request_timeout,
            search_threads=settings.search_threads,
            edge_index=settings.store_index,
        )
        records = ClusterRecords.connect(
            settings.data_dir.resolve() / "records", timeout=settings.request_timeout
        )
    else:
        store = Store(
            settings.data_dir,
            search_threads=settings.search_threads,
            edge_index=settings.store_index,
        )
    try:
        if settings.store_index:
            # a binary index builds its codes now, not on the first search; a
            # damaged store is refused on its own (/health lists it), the rest serves
            with contextlib.suppress(CollectionUnavailable):
                store.edge()
        llm, embedder = _load_models(settings)
        gate = Gate(None, reason="no LLM")
        if llm is not None:
            gate = choose_gate(
                llm.preset,
                settings.llm_path(),
                settings.verifier_threshold(),
                warn=_log.warning,
                off=settings.verifier_off(),
            )
        return assemble(settings, store, llm, embedder, gate=gate, records=records)
    except BaseException:
        store.close()  # a missing model must not keep the data directory locked
        raise


def _load_models(settings: Settings) -> tuple[LLM | None, Embedder | None]:
    embed_pull = None if settings.embed_model else "edgerag pull"  # a file the user named
    llm = None
    if not settings.no_llm:
        path = settings.llm_path()
        chosen = settings.llm_preset()
        _require("LLM model file", path, f"edgerag pull --llm {chosen.name}" if chosen else None)
        _log.info("loading LLM %s", path)
        backend: Backend
        if settings.ray_address:
            from flask_app.cluster.replica import ReplicaBackend

            if not settings.no_embedder:  # the replicas load it too
                _require("embedding model file", settings.embed_path(), embed_pull)
            backend = ReplicaBackend.start(
                path,
                n_ctx=settings.n_ctx,
                n_threads=settings.llm_threads,
                model_id=settings.model_id,
                count=settings.replicas,
                embed_path=None if settings.no_embedder else settings.embed_path(),
                n_seq=settings.llm_sequences,
            )
        else:
            backend = LlamaBackend(
                path,
                n_ctx=settings.n_ctx,
                n_seq=settings.llm_sequences,
                n_threads=settings.llm_threads,
                model_id=settings.model_id,
            )
        llm = LLM(
            backend,
            max_waiters=settings.queue_size,
            timeout=settings.request_timeout,
            preset=chosen.name if chosen is not None else None,
        )
    embedder: Embedder | None = None
    if not settings.no_embedder:
        path = settings.embed_path()
        _require("embedding model file", path, embed_pull)
        _log.info("loading embedder %s", path)
        slots = llm.slots if llm is not None else None
        embedder = LlamaEmbedder(
            path,
            n_threads=settings.embed_threads,
            lock_timeout=settings.request_timeout,
            idle_threads=settings.embed_idle_threads,
            # cores are lent only while no generation runs or waits
            lend_idle_threads=lambda: slots is None or not (slots.holders or slots.waiting),
        )
        if llm is not None and settings.ray_address:
            from flask_app.cluster.replica import ReplicaBackend, SpreadEmbedder

            assert isinstance(llm.backend, ReplicaBackend)
            embedder = SpreadEmbedder(embedder, llm.backend.replicas)
    return llm, embedder
