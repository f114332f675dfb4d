"""Collections split over a 2-node local Ray cluster answer as one process's
store does: the same search results on the evaluation sets' passages, pages,
filters and errors; a shard killed under load loses no acknowledged write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from benches.quality import eval_sets
from flask_app.cluster.sharded import ShardedCollection, shard_of
from flask_app.cluster.store import ClusterStore, ClusterUnusable
from flask_app.inference.fakes import HashEmbedder
from flask_app.rag.retrieval import hybrid, lexical_words
from flask_app.store import CollectionUnavailable, ConflictError, Store, VectorRejected
from tests import stores
from tests.http_client import free_port

SETS = ["own", "town-notices", "python-reference"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterStore]:
    front = tmp_path_factory.mktemp("front")
    store = ClusterStore.connect(stores.cluster_address(), stores.SHARDS, front, timeout=60)
    yield store
    store.close()


@pytest.fixture
def pair(
    cluster: ClusterStore, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[ShardedCollection, Store]]:
    """A sharded collection and one process's store, each to be given the same writes."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    one = Store(tmp_path / "single")
    yield cluster.collection("tests", name), one
    cluster.drop("tests", name)
    one.close()


Pair = tuple[ShardedCollection, Store]


def load_both(
    pair: tuple[ShardedCollection, Store], set_name: str
) -> tuple[list[str], HashEmbedder]:
    sharded, one = pair
    embedder = HashEmbedder()
    passages = eval_sets.load(set_name).passages()
    ids = [p["id"] for p in passages]
    texts = [p["text"] for p in passages]
    vectors = embedder.embed(texts)
    metadata = [{"half": n % 2} for n in range(len(ids))]
    for target in (sharded, one.collection("tests", "c")):
        target.upsert(ids, vectors, texts, metadata, mode="text", embedding_model="hash")
    return ids, embedder


def test_items_spread_over_both_shards_by_id() -> None:
    ids = [f"item-{n}" for n in range(1000)]
    counts = np.bincount([shard_of(i, 2) for i in ids], minlength=2)
    assert min(counts) > 400  # a stable hash, not one shard for everything
    assert shard_of("item-7", 2) == shard_of("item-7", 2)


@pytest.mark.parametrize("set_name", SETS)
def test_dense_search_equals_one_node_on_the_evaluation_sets(
    pair: tuple[ShardedCollection, Store], set_name: str
) -> None:
    ids, embedder = load_both(pair, set_name)
    sharded, one = pair[0], pair[1].collection("tests", "c")
    assert len(sharded) == len(one) == len(ids)
    some = set(ids[::3])
    for question in eval_sets.load(set_name).questions:
        q = embedder.embed([question["q"]])[0]
        for k in (1, 5, 30):
            assert sharded.search(q, k) == one.search(q, k)
        assert sharded.search(q, 5, metadata={"half": 1}) == one.search(q, 5, metadata={"half": 1})
        assert sharded.search(q, 5, only=some) == one.search(q, 5, only=some)


@pytest.mark.parametrize("set_name", SETS)
def test_bm25_and_hybrid_retrieval_equal_one_node_on_the_evaluation_sets(
    pair: Pair, set_name: str
) -> None:
    """BM25 over shards scores with the whole collection's statistics."""
    ids, embedder = load_both(pair, set_name)
    sharded, one = pair[0], pair[1].collection("tests", "c")
    some = set(ids[::3])
    for question in eval_sets.load(set_name).questions:
        words = lexical_words(question["q"])
        assert sharded.lexical_search(words, 30) == one.lexical_search(words, 30)
        for where in ({"metadata": {"half": 0}}, {"only": some}):
            assert sharded.lexical_search(words, 5, **where) == one.lexical_search(
                words, 5, **where
            )
        q = embedder.embed([question["q"]])[0]
        assert hybrid(sharded, q, question["q"], 5) == hybrid(one, q, question["q"], 5)


@pytest.mark.parametrize("kind", ["int8", "binary"])
@pytest.mark.parametrize("set_name", ["python-reference", "town-notices"])
def test_int8_and_binary_search_over_shards_equal_one_node(
    pair: tuple[ShardedCollection, Store], kind: str, set_name: str
) -> None:
    """The shards' candidates merged as one index picks them: its best
    k × oversample by the approximate score, then the best k by the exact one."""
    ids, embedder = load_both(pair, set_name)
    sharded, one = pair[0], pair[1].collection("tests", "c")
    sharded.set_index(kind)
    one.set_index(kind)
    assert sharded.index_kind == kind and sharded.info().index == kind
    allowed = set(ids[::3])
    for question in eval_sets.load(set_name).questions:
        q = embedder.embed([question["q"]])[0]
        for k in (1, 5, 10):
            assert sharded.search(q, k) == one.search(q, k), (question["q"], k)
        half = {"half": 1}
        assert sharded.search(q, 5, metadata=half) == one.search(q, 5, metadata=half)
        assert sharded.search(q, 5, only=allowed) == one.search(q, 5, only=allowed)


@pytest.mark.parametrize("kind", ["f32", "int8"])
def test_ties_over_shards_equal_one_node(pair: tuple[ShardedCollection, Store], kind: str) -> None:
    """Exact duplicates uploaded out of id order among random vectors: equal
    scores are ordered by id, in one process and over shards. (Binary indexes
    cut their candidates in row order: docs/cluster.md.)"""
    sharded, one = pair[0], pair[1].collection("tests", "c")
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((3000, 64)).astype(np.float32)
    vectors[2000:2040] = vectors[0]  # 41 copies of one vector
    ids = [f"r{n:04d}" for n in range(3000)][::-1]  # written in reverse id order
    for target in (sharded, one):
        target.upsert(ids, vectors, [""] * 3000, [None] * 3000, mode="vector", embedding_model=None)
        target.set_index(kind)
    for n in range(40):
        q = rng.standard_normal(64).astype(np.float32) if n else vectors[0]
        for k in (1, 10, 30):
            got, want = sharded.search(q, k), one.search(q, k)
            assert got == want, (kind, n, k)
    copies = one.search(vectors[0], 5)
    assert [h.id for h in copies] == sorted(h.id for h in copies)  # the tie: by id


def test_pages_deletes_items_and_cosines_equal_one_node(
    pair: tuple[ShardedCollection, Store],
) -> None:
    ids, embedder = load_both(pair, "own")
    sharded, one = pair[0], pair[1].collection("tests", "c")
    pages, after = [], None
    while True:
        page, after = sharded.export(limit=7, after=after, with_vectors=True)
        pages += page
        if after is None:
            break
    assert pages == one.export(limit=None, after=None, with_vectors=True)[0]
    gone = [ids[0], ids[5], "no-such-id", ids[0]]
    assert sharded.delete(gone) == one.delete(gone) == (2, ["no-such-id"])
    assert sharded.items(ids[:10]) == one.items(ids[:10])
    q = embedder.embed(["opening hours"])[0]
    assert sharded.cosines(q, ids[:10]) == one.cosines(q, ids[:10])
    assert sharded.matching_ids({"half": 0}) == sorted(one.matching_ids({"half": 0}))
    with pytest.raises(ConflictError, match="dimension 8 does not match"):
        sharded.upsert(
            ["x"], np.ones((1, 8), np.float32), ["t"], [None], mode="text", embedding_model="hash"
        )


def test_a_cluster_is_served_with_the_shard_count_it_was_started_with(
    cluster: ClusterStore, tmp_path: Path
) -> None:
    assert len(cluster.shards.actors) == 2
    with pytest.raises(ClusterUnusable, match="--shards 2"):
        ClusterStore.connect(stores.cluster_address(), 3, tmp_path, timeout=10)
    with pytest.raises(ClusterUnusable, match="--shards 2"):
        ClusterStore.connect(stores.cluster_address(), 1, tmp_path, timeout=10)


def test_a_shard_killed_under_load_loses_no_acknowledged_write(
    cluster: ClusterStore, tmp_path: Path
) -> None:
    sharded = cluster.collection("tests", "killed")
    rng = np.random.default_rng(3)
    acknowledged: list[tuple[list[str], np.ndarray]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def upload() -> None:
        for batch in range(60):  # bounded: at most 60 batches, 60 s
            if stop.is_set():
                return
            ids = [f"b{batch}-{n}" for n in range(50)]
            vectors = rng.standard_normal((50, 64)).astype(np.float32)
            try:
                sharded.upsert(ids, vectors, ids, [None] * 50, mode="vector", embedding_model=None)
                acknowledged.append((ids, vectors))
            except CollectionUnavailable:
                pass  # retryable: not acknowledged
            except BaseException as exc:
                errors.append(exc)

    def search() -> None:
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                sharded.search(rng.standard_normal(64).astype(np.float32), 5)
            except CollectionUnavailable:
                pass
            except BaseException as exc:
                errors.append(exc)

    victim = cluster.shards.where()[1]["pid"]
    threads = [threading.Thread(target=upload), threading.Thread(target=search)]
    for t in threads:
        t.start()
    while len(acknowledged) < 10 and threads[0].is_alive():
        time.sleep(0.05)
    os.kill(victim, signal.SIGKILL)
    for t in threads:
        t.join(120)
    stop.set()
    assert not errors, errors
    assert cluster.shards.where()[1]["pid"] != victim  # Ray restarted it
    written = [i for ids, _ in acknowledged for i in ids]
    assert len(written) >= 500
    assert set(sharded.items(written)) == set(written)
    one = Store(tmp_path / "single").collection("tests", "killed")
    for ids, vectors in acknowledged:
        one.upsert(ids, vectors, ids, [None] * 50, mode="vector", embedding_model=None)
    for _ in range(20):
        q = rng.standard_normal(64).astype(np.float32)
        # unacknowledged batches may be on the shard that answered: compare the acknowledged
        got = [h for h in sharded.search(q, 200) if h.id in set(written)][:10]
        assert got == one.search(q, 10)
    cluster.drop("tests", "killed")


def test_a_batch_with_an_unusable_vector_is_refused_whole(pair: Pair) -> None:
    sharded = pair[0]
    ids = [f"v{n}" for n in range(40)]  # spread over both shards
    vectors = np.ones((40, 16), np.float32)
    vectors[33] = 0.0
    with pytest.raises(VectorRejected, match="vector 33"):
        sharded.upsert(ids, vectors, ids, [None] * 40, mode="vector", embedding_model=None)
    assert len(sharded) == 0


def test_serving_an_address_where_no_cluster_answers_fails_at_once(tmp_path: Path) -> None:
    port = free_port()
    args = ["serve", "--ray-address", f"127.0.0.1:{port}", "--no-llm", "--no-embedder"]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "flask_app.cli", *args, "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 30
