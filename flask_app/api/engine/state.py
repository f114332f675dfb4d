"""The Engine surface's per-app state: the catalog and the ingestion worker."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app

from flask_app.api.http.extensions import services_of
from flask_app.ingest.worker import Ingestor
from flask_app.store.catalog import Catalog

KEY = "edgerag_engine"


@dataclass(frozen=True)
class EngineState:
    catalog: Catalog
    ingestor: Ingestor


def of_app() -> EngineState:
    found: EngineState = current_app.extensions[KEY]
    return found


def catalog() -> Catalog:
    return of_app().catalog


def ingestor() -> Ingestor:
    return of_app().ingestor


def forget_chunks(namespace: str, collection: str, file_id: str) -> None:
    """Remove a file's chunks from the collection's store."""
    store = services_of(current_app).store
    chunks = store.collection(namespace, collection)
    ids = chunks.matching_ids({"file_id": file_id})
    if ids:
        chunks.delete(ids)
