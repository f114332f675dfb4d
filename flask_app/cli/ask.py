"""`edgerag ask "question" --collection NAME`: an answer from a collection
of a running server (its `:answer`), with the passages it cites.

    The spare key is with the neighbour at number 12 [1].
    [1] notes/house.md#0-46
    confidence 0.91

Each citation is printed as `[n] path#start-end`: the characters of the
file the answer rests on (`:readSpans` reads them back). The confidence is
the server's probability that the answer is right (`answerable_probability`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import requests
import sseclient

from flask_app.cli.add import DEFAULT_NAMESPACE
from flask_app.client import Client, EdgeragError

MARKER = re.compile(r"\[\[(SRC:\d{4})\]\]")


def add_parser(sub: Any, base: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "ask",
        help="ask a collection a question; the answer with its citations",
        description=__doc__.split("\n\n")[0].replace("`", ""),
    )
    p.add_argument("question")
    p.add_argument("--collection", required=True, help="the collection to ask")
    p.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"its namespace (default {DEFAULT_NAMESPACE})",
    )
    p.add_argument(
        "--effort",
        default="medium",
        choices=["low", "medium", "high"],
        help="retrieval depth (default medium)",
    )
    p.add_argument(
        "--filter", help="a metadata filter, e.g. \"metadata.team = 'sre'\" (default: none)"
    )
    p.add_argument(
        "--stream", action="store_true", help="print the answer as it is written (default: off)"
    )
    base(p)


def numbered(body: dict[str, Any]) -> tuple[str, list[str]]:
    """The answer with its markers as [n], and a `[n] path#start-end` line per citation."""
    by_ref = {s["ref"]: s for s in body.get("sources", [])}
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        ref = match.group(1)
        if ref not in order:
            order.append(ref)
        return f"[{order.index(ref) + 1}]"

    text = MARKER.sub(number, body["answer"])
    lines = []
    for n, ref in enumerate(order, 1):
        source = by_ref.get(ref)
        if source is not None:
            span = source["span"]
            lines.append(f"[{n}] {source['path']}#{span['start']}-{span['end']}")
    return text, lines


def _plain(text: str) -> str:
    return " ".join(re.sub(r"\[\d+\]", "", text).split())


def _events(response: requests.Response) -> Iterator[tuple[str, Any]]:
    for event in sseclient.SSEClient(response.iter_content(chunk_size=None)).events():
        yield event.event, json.loads(event.data)


def run(args: argparse.Namespace) -> int:
    path = f"/namespaces/{args.namespace}/collections/{args.collection}:answer"
    body: dict[str, Any] = {"query": args.question, "effort": args.effort}
    if args.filter:
        body["filter"] = args.filter
    client = Client(args.base_url, timeout=args.timeout)
    try:
        if args.stream:
            done = _stream(client, path, body)
        else:
            done = client.request("POST", path, body)
            print(numbered(done)[0])
    except EdgeragError as exc:
        print(f"Error ({exc.status_code}): {exc.message}", file=sys.stderr)
        return 1
    except requests.RequestException as exc:
        print(f"Error: {args.base_url}: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    for line in numbered(done)[1]:
        print(line)
    confidence = done.get("answerable_probability")
    if confidence is not None:
        print(f"confidence {confidence:.2f}")
    return 0


def _stream(client: Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """Print the deltas as they come (markers as the model writes them);
    the final body, whose answer is printed again only if it differs."""
    response = client.session.post(
        client.base_url + path,
        json=body,
        headers={"Accept": "text/event-stream"},
        stream=True,
        timeout=client.timeout,
    )
    Client.raise_for(response)
    written = ""
    try:
        for event, data in _events(response):
            if event == "delta":
                written += data["text"]
                print(MARKER.sub("", data["text"]), end="", flush=True)
            elif event == "error":
                print(flush=True)
                error = data.get("error", {})
                raise EdgeragError(error.get("message", "stream error"), 200, data)
            elif event == "done":
                print(flush=True)
                final, _ = numbered(data)
                if _plain(final) != _plain(MARKER.sub("", written)):
                    print(final)  # the server's final words differ (a decline, a cut)
                return dict(data)
    finally:
        response.close()
    raise EdgeragError("the stream ended without an answer", 200)
