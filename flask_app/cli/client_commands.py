"""`edgerag` verbs that talk to a running server (moorcheh-edge CLI compatible):
status, upload-documents, upload-vectors (alias upload; JSON, or a .npy sent
as binary), search, delete, clear-store, export; and over the collections
API, add (files and folders into a collection) and ask (`cli/add.py`,
`cli/ask.py`).

Output is the server's JSON (indent 2). On an API error the error body is
printed, then `Error (<status>): <message>` on stderr, exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from tqdm import tqdm

from flask_app.client import Client, EdgeragError

DEFAULT_BASE_URL = os.environ.get("EDGERAG_BASE_URL", "http://localhost:8080")


class UsageError(Exception):
    """Bad command-line input (file shape, JSON flag)."""


def _base(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-url", default=DEFAULT_BASE_URL, help=f"server URL (default {DEFAULT_BASE_URL})"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds to wait for each request (default 120)",
    )


def add_commands(sub: Any) -> None:
    from flask_app.cli import add, ask

    add.add_parser(sub, _base)
    ask.add_parser(sub, _base)
    p = sub.add_parser("status", help="print GET /health")
    _base(p)
    p = sub.add_parser("upload-documents", help="upload texts; the server embeds them")
    p.add_argument(
        "--documents-file",
        required=True,
        type=Path,
        help='JSON file {"documents": [{"id", "text", "metadata"?}, ...]}',
    )
    p.add_argument("--batch-size", type=int, default=256, help="items per request (default 256)")
    _base(p)
    p = sub.add_parser("upload-vectors", aliases=["upload"], help="upload vectors (vector mode)")
    p.add_argument(
        "--vectors-file",
        required=True,
        type=Path,
        help='JSON file {"vectors": [{"id", "vector", "text"?, "metadata"?}, ...]}, or a '
        ".npy array (n x d) sent as binary, with --ids-file",
    )
    p.add_argument("--ids-file", type=Path, help="with a .npy: the n ids, one per line")
    p.add_argument(
        "--items-file",
        type=Path,
        help='with a .npy: optional JSON Lines, per row {"text"?, "metadata"?}',
    )
    p.add_argument(
        "--batch-size",
        type=int,
        help="items per request (default 1000 from JSON; from a .npy, 32 MB of vectors)",
    )
    _base(p)
    p = sub.add_parser("search", help="POST /search by text or by vector")
    query = p.add_mutually_exclusive_group(required=True)
    query.add_argument("--query-text", help="text; the server embeds it")
    query.add_argument("--query-vector-json", help="JSON array of numbers")
    p.add_argument("--top-k", type=int, default=10, help="results (1-100, default 10)")
    p.add_argument("--threshold", type=float, default=0.0, help="kiosk threshold 0-1 (default 0)")
    p.add_argument("--kiosk-mode", action="store_true", help="drop results below --threshold")
    p.add_argument("--metadata-json", help='exact-match metadata filter, e.g. {"lang": "en"}')
    _base(p)
    p = sub.add_parser("answer", help="ask a question: POST /answer (or /answer/stream)")
    p.add_argument("--query", required=True, help="the question")
    p.add_argument("--query-vector-json", help="JSON array; default: the server embeds --query")
    p.add_argument("--top-k", type=int, default=5, help="passages to retrieve (default 5)")
    p.add_argument("--threshold", type=float, default=0.0, help="kiosk threshold 0-1 (default 0)")
    p.add_argument("--kiosk-mode", action="store_true", help="drop passages below --threshold")
    p.add_argument("--header-prompt", help="replaces the default system prompt")
    p.add_argument("--footer-prompt", help="instruction placed before the question")
    p.add_argument(
        "--chat-history-json", help='JSON array of {"role": "user"|"assistant", "content": "..."}'
    )
    p.add_argument("--temperature", type=float, help="0-2 (server default 0.2)")
    p.add_argument("--metadata-json", help="exact-match metadata filter for retrieval")
    p.add_argument("--stream", action="store_true", help="print the answer as it is generated")
    _base(p)
    p = sub.add_parser("delete", help="DELETE /items")
    p.add_argument("--ids-json", required=True, help='JSON array of ids, e.g. ["a", "b"]')
    _base(p)
    p = sub.add_parser("clear-store", help="DELETE /store (asks first unless -y)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    _base(p)
    p = sub.add_parser("export", help="GET /export")
    p.add_argument("--limit", type=int, help="page size (1-10000); all items when omitted")
    p.add_argument("--cursor", help="next_cursor of the previous page")
    p.add_argument("--include-vectors", action="store_true", help="include stored vectors")
    _base(p)


def _load_json(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} is not valid JSON: {exc}") from None


def _records(path: Path, key: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc}") from None
    records = data.get(key) if isinstance(data, dict) else None
    if not isinstance(records, list) or not records:
        raise UsageError(f'{path} must hold {{"{key}": [...]}} with at least one entry')
    for i, record in enumerate(records):
        if not isinstance(record, dict) or "id" not in record:
            raise UsageError(f"{path}: {key}[{i}] must be an object with an id")
    return records


def _lines(text: str) -> list[str]:
    """Lines as the server splits an upload's parts: at newlines (a final one
    and a `\r` before each are dropped), not at other Unicode line breaks."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _array_upload(args: argparse.Namespace) -> tuple[list[str], Any, list[dict[str, Any]] | None]:
    """The .npy vectors (memory-mapped: sent a batch at a time), their ids and items."""
    import numpy as np

    if args.ids_file is None:
        raise UsageError("a .npy --vectors-file needs --ids-file (one id per line)")
    try:
        array = np.load(args.vectors_file, mmap_mode="r", allow_pickle=False)
        ids = _lines(args.ids_file.read_text(encoding="utf-8"))
        lines = _lines(args.items_file.read_text(encoding="utf-8")) if args.items_file else []
    except OSError as exc:
        raise UsageError(f"cannot read {exc.filename}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the upload's files: {exc}") from None
    if array.ndim != 2 or array.shape[0] != len(ids):
        raise UsageError(f"{args.ids_file} has {len(ids)} ids for vectors of shape {array.shape}")
    if not args.items_file:
        return ids, array, None
    if len(lines) != len(ids):
        raise UsageError(f"{args.items_file} has {len(lines)} lines for {len(ids)} ids")
    items = [_load_json(line, f"{args.items_file} line {n + 1}") for n, line in enumerate(lines)]
    if not all(isinstance(item, dict) for item in items):
        raise UsageError(f"{args.items_file}: every line must be a JSON object")
    return ids, array, items


def _with_progress(total: int, label: str, upload: Callable[[Callable[[int], None]], Any]) -> Any:
    with tqdm(
        total=total,
        unit="item",
        desc=label,
        file=sys.stderr,
        disable=total < 2 or not sys.stderr.isatty(),
    ) as bar:

        def advance(n: int) -> None:
            bar.update(n)

        return upload(advance)


def _history(text: str | None) -> list[dict[str, str]] | None:
    if not text:
        return None
    history = _load_json(text, "--chat-history-json")
    if not isinstance(history, list):
        raise UsageError("--chat-history-json must be a JSON array")
    for i, turn in enumerate(history):
        if (
            not isinstance(turn, dict)
            or turn.get("role") not in ("user", "assistant")
            or not isinstance(turn.get("content"), str)
            or not turn["content"].strip()
        ):
            raise UsageError(f"--chat-history-json[{i}] needs role user|assistant and content")
    return history


# Marker: the answer was already printed token by token.
STREAMED = object()


def _answer(client: Client, args: argparse.Namespace) -> Any:
    vector = None
    if args.query_vector_json:
        vector = _load_json(args.query_vector_json, "--query-vector-json")
        if not isinstance(vector, list):
            raise UsageError("--query-vector-json must be a JSON array of numbers")
    metadata = _load_json(args.metadata_json, "--metadata-json") if args.metadata_json else None
    options: dict[str, Any] = {
        "top_k": args.top_k,
        "threshold": args.threshold,
        "kiosk_mode": args.kiosk_mode,
        "header_prompt": args.header_prompt,
        "footer_prompt": args.footer_prompt,
        "chat_history": _history(args.chat_history_json),
        "temperature": args.temperature,
        "metadata": metadata,
    }
    if not args.stream:
        return client.answer(args.query, vector, timeout=args.timeout, **options)
    for event, data in client.answer_stream(args.query, vector, **options):
        if event == "token":
            print(data["delta"], end="", flush=True)
        elif event == "done":
            print(flush=True)
        elif event == "error":
            print(flush=True)
            raise EdgeragError(data.get("message", "stream error"), 200, data)
    return STREAMED


def run(args: argparse.Namespace) -> Any:
    client = Client(args.base_url, timeout=args.timeout)
    command = args.command
    if command == "status":
        return client.health()
    if command == "upload-documents":
        docs = _records(args.documents_file, "documents")
        return _with_progress(
            len(docs),
            "upload",
            lambda p: client.upload_documents(docs, batch_size=args.batch_size, progress=p),
        )
    if command in ("upload-vectors", "upload") and args.vectors_file.suffix == ".npy":
        ids, array, items = _array_upload(args)
        return _with_progress(
            len(ids),
            "upload",
            lambda p: client.upload_array(
                ids, array, items, batch_rows=args.batch_size, progress=p
            ),
        )
    if command in ("upload-vectors", "upload"):
        if args.ids_file or args.items_file:
            raise UsageError("--ids-file and --items-file go with a .npy --vectors-file")
        vectors = _records(args.vectors_file, "vectors")
        return _with_progress(
            len(vectors),
            "upload",
            lambda p: client.upload_vectors(
                vectors, batch_size=args.batch_size or 1000, progress=p
            ),
        )
    if command == "search":
        metadata = _load_json(args.metadata_json, "--metadata-json") if args.metadata_json else None
        options = {
            "top_k": args.top_k,
            "threshold": args.threshold,
            "kiosk_mode": args.kiosk_mode,
            "metadata": metadata,
        }
        if args.query_text is not None:
            return {"results": client.search_text(args.query_text, **options)}
        vector = _load_json(args.query_vector_json, "--query-vector-json")
        if not isinstance(vector, list):
            raise UsageError("--query-vector-json must be a JSON array of numbers")
        return {"results": client.search(vector, **options)}
    if command == "answer":
        return _answer(client, args)
    if command == "delete":
        ids = _load_json(args.ids_json, "--ids-json")
        if not isinstance(ids, list) or not ids:
            raise UsageError("--ids-json must be a non-empty JSON array of ids")
        return client.delete(ids)
    if command == "clear-store":
        if not args.yes:
            print(
                "This deletes every item in the store. Type Y to delete: ",
                end="",
                file=sys.stderr,
                flush=True,
            )
            if sys.stdin.readline().strip() != "Y":
                print("Aborted.", file=sys.stderr)
                raise SystemExit(1)
        return client.clear_store()
    if command == "export":
        return client.export(
            limit=args.limit, cursor=args.cursor, include_vectors=args.include_vectors
        )
    raise UsageError(f"unknown command {command}")


def main(args: argparse.Namespace) -> int:
    if args.command in ("add", "ask"):
        from flask_app.cli import add, ask

        return add.run(args) if args.command == "add" else ask.run(args)
    try:
        result = run(args)
    except EdgeragError as exc:
        if exc.body is not None:
            print(json.dumps(exc.body, indent=2))
        print(f"Error ({exc.status_code}): {exc.message}", file=sys.stderr)
        return 1
    except (UsageError, requests.RequestException) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    if result is not STREAMED:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


COMMANDS = {
    "add",
    "ask",
    "status",
    "upload-documents",
    "upload-vectors",
    "upload",
    "search",
    "answer",
    "delete",
    "clear-store",
    "export",
}
