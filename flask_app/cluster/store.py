"""The store of a server joined to a Ray cluster: the same collections as
`Store`, each one split over the cluster's shard actors.

Shard actors are named (`shard-0` … in the Ray namespace `edgerag`) and
detached: every front serving the cluster reaches the same ones, and they
outlive a front's restart. Shard i runs on the node advertising the Ray
resource `edgerag_node_<i mod nodes>` (`edgerag cluster` starts nodes with
them), so a restarted shard comes back where its directory is; Ray restarts
a killed shard and retries the calls it had not answered.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import weakref
from pathlib import Path
from typing import Any

import ray
import ray.exceptions

from flask_app.cluster import actor_call
from flask_app.cluster.shard import Shard
from flask_app.cluster.sharded import ShardedCollection
from flask_app.cluster.shards import Shards
from flask_app.errors import Kind
from flask_app.store import Store, StoreError
from flask_app.store.store import lock_exclusively

_log = logging.getLogger("edgerag.cluster")

RAY_NAMESPACE = "edgerag"
NODE_RESOURCE = re.compile(r"^edgerag_node_(\d+)$")
# concurrent calls one shard runs (searches run in parallel inside simcore)
SHARD_CONCURRENCY = 8


class ClusterUnusable(StoreError):
    """The cluster cannot hold the shards as asked."""

    kind = Kind.UNAVAILABLE


def _check_reachable(address: str) -> None:
    """Fail at once on a HOST:PORT nobody listens on (ray.init would retry
    for minutes)."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5):
            return
    except (OSError, ValueError) as exc:
        raise ClusterUnusable(
            f"no Ray cluster answers at {address} ({exc}): start one with "
            "`edgerag cluster`, or give the head's HOST:PORT"
        ) from None


def node_numbers(*, alive_only: bool = False) -> list[int]:
    """The numbers of the cluster's edgerag nodes (by default alive or not: a
    shard waits for its own node rather than moving away from its data)."""
    seen = set()
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if alive_only and not node.get("Alive"):
            continue
        for resource in node.get("Resources", {}):
            if m := NODE_RESOURCE.match(resource):
                seen.add(int(m.group(1)))
    return sorted(seen)


def node_cpus() -> dict[int, float]:
    """The Ray CPUs each edgerag node offers."""
    out = {}
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        for resource in node.get("Resources", {}):
            if m := NODE_RESOURCE.match(resource):
                out[int(m.group(1))] = float(node["Resources"].get("CPU", 1))
    return out


def detached_on(node: int, name: str, **options: Any) -> dict[str, Any]:
    """Ray options of the named, detached actor `name` on edgerag node
    `node`, restarted there when its process dies (`options` add or override)."""
    return {
        "name": name,
        "namespace": RAY_NAMESPACE,
        "lifetime": "detached",
        "get_if_exists": True,
        "max_restarts": -1,
        "resources": {f"edgerag_node_{node}": 0.001},
        **options,
    }


def shard_actors(count: int, directory: Path, *, search_threads: int | None = None) -> list[Any]:
    """The cluster's `count` shard actors, started unless already running."""
    nodes = node_numbers()
    if not nodes:
        raise ClusterUnusable(
            "no node of this Ray cluster offers edgerag shards: start nodes with "
            "`edgerag cluster`, or give each `ray start` --resources "
            "'{\"edgerag_node_N\": 1}' (N = 0, 1, …)"
        )
    running = {n for n in ray.util.list_named_actors() if n.startswith("shard-")}
    if running and running != {f"shard-{i}" for i in range(count)}:
        # items are routed by hash modulo the count: another count misroutes them
        raise ClusterUnusable(
            f"the cluster runs {len(running)} shards ({', '.join(sorted(running))}); "
            f"serve it with --shards {len(running)}"
        )
    remote = ray.remote(Shard)
    actors = []
    for i in range(count):
        options = detached_on(
            nodes[i % len(nodes)],
            f"shard-{i}",
            max_task_retries=-1,
            max_concurrency=SHARD_CONCURRENCY,
            num_cpus=0,
        )
        where = str(directory / f"shard-{i}")
        actors.append(remote.options(**options).remote(where, i, count, search_threads))
    return actors


class ClusterStore:
    """Collections split over the cluster's shards; the same methods as `Store`."""

    EDGE_NAMESPACE = Store.EDGE_NAMESPACE
    EDGE_COLLECTION = Store.EDGE_COLLECTION

    def __init__(self, shards: Shards, data_dir: Path, *, edge_index: str = "") -> None:
        self.shards = shards
        self.data_dir = data_dir  # held locked: one server per data directory
        self.edge_index = edge_index
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = lock_exclusively(data_dir / ".lock")
        self._release = weakref.finalize(self, os.close, fd)
        self._collections: dict[tuple[str, str], ShardedCollection] = {}
        self._lock = threading.Lock()

    @classmethod
    def connect(
        cls,
        address: str,
        shards: int,
        data_dir: Path,
        *,
        timeout: float,
        search_threads: int | None = None,
        edge_index: str = "",
    ) -> ClusterStore:
        """Join the cluster at `address` and reach (or start) its shards;
        shard i keeps its files in `data_dir/shards/shard-i` on its node."""
        if not ray.is_initialized():
            _check_reachable(address)
            ray.init(
                address=address,
                namespace=RAY_NAMESPACE,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        actors = shard_actors(shards, data_dir.resolve() / "shards", search_threads=search_threads)
        held = Shards(actors, timeout)
        layouts = held.where(timeout=max(timeout, 120.0))  # new shards start their processes
        for n, layout in enumerate(layouts):
            if "error" in layout:
                raise ClusterUnusable(f"shard {n} did not start: {layout['error']}")
            if layout["shards"] != shards:
                raise ClusterUnusable(
                    f"the cluster's shards were started as {layout['shards']}; "
                    f"serve it with --shards {layout['shards']}"
                )
        _log.info("joined the Ray cluster at %s: %d shards", address, shards)
        return cls(held, data_dir, edge_index=edge_index)

    def close(self) -> None:
        """Release this front's data directory; the shards serve on."""
        self._release()

    def collection(self, namespace: str, name: str) -> ShardedCollection:
        with self._lock:
            key = (namespace, name)
            if key not in self._collections:
                self._collections[key] = ShardedCollection(self.shards, namespace, name)
            return self._collections[key]

    def edge(self) -> ShardedCollection:
        edge = self.collection(self.EDGE_NAMESPACE, self.EDGE_COLLECTION)
        if self.edge_index and edge.index_kind != self.edge_index:
            edge.set_index(self.edge_index)
        return edge

    def drop(self, namespace: str, name: str) -> None:
        self.collection(namespace, name)._all(Shard.drop)

    def index_kind(self, namespace: str, name: str) -> str:
        return self.collection(namespace, name).index_kind

    def failures(self) -> dict[str, str]:
        """Shards that do not answer ("shard-N" → why), and collections a shard
        could not open ("namespace/name" → the shard and why)."""
        out = {f"shard-{n}": why for n, why in self.shards.down().items()}
        for n, actor in enumerate(self.shards.actors):
            if f"shard-{n}" in out:
                continue
            try:
                found = ray.get(
                    actor_call.call(actor, Shard.failures), timeout=min(self.shards.timeout, 5.0)
                )
            except ray.exceptions.RayError as exc:
                why = f"does not answer ({type(exc).__name__}): restarting, or its node is down"
                self.shards.mark_down(n, why)
                out[f"shard-{n}"] = why
                continue
            for key, reason in found.items():
                out[key] = f"shard {n}: {reason}"
        return out
