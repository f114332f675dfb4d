"""Collection-backed RAG (spec §10, an edgerag extension Lucidworks ignores):
a request whose `useCaseConfig.collection` names a file collection
("namespace/collection") gets, for each item sent without documents, the
`useCaseConfig.topK` best passages of that collection as its documents,
found by the core's collection search (hybrid retrieval over the ready
files the `principals` may read, as every surface finds them): body = the passage, source = the
file's path, title = its file name, date = when the file was uploaded.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from flask import current_app

from flask_app import rag
from flask_app.api.http.extensions import collections_of
from flask_app.api.http.json_body import BadRequest
from flask_app.api.lucidworks import errors
from flask_app.api.lucidworks.schemas import Document, RagRequest
from flask_app.store.catalog import CollectionRecord, rfc3339


def check_collection(request: RagRequest) -> CollectionRecord | None:
    """The collection the request names (None: it names none); 404 when there
    is no such collection, 400 when it is enforced and no principals are sent."""
    use = request.useCaseConfig
    if use.collection is None:
        return None
    collections = collections_of(current_app)
    record = collections.find(use.collection)
    if record is None:
        raise errors.NotFound(f"Unknown collection: {use.collection}")
    if collections.needs_principals(record, use.principals):
        raise BadRequest(
            "useCaseConfig.principals is required for collections with enforced access control"
        )
    return record


def with_collection_documents(request: RagRequest) -> RagRequest:
    """`request` with the collection's passages as the documents of every
    item that has none (unchanged without `useCaseConfig.collection`)."""
    record = check_collection(request)
    if record is None or all(item.documents for item in request.batch):
        return request
    use = request.useCaseConfig
    collections = collections_of(current_app)
    items = []
    for item in request.batch:
        if item.documents:
            items.append(item)
            continue
        found = collections.search(
            record, use.principals, rag.Question(query=item.text, top_k=use.topK)
        )
        documents = [
            Document(
                body=passage.hit.text,
                source=passage.file.path,
                title=PurePosixPath(passage.file.path).name,
                date=rfc3339(passage.file.created_at),  # as the Engine lists the file
            )
            for passage in found
        ]
        items.append(item.model_copy(update={"documents": documents}))
    return request.model_copy(update={"batch": items})
