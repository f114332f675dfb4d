"""`edgerag add PATH...`: files and folders into a collection of a running
server, through its collections API, and again later with only what changed.

A file's path relative to the folder given (its name, for a file given
alone) is its `path` in the collection. The server keeps each file's
sha256: a file whose bytes and metadata are what the server holds is
skipped, a changed one replaces the stored one (the server swaps them in
one transaction), and `--delete` removes the collection's files that are no
longer on disk. Nothing is remembered on this side, so a run that stopped
half way (the server went away) is finished by running it again.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from tqdm import tqdm

from flask_app.client import Client, EdgeragError

CONTENT_TYPES = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".csv": "text/csv",
    ".json": "application/json",
    ".pdf": "application/pdf",
}
DEFAULT_NAMESPACE = "default"
POLL_S = 0.5  # how often ingestion is looked at (the progress bar moves at least this often)
# the JSON around a file's content in an upload body: path, type, metadata
_ENVELOPE_BYTES = 4096


class AddError(Exception):
    """Bad input on the command line (not a file's own problem)."""


def add_parser(sub: Any, base: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "add",
        help="add files and folders to a collection (again: only what changed)",
        description=__doc__.split("\n\n")[0].replace("`", ""),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files and folders (recursive)")
    p.add_argument(
        "--collection",
        help="the collection (default: the first folder's name, lower-cased)",
    )
    p.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"the namespace (default {DEFAULT_NAMESPACE})",
    )
    p.add_argument(
        "--glob",
        default="*",
        help="in folders, only files whose name matches, e.g. '*.md' (default: every file)",
    )
    p.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata of every file (repeatable; true/false and numbers are typed; default: none)",
    )
    p.add_argument(
        "--delete",
        action="store_true",
        help="also remove the collection's files that are not among PATHs (default: keep them)",
    )
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="return once uploaded, without waiting for the server to index (default: wait "
        "until every file is ready or failed)",
    )
    base(p)


# --- what is on disk --------------------------------------------------------------


@dataclass
class Local:
    path: str  # in the collection
    file: Path
    content_type: str | None = None
    data: bytes = b""
    sha256: str = ""
    problem: str | None = None  # why it cannot be added


def _files(root: Path, pattern: str) -> Iterator[tuple[str, Path]]:
    """(collection path, file) under `root`, hidden files and folders left out."""
    if root.is_file():
        yield root.name, root
        return
    for file in sorted(root.rglob(pattern)):
        relative = file.relative_to(root)
        if any(part.startswith(".") for part in relative.parts) or not file.is_file():
            continue
        yield relative.as_posix(), file


def _check(local: Local, max_bytes: int) -> Local:
    """`local` with its bytes read, or the reason it cannot be added."""
    suffix = local.file.suffix.lower()
    local.content_type = CONTENT_TYPES.get(suffix)
    if local.content_type is None:
        known = " ".join(sorted(CONTENT_TYPES))
        local.problem = f"unsupported type ({suffix or 'no extension'}; supported: {known})"
        return local
    try:
        local.data = local.file.read_bytes()
    except OSError as exc:
        local.problem = f"unreadable: {exc.strerror or exc}"
        return local
    if not local.data.strip():
        local.problem = "empty file"
        return local
    if local.content_type == "application/pdf":
        if not local.data.startswith(b"%PDF"):
            local.problem = "not a PDF (no %PDF header)"
            return local
        body = len(base64.b64encode(local.data))
    else:
        try:
            body = len(json.dumps(local.data.decode("utf-8")).encode())
        except UnicodeDecodeError as exc:
            local.problem = f"not UTF-8 text (byte {exc.start})"
            return local
    if body + _ENVELOPE_BYTES > max_bytes:
        local.problem = (
            f"too large: its upload would be {(body + _ENVELOPE_BYTES) / 2**20:.1f} MiB, over "
            f"the server's {max_bytes / 2**20:.0f} MiB request limit"
        )
        return local
    local.sha256 = hashlib.sha256(local.data).hexdigest()
    return local


def scan(paths: Sequence[Path], pattern: str, max_bytes: int) -> list[Local]:
    found: dict[str, Local] = {}
    for root in paths:
        if not root.exists():
            raise AddError(f"{root}: no such file or folder")
        for path, file in _files(root, pattern):
            if path in found:
                raise AddError(
                    f"{file} and {found[path].file} would both be {path!r} in the collection"
                )
            found[path] = _check(Local(path, file), max_bytes)
    return list(found.values())


def metadata_of(pairs: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if not eq or not key.strip():
            raise AddError(f"--metadata {pair!r}: expected KEY=VALUE")
        value: Any = raw
        if raw in ("true", "false"):
            value = raw == "true"
        elif re.fullmatch(r"-?\d+", raw):
            value = int(raw)
        elif re.fullmatch(r"-?\d+\.\d+", raw):
            value = float(raw)
        out[key.strip()] = value
    return out


def default_collection(paths: Sequence[Path]) -> str:
    first = paths[0].resolve()
    folder = first if first.is_dir() else first.parent
    name = re.sub(r"[^a-z0-9-]+", "-", folder.name.lower()).strip("-")[:63]
    return name or "documents"


# --- the server's side ---------------------------------------------------------------


class Collection:
    """One collection through the collections API."""

    def __init__(self, client: Client, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.base = f"/namespaces/{namespace}/collections/{name}"

    def ensure(self, say: Callable[[str], None]) -> None:
        try:
            self.client.request("GET", f"/namespaces/{self.namespace}")
        except EdgeragError as exc:
            if exc.status_code != 404:
                raise
            self.client.request("PUT", f"/namespaces/{self.namespace}", {})
            say(f"created namespace {self.namespace}")
        try:
            self.client.request("GET", self.base)
        except EdgeragError as exc:
            if exc.status_code != 404:
                raise
            self.client.request("PUT", self.base, {})
            say(f"created collection {self.namespace}/{self.name}")

    def files(self) -> dict[str, dict[str, Any]]:
        """Every stored file by path."""
        out: dict[str, dict[str, Any]] = {}
        token: str | None = None
        while True:
            params: dict[str, Any] = {"page_size": 100}
            if token:
                params["page_token"] = token
            page = self.client.request("GET", f"{self.base}/files", params=params)
            for record in page["files"]:
                out[record["path"]] = record
            token = page.get("next_page_token")
            if not token:
                return out

    def upload(self, local: Local, metadata: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "path": local.path,
            "content_type": local.content_type,
            "metadata": metadata,
        }
        if local.content_type == "application/pdf":
            body["data"] = base64.b64encode(local.data).decode()
        else:
            body["text"] = local.data.decode("utf-8")
        return self.client.request("POST", f"{self.base}/files", body)

    def file(self, file_id: str) -> dict[str, Any]:
        return self.client.request("GET", f"{self.base}/files/{file_id}")

    def delete(self, file_id: str) -> None:
        url = f"{self.client.base_url}{self.base}/files/{file_id}"
        Client.raise_for(self.client.session.delete(url, timeout=self.client.timeout))


def max_request_bytes(client: Client) -> int:
    info = client.request("GET", "/info")
    return int(info["answer"]["limits"]["max_request_bytes"])


# --- the run ----------------------------------------------------------------------


@dataclass
class Summary:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # path -> reason
    chunks: int = 0
    waiting: list[str] = field(default_factory=list)  # uploaded, not indexed yet (--no-wait)

    def lines(self, seconds: float) -> list[str]:
        head = (
            f"added {len(self.added)}, updated {len(self.updated)}, unchanged "
            f"{len(self.unchanged)}, removed {len(self.removed)}, failed {len(self.failed)}; "
            f"{self.chunks} chunks; {seconds:.1f} s"
        )
        out = [head]
        if self.waiting:
            out.append(f"{len(self.waiting)} still being indexed by the server (--no-wait)")
        out += [f"failed: {path}: {reason}" for path, reason in sorted(self.failed.items())]
        return out


def _bar(total: int, unit: str, desc: str) -> tqdm[Any]:
    return tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, disable=not sys.stderr.isatty())


def _wait(collection: Collection, ids: dict[str, str], summary: Summary, timeout: float) -> None:
    """Until every uploaded file is ready or failed, with a bar over their
    chunks (`ids`: file id -> path); past `timeout` s they are left waiting."""
    pending = dict(ids)
    deadline = time.monotonic() + timeout
    done: dict[str, int] = {}
    totals: dict[str, int] = {}
    with _bar(0, "chunk", "indexing") as bar:
        while pending:
            for file_id, path in list(pending.items()):
                record = collection.file(file_id)
                progress = record.get("progress") or {}
                done[file_id] = int(progress.get("chunks_done", 0))
                totals[file_id] = int(progress.get("chunks_total", 0))
                if record["status"] == "ready":
                    pending.pop(file_id)
                    done[file_id] = totals[file_id] = int(record.get("chunk_count", 0))
                    summary.chunks += done[file_id]
                elif record["status"] == "failed":
                    pending.pop(file_id)
                    error = record.get("error") or {}
                    summary.failed[path] = error.get("message", "the server could not index it")
            bar.total = max(sum(totals.values()), sum(done.values()))
            bar.n = sum(done.values())
            bar.refresh()
            if not pending:
                return
            if time.monotonic() > deadline:
                summary.waiting = sorted(pending.values())
                return
            time.sleep(POLL_S)


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    paths = [Path(p) for p in args.paths]
    client = Client(args.base_url, timeout=args.timeout)
    summary = Summary()
    stored: list[str] = []
    plan: list[Local] = []
    try:
        metadata = metadata_of(args.metadata)
        collection = Collection(
            client, args.namespace, args.collection or default_collection(paths)
        )
        limit = max_request_bytes(client)
        locals_ = scan(paths, args.glob, limit)
        collection.ensure(lambda line: print(line, file=sys.stderr))
        remote = collection.files()
        for local in locals_:
            if local.problem is not None:
                summary.failed[local.path] = local.problem
                continue
            held = remote.get(local.path)
            if (
                held is not None
                and held.get("sha256") == local.sha256
                and held.get("metadata") == metadata
                and held["status"] != "failed"
            ):
                summary.unchanged.append(local.path)
                continue
            plan.append(local)
        uploaded: dict[str, str] = {}
        with _bar(len(plan), "file", "upload") as bar:
            for local in plan:
                try:
                    record = collection.upload(local, metadata)
                except EdgeragError as exc:
                    summary.failed[local.path] = exc.message
                else:
                    (summary.updated if local.path in remote else summary.added).append(local.path)
                    uploaded[record["file_id"]] = local.path
                    stored.append(local.path)
                bar.update(1)
        if args.delete:
            on_disk = {local.path for local in locals_}
            for path, record in sorted(remote.items()):
                if path not in on_disk:
                    collection.delete(record["file_id"])
                    summary.removed.append(path)
        if args.no_wait:
            summary.waiting = sorted(uploaded.values())
        else:
            _wait(collection, uploaded, summary, args.timeout * max(1, len(uploaded)))
    except requests.RequestException as exc:
        missing = [local.path for local in plan if local.path not in stored]
        print(
            f"Error: the server at {args.base_url} stopped answering ({type(exc).__name__}). "
            f"Stored before it did: {len(stored)} file(s){_listed(stored)}; not stored: "
            f"{len(missing)}{_listed(missing)}. Run the same command again to finish: files "
            "already stored are skipped.",
            file=sys.stderr,
        )
        return 1
    except EdgeragError as exc:
        print(f"Error ({exc.status_code}): {exc.message}", file=sys.stderr)
        return 1
    except AddError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    finally:
        client.close()
    for line in summary.lines(time.monotonic() - started):
        print(line)
    return 1 if summary.failed else 0


def _listed(paths: Sequence[str], most: int = 10) -> str:
    if not paths:
        return ""
    shown = ", ".join(paths[:most])
    return f" ({shown}{', …' if len(paths) > most else ''})"
