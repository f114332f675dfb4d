"""Collection-backed RAG (spec §10, an edgerag extension Lucidworks ignores):
a request whose `useCaseConfig.collection` names an Engine collection
("namespace/collection") gets, for each item sent without documents, the
`useCaseConfig.topK` best passages of that collection as its documents,
found the way the Engine's `:answer` finds them (hybrid retrieval over the
ready files the `principals` may read): body = the passage, source = the
file's path, title = its file name, date = when the file was uploaded.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from flask_app import rag
from flask_app.api.engine import state
from flask_app.api.engine.answer import files_retriever, find_collection, visible_files
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
    record = find_collection(use.collection)
    if record is None:
        raise errors.NotFound(f"Unknown collection: {use.collection}")
    if record.access_control == "enforced" and not use.principals:
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
    files = visible_files(record, use.principals, None)
    spans = state.catalog().spans_of([f.file_id for f in files])
    by_id = {f.file_id: f for f in files}
    items = []
    for item in request.batch:
        if item.documents:
            items.append(item)
            continue
        question = rag.Question(query=item.text, top_k=use.topK)
        retriever = files_retriever(record, files, spans, question)
        hits = retriever.passages(item.text, use.topK) if retriever is not None else []
        documents = []
        for hit in hits:
            file = by_id.get(str((hit.metadata or {}).get("file_id")))
            if file is None:  # deleted since the files were listed
                continue
            documents.append(
                Document(
                    body=hit.text,
                    source=file.path,
                    title=PurePosixPath(file.path).name,
                    date=rfc3339(file.created_at),  # as the Engine lists the file
                )
            )
        items.append(item.model_copy(update={"documents": documents}))
    return request.model_copy(update={"batch": items})
