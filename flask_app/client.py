"""Python client for the edgerag HTTP API (moorcheh-edge surface).

from flask_app.client import Client
c = Client("http://localhost:8080")
c.upload_documents([{"id": "hours", "text": "Open 9 to 5."}])
c.search_text("when are you open?", top_k=3)
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import requests
import sseclient

Json = dict[str, Any]
Progress = Callable[[int], None]

# bytes of vectors per request of `upload_array` (the server's default
# --max-body-mb is 64)
ARRAY_BATCH_BYTES = 32 << 20


class EdgeragError(Exception):
    """An API error: `status_code` and the parsed JSON `body` (when there is one)."""

    def __init__(self, message: str, status_code: int, body: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.body = body

    @property
    def is_item_limit_exceeded(self) -> bool:
        return (
            self.status_code == 409
            and isinstance(self.body, dict)
            and self.body.get("status") == "failure"
            and "max_items" in self.body
        )


class Connection:
    """A session with the server: requests, and its errors as EdgeragError."""

    def __init__(self, base_url: str = "http://localhost:8080", timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def raise_for(response: requests.Response) -> None:
        if response.status_code < 400:
            return
        try:
            body = response.json()
        except ValueError:
            body = None
        message = body.get("message") if isinstance(body, dict) else None
        error = body.get("error") if isinstance(body, dict) else None
        if message is None and isinstance(error, dict):  # the collections API's envelope
            message = error.get("message")
        raise EdgeragError(message or response.text or response.reason, response.status_code, body)

    def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Json:
        response = self.session.request(
            method, self.base_url + path, json=json, params=params, timeout=timeout or self.timeout
        )
        self.raise_for(response)
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise EdgeragError("response is not a JSON object", response.status_code, body)
        return body


class Client(Connection):
    """The moorcheh-edge surface: the store, search and answers."""

    # --- data API -------------------------------------------------------------

    def health(self) -> Json:
        return self.request("GET", "/health")

    def upload(self, payload: Json) -> Json:
        return self.request("POST", "/upload", payload)

    def _upload_batches(
        self, items: Sequence[Json], mode: str, batch_size: int, progress: Progress | None
    ) -> Json:
        if not items:
            raise ValueError("nothing to upload")
        result: Json = {}
        for start in range(0, len(items), batch_size):
            batch = list(items[start : start + batch_size])
            result = self.upload({"store_mode": mode, "items": batch})
            if progress is not None:
                progress(len(batch))
        return result

    def upload_documents(
        self, documents: Sequence[Json], *, batch_size: int = 256, progress: Progress | None = None
    ) -> Json:
        """`[{"id", "text", "metadata"?}]`; the server embeds the texts."""
        keys = ("id", "text", "metadata")
        items: list[Json] = [{k: d[k] for k in keys if k in d} for d in documents]
        return self._upload_batches(items, "text", batch_size, progress)

    def upload_vectors(
        self, vectors: Sequence[Json], *, batch_size: int = 1000, progress: Progress | None = None
    ) -> Json:
        """`[{"id", "vector", "text"? / "original_text"?, "metadata"?}]` (vector mode)."""
        items = []
        for v in vectors:
            item = {"id": v["id"], "vector": v["vector"]}
            text = v.get("text", v.get("original_text"))
            if text is not None:
                item["text"] = text
            if "metadata" in v:
                item["metadata"] = v["metadata"]
            items.append(item)
        return self._upload_batches(items, "vector", batch_size, progress)

    def upload_array(
        self,
        ids: Sequence[str],
        vectors: npt.NDArray[np.floating[Any]],
        items: Sequence[Json] | None = None,
        *,
        batch_rows: int | None = None,
        progress: Progress | None = None,
    ) -> Json:
        """Vectors as binary (`.npy` parts of a multipart upload, vector mode):
        row i of `vectors` (n x d) under `ids[i]`, with `items[i]`'s optional
        `text` and `metadata`. Sent in batches of `batch_rows` (default: 32 MB
        of float32 each); returns the last batch's reply."""
        rows = len(ids)
        if vectors.ndim != 2 or vectors.shape[0] != rows or rows == 0:
            raise ValueError(f"{rows} ids for vectors of shape {vectors.shape}")
        if items is not None and len(items) != rows:
            raise ValueError(f"{len(items)} items for {rows} ids")
        broken = next((i for i in ids if "\n" in i or i.endswith("\r")), None)
        if broken is not None:
            raise ValueError(f"id {broken!r}: ids are sent one per line")
        step = batch_rows or max(1, ARRAY_BATCH_BYTES // (4 * int(vectors.shape[1])))
        result: Json = {}
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            npy = io.BytesIO()
            np.save(npy, np.ascontiguousarray(vectors[start:stop], dtype=np.float32))
            parts: dict[str, tuple[str, bytes, str]] = {
                "vectors": ("vectors.npy", npy.getvalue(), "application/octet-stream"),
                "ids": ("ids.txt", "\n".join(ids[start:stop]).encode("utf-8"), "text/plain"),
            }
            if items is not None:
                lines = (json.dumps(item, ensure_ascii=False) for item in items[start:stop])
                parts["items"] = ("items.jsonl", "\n".join(lines).encode("utf-8"), "text/plain")
            response = self.session.post(
                self.base_url + "/upload", files=parts, timeout=self.timeout
            )
            self.raise_for(response)
            result = response.json()
            if progress is not None:
                progress(stop - start)
        return result

    def _search(
        self,
        query: Sequence[float] | str,
        top_k: int,
        threshold: float,
        kiosk_mode: bool,
        metadata: Json | None,
    ) -> list[Json]:
        payload: Json = {
            "query": query if isinstance(query, str) else list(query),
            "top_k": top_k,
            "kiosk_mode": kiosk_mode,
        }
        if kiosk_mode or threshold > 0:
            payload["threshold"] = threshold
        if metadata:
            payload["metadata"] = metadata
        results: list[Json] = self.request("POST", "/search", payload)["results"]
        return results

    def search(
        self,
        query: Sequence[float],
        *,
        top_k: int = 10,
        threshold: float = 0.0,
        kiosk_mode: bool = False,
        metadata: Json | None = None,
    ) -> list[Json]:
        return self._search(query, top_k, threshold, kiosk_mode, metadata)

    def search_text(
        self,
        query: str,
        *,
        top_k: int = 10,
        threshold: float = 0.0,
        kiosk_mode: bool = False,
        metadata: Json | None = None,
    ) -> list[Json]:
        """The server embeds `query` with its embedding model."""
        return self._search(query, top_k, threshold, kiosk_mode, metadata)

    def delete(self, ids: Sequence[str]) -> Json:
        return self.request("DELETE", "/items", {"ids": list(ids)})

    def clear_store(self) -> Json:
        return self.request("DELETE", "/store")

    def export(
        self, *, limit: int | None = None, cursor: str | None = None, include_vectors: bool = False
    ) -> Json:
        params: dict[str, Any] = {}
        if limit is not None:
            params["limit"] = limit
        if cursor is not None:
            params["cursor"] = cursor
        if include_vectors:
            params["include_vectors"] = "true"
        return self.request("GET", "/export", params=params)

    def export_all(self, *, page: int = 1000, include_vectors: bool = False) -> Iterator[Json]:
        """Every item, fetched page by page."""
        cursor = None
        while True:
            body = self.export(limit=page, cursor=cursor, include_vectors=include_vectors)
            yield from body["items"]
            cursor = body.get("next_cursor")
            if not cursor:
                return

    # --- RAG answers --------------------------------------------------------------

    @staticmethod
    def _answer_payload(
        query: str,
        query_vector: Sequence[float] | None = None,
        *,
        top_k: int = 5,
        threshold: float = 0.0,
        kiosk_mode: bool = False,
        header_prompt: str | None = None,
        footer_prompt: str | None = None,
        chat_history: Sequence[Json] | None = None,
        temperature: float | None = None,
        metadata: Json | None = None,
    ) -> Json:
        payload: Json = {"query": query, "top_k": top_k, "kiosk_mode": kiosk_mode}
        if query_vector is not None:
            payload["query_vector"] = list(query_vector)
        if kiosk_mode or threshold > 0:
            payload["threshold"] = threshold
        if header_prompt:
            payload["header_prompt"] = header_prompt
        if footer_prompt:
            payload["footer_prompt"] = footer_prompt
        if chat_history:
            payload["chat_history"] = list(chat_history)
        if temperature is not None:
            payload["temperature"] = temperature
        if metadata:
            payload["metadata"] = metadata
        return payload

    def answer(
        self,
        query: str,
        query_vector: Sequence[float] | None = None,
        *,
        timeout: float = 120.0,
        **options: Any,
    ) -> Json:
        """POST /answer; without `query_vector` the server embeds `query`.

        Options (as moorcheh-edge's SDK): top_k=5, threshold=0.0, kiosk_mode=False,
        header_prompt, footer_prompt, chat_history, temperature, and metadata
        (an exact-match filter).
        """
        payload = self._answer_payload(query, query_vector, **options)
        return self.request("POST", "/answer", payload, timeout=timeout)

    def answer_text(self, query: str, **options: Any) -> Json:
        """POST /answer with the server embedding the question."""
        return self.answer(query, None, **options)

    def answer_stream(
        self, query: str, query_vector: Sequence[float] | None = None, **options: Any
    ) -> Iterator[tuple[str, Json]]:
        """POST /answer/stream (options as for `answer`); yields (event, data):
        meta, token..., then done or error. Errors before the stream starts
        raise EdgeragError."""
        payload = self._answer_payload(query, query_vector, **options)
        response = self.session.post(
            self.base_url + "/answer/stream",
            json=payload,
            stream=True,
            timeout=(10, None),
            headers={"Accept": "text/event-stream"},
        )
        with response:
            self.raise_for(response)
            chunks = response.iter_content(chunk_size=None)
            for event in sseclient.SSEClient(chunks).events():
                data = json.loads(event.data)
                yield event.event, data
                if event.event in ("done", "error"):
                    return
