"""The store the surface tests run on: one process (`Store`, the default) or
a 2-node local Ray cluster (`ClusterStore`, with `pytest --store cluster`).

The cluster is started once per session on 127.0.0.1 by
`ray.cluster_utils.Cluster` and stopped by its own handle (never `ray stop`,
which would stop every Ray process on the host); after each test every
collection on its shards is dropped and the records actor ended, so tests see
an empty store and catalog as they would with a fresh data directory.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

from flask_app.inference.embed import Embedder
from flask_app.inference.llm import LLM
from flask_app.rag.verifier import Gate
from flask_app.services import Services, assemble
from flask_app.settings import Settings
from flask_app.store import Store
from flask_app.store.protocols import CollectionStore

SHARDS = 2
_kind = "local"
_cluster: Any = None  # ray.cluster_utils.Cluster, started on first use
_opened: list[Any] = []


def use(kind: str) -> None:
    global _kind
    _kind = kind


def kind() -> str:
    return _kind


def local_cluster(nodes: int = 2, object_store_mb: int = 80) -> Any:
    """A Ray cluster of `nodes` nodes on this machine, node i offering `edgerag_node_i`."""
    from ray.cluster_utils import Cluster

    small: dict[str, Any] = {"num_cpus": 1, "object_store_memory": object_store_mb * 1024 * 1024}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            **small,
            "resources": {"edgerag_node_0": 1},
            "include_dashboard": False,
        },
    )
    for i in range(1, nodes):
        cluster.add_node(**small, resources={f"edgerag_node_{i}": 1})
    cluster.wait_for_nodes()
    return cluster


def cluster_address() -> str:
    global _cluster
    if _cluster is None:
        _cluster = local_cluster()
    address: str = _cluster.address
    return address


def open_store(data_dir: Path) -> CollectionStore:
    if _kind == "local":
        return Store(data_dir)
    from flask_app.cluster.store import ClusterStore

    store = ClusterStore.connect(cluster_address(), SHARDS, data_dir, timeout=60)
    _opened.append(store)
    return store


def services(
    settings: Settings, llm: LLM | None, embedder: Embedder | None, *, gate: Gate | None = None
) -> Services:
    """A server's services on the store under test; on a cluster its records
    (catalog, memory, jobs) are the cluster's too."""
    data_dir = settings.data_dir
    store = open_store(data_dir)
    if _kind == "local":
        return assemble(settings, store, llm, embedder, gate=gate)
    from flask_app.cluster.records import ClusterRecords

    records = ClusterRecords.connect(records_dir(data_dir), timeout=60)
    return assemble(settings, store, llm, embedder, gate=gate, records=records)


def records_dir(data_dir: Path) -> Path:
    """Where `services(data_dir, …)` keeps its records' SQLite files."""
    return data_dir if _kind == "local" else data_dir.resolve() / "records"


def wipe() -> None:
    """Drop every collection on the shards, end the records actor (the next
    test starts one in its own directory) and release the fronts' directories."""
    import ray

    from flask_app.cluster.records import ACTOR_NAME
    from flask_app.cluster.store import RAY_NAMESPACE

    if ray.is_initialized() and ACTOR_NAME in ray.util.list_named_actors():
        ray.kill(ray.get_actor(ACTOR_NAME, namespace=RAY_NAMESPACE), no_restart=True)

    while _opened:
        store = _opened.pop()
        for where in store.shards.where():
            shard = store.shards.actors[where["shard"]]
            root = Path(where["directory"])
            for collection in root.glob("*/*"):
                if collection.is_dir() and not collection.parent.name.startswith("."):
                    ray.get(shard.drop.remote(collection.parent.name, collection.name))
        store.close()


def stop() -> None:
    global _cluster
    if _cluster is None:
        return
    import ray

    ray.shutdown()
    logging.getLogger("ray").setLevel(logging.ERROR)
    _cluster.shutdown()
    _cluster = None


def deny_commit(action: int, arg1: str | None, *_: object) -> int:
    """An authorizer under which COMMIT fails (as a full disk or an I/O
    error would make it) and everything else runs."""
    if action == sqlite3.SQLITE_TRANSACTION and arg1 == "COMMIT":
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK
