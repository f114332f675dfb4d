"""Ingestion off the request thread: one worker claims the files the catalog
holds as processing (oldest first, also those accepted before a restart),
extracts their text, cuts it into chunks with spans, embeds the chunks in
batches and writes them to the collection's store, reporting progress on the
file. A file that cannot be read fails with a reason; the collection goes on.
With a catalog shared by several servers (a cluster), while files other
servers hold remain, the worker looks again every `poll_s` seconds, so a file
whose server died is taken over once its lease has run out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from flask_app.inference.embed import Embedder, EmbedderBusy, EmbeddingError, Vectors
from flask_app.ingest.chunking import chunk
from flask_app.ingest.extract import ExtractionError, extract
from flask_app.rag.pipeline import cut_to_tokens
from flask_app.store import StoreError
from flask_app.store.catalog import Catalog, chunk_id
from flask_app.store.protocols import CollectionStore

_log = logging.getLogger("edgerag.ingest")

BATCH = 32  # chunks embedded and written per step (progress moves by this much)


class Ingestor:
    def __init__(
        self,
        catalog: Catalog,
        store: CollectionStore,
        embedder: Embedder | None,
        *,
        on_change: Callable[[], None] | None = None,
        poll_s: float | None = None,
    ) -> None:
        self.catalog = catalog
        self.store = store
        self.embedder = embedder
        self._on_change = on_change
        self.poll_s = poll_s  # None: the worker stops when it can claim nothing
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._wanted = False  # work arrived while the worker was running

    def start(self) -> None:
        """Ingest whatever is pending, on the worker thread."""
        with self._lock:
            self._idle.clear()
            self._wanted = True
            self._wake.set()
            if self._worker is not None and self._worker.is_alive():
                return
            self._worker = threading.Thread(target=self._work, name="edgerag-ingest", daemon=True)
            self._worker.start()

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is pending (tests, benchmarks)."""
        return self._idle.wait(timeout)

    def _work(self) -> None:
        while True:
            with self._lock:
                self._wanted = False
            watch = False
            try:
                self._ingest_claimable()
                # others hold the files left: wait for them to finish or be left
                watch = self.poll_s is not None and self.catalog.pending_count() > 0
            except Exception as exc:  # the catalog is unreachable: the next upload retries
                _log.warning("looking for files to ingest: %s", exc)
            with self._lock:
                if not self._wanted:
                    self._idle.set()
                    if not watch:
                        self._worker = None
                        return
                    self._wake.clear()
            if watch:
                assert self.poll_s is not None
                self._wake.wait(self.poll_s)

    def _ingest_claimable(self) -> None:
        while (file_id := self.catalog.claim_pending()) is not None:
            try:
                self.ingest(file_id)
            except Exception as exc:  # a bug must not stop the worker for good
                _log.error("ingesting %s failed", file_id, exc_info=exc)
                self.catalog.finish(file_id, {"code": "internal", "message": "internal error"})

    def ingest(self, file_id: str) -> None:
        record = self.catalog.file(file_id)
        data = self.catalog.data(file_id)
        if record is None or data is None:
            return
        embedder = self.embedder
        if embedder is None:
            self.catalog.finish(
                file_id,
                {"code": "no_embedder", "message": "the server runs without an embedding model"},
            )
            return
        try:
            text = extract(data, record.content_type)
        except ExtractionError as exc:
            self.catalog.finish(file_id, {"code": "unreadable", "message": str(exc)})
            return
        chunks = chunk(text)
        self.catalog.set_chunks(file_id, text, [(c.start, c.end) for c in chunks])
        collection = self.store.collection(record.namespace, record.collection)
        limit = embedder.max_tokens - 2
        written: list[str] = []
        for lo in range(0, len(chunks), BATCH):
            batch = chunks[lo : lo + BATCH]
            ids = [chunk_id(file_id, lo + i) for i in range(len(batch))]
            # a chunk is embedded up to the model's limit; its whole text is stored
            texts = [cut_to_tokens(c.text, limit, embedder.count_tokens) or c.text for c in batch]
            try:
                vectors = _embed_patiently(embedder, texts)
                collection.upsert(
                    ids,
                    vectors,
                    [c.text for c in batch],
                    [{"file_id": file_id} for _ in batch],
                    mode="text",
                    embedding_model=embedder.model_id,
                )
            except (EmbeddingError, StoreError) as exc:
                collection.delete(written + ids)
                self.catalog.finish(file_id, {"code": "indexing_failed", "message": str(exc)})
                return
            written += ids
            self.catalog.progress(file_id, lo + len(batch))
        if not self.catalog.finish(file_id):
            collection.delete(written)  # deleted (or replaced) while it was ingested
        if self._on_change is not None:
            self._on_change()


def _embed_patiently(embedder: Embedder, texts: list[str]) -> Vectors:
    """Ingestion waits for a busy embedder instead of failing the file."""
    for _ in range(30):
        try:
            return embedder.embed(texts)
        except EmbedderBusy:
            time.sleep(1.0)
    return embedder.embed(texts)
