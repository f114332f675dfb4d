"""The file-collections service: one per app, shared by every surface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask_app import rag
from flask_app.file_collections.names import split_qualified
from flask_app.inference.embed import Embedder
from flask_app.ingest.worker import Ingestor
from flask_app.rag.retrieval import StoredCollection
from flask_app.records import Records
from flask_app.store import Hit
from flask_app.store.catalog import Catalog, CollectionRecord, FileRecord, chunk_id
from flask_app.store.file_query import Sql, readable_by
from flask_app.store.protocols import CollectionStore


@dataclass(frozen=True)
class FoundPassage:
    """A passage found in a collection, with the file it comes from."""

    hit: Hit
    file: FileRecord


class FileCollections:
    def __init__(
        self,
        catalog: Catalog,
        store: CollectionStore,
        embedder: Embedder | None,
        *,
        poll_s: float | None = None,
    ) -> None:
        self.catalog = catalog
        self.store = store
        self.embedder = embedder
        self.ingestor = Ingestor(catalog, store, embedder, poll_s=poll_s)

    @classmethod
    def open(
        cls, records: Records, store: CollectionStore, embedder: Embedder | None
    ) -> FileCollections:
        """The catalog `records` keep; files accepted before a restart are
        ingested again (with a shared catalog, also those another server left)."""
        opened = cls(records.catalog(), store, embedder, poll_s=records.poll_s)
        if opened.catalog.pending():
            opened.ingestor.start()
        return opened

    def find(self, qualified: str) -> CollectionRecord | None:
        """The collection named "namespace/collection" (None when there is
        none or the name is not one)."""
        names = split_qualified(qualified)
        return self.catalog.collection(*names) if names is not None else None

    @staticmethod
    def needs_principals(record: CollectionRecord, principals: list[str] | None) -> bool:
        """An enforced collection is only read on behalf of named principals."""
        return record.access_control == "enforced" and not principals

    def visible_files(
        self,
        record: CollectionRecord,
        principals: list[str] | None,
        condition: Sql | None = None,
    ) -> list[FileRecord]:
        """Ready files `principals` may read and `condition` keeps (both
        looked up through the catalog's indexes)."""
        ns, name = record.namespace, record.name
        conditions = [condition] if condition is not None else []
        if record.access_control == "enforced":
            conditions.append(readable_by(principals or [], ns, name))
        return self.catalog.files_where(ns, name, conditions)

    def retriever(
        self,
        record: CollectionRecord,
        files: list[FileRecord],
        spans: dict[str, list[tuple[int, int]]],
        question: rag.Question,
    ) -> StoredCollection | None:
        """Search over the chunks of `files` only (None: nothing to search)."""
        only = {
            chunk_id(fid, n) for fid, chunk_spans in spans.items() for n in range(len(chunk_spans))
        }
        if not only or self.embedder is None:
            return None
        chunks = self.store.collection(record.namespace, record.name)
        vector = rag.query_vector(chunks, question, self.embedder)
        # every stored chunk visible (no filter, no ACL, nothing processing):
        # search without an allow-list, whose cost would follow the collection
        everything = len(files) == record.file_count and len(only) == len(chunks)
        return StoredCollection(
            chunks, vector, only=None if everything else only, embedder=self.embedder
        )

    def search(
        self, record: CollectionRecord, principals: list[str] | None, question: rag.Question
    ) -> list[FoundPassage]:
        """The `question.top_k` best passages of the files `principals` may read."""
        files = self.visible_files(record, principals)
        spans = self.catalog.spans_of([f.file_id for f in files])
        retriever = self.retriever(record, files, spans, question)
        if retriever is None:
            return []
        by_id = {f.file_id: f for f in files}
        found = []
        for hit in retriever.passages(question.query, question.top_k):
            file = by_id.get(str((hit.metadata or {}).get("file_id")))
            if file is not None:  # None: deleted since the files were listed
                found.append(FoundPassage(hit, file))
        return found

    def add_file(
        self,
        record: CollectionRecord,
        path: str,
        content_type: str,
        raw: bytes,
        metadata: dict[str, Any],
        principals: list[str],
    ) -> FileRecord:
        """Store a file (replacing the one at `path`) and queue its ingestion."""
        ns, name = record.namespace, record.name
        added, replaced = self.catalog.add_file(
            ns, name, path, content_type, raw, metadata, principals
        )
        if replaced is not None:
            self._forget_chunks(ns, name, replaced)
        self.ingestor.start()
        return added

    def delete_file(self, file: FileRecord) -> None:
        self._forget_chunks(file.namespace, file.collection, file.file_id)
        self.catalog.delete_file(file.file_id)

    def index_kind(self, record: CollectionRecord) -> str:
        """How the collection's chunks are scanned (`f32`, `int8` or `binary`)."""
        return self.store.index_kind(record.namespace, record.name)

    def set_index(self, record: CollectionRecord, kind: str) -> None:
        """Choose how the chunks are scanned (ValueError for an unknown kind)."""
        self.store.collection(record.namespace, record.name).set_index(kind)

    def delete_collection(self, record: CollectionRecord) -> None:
        self.catalog.delete_collection(record.namespace, record.name)
        self.store.drop(record.namespace, record.name)  # frees the chunks' disk

    def _forget_chunks(self, namespace: str, collection: str, file_id: str) -> None:
        chunks = self.store.collection(namespace, collection)
        ids = chunks.matching_ids({"file_id": file_id})
        if ids:
            chunks.delete(ids)

    def close(self) -> None:
        self.catalog.close()
