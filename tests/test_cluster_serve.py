"""`edgerag cluster` and `edgerag serve --ray-address` as a user runs them:
two nodes on this machine, two servers (fronts) on them, the README's curl
answered by both with the same passages."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from flask_app.settings import Settings
from tests.http_client import ServerFailed, free_port, start_server

pytestmark = pytest.mark.real_model

TOUR = [
    {"id": "wifi", "text": "The office guest Wi-Fi network is called Calder-Guest."},
    {
        "id": "hours",
        "text": "The Calder City Museum is open Tuesday to Sunday from 10:00 to 18:00 and "
        "closed on Mondays.",
    },
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("cluster") / "cluster.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flask_app.cli",
                "cluster",
                "--nodes",
                "2",
                "--port",
                str(port),
                "--cpus",
                "1",
                "--object-store-mb",
                "80",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "Ray cluster with 2" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(90)
    assert proc.returncode == 0, log.read_text()


def serve(cluster: str, where: Path, models: Path, *extra: str) -> Iterator[str]:
    where.mkdir(parents=True, exist_ok=True)
    args = ["--ray-address", cluster, "--shards", "2", "--data-dir", str(where / "data"), *extra]
    try:
        running = start_server([*args, "--model-dir", str(models)], where / "log", timeout=180)
    except ServerFailed as exc:
        pytest.fail(str(exc))
    yield running.base
    running.stop()


def test_two_fronts_on_a_two_node_cluster_answer_the_readme_tour(
    cluster: str, tmp_path: Path, real_settings: Settings
) -> None:
    first = serve(cluster, tmp_path / "a", real_settings.model_dir)
    base = next(first)
    r = requests.post(base + "/upload", json={"store_mode": "text", "items": TOUR}, timeout=60)
    assert r.status_code == 200, r.text
    r = requests.post(
        base + "/answer", json={"query": "What is the guest Wi-Fi network called?"}, timeout=120
    )
    assert r.status_code == 200 and "Calder-Guest" in r.json()["answer"], r.text
    health = requests.get(base + "/health", timeout=10).json()
    assert health["status"] == "ok" and health["items"] == 2, health
    question = {"query": "When is the museum closed?", "top_k": 2}
    searched = requests.post(base + "/search", json=question, timeout=30).json()["results"]
    second = serve(cluster, tmp_path / "b", real_settings.model_dir)
    other = next(second)
    assert [r["id"] for r in searched] == ["hours", "wifi"]
    assert requests.post(other + "/search", json=question, timeout=30).json()["results"] == searched
    # the fronts share their records: a namespace made through one is found through the other
    assert requests.put(base + "/namespaces/tour", timeout=30).status_code == 201
    assert requests.get(other + "/namespaces/tour", timeout=30).status_code == 200
    assert requests.delete(other + "/store", timeout=30).status_code == 200
    assert requests.get(base + "/health", timeout=10).json()["items"] == 0
    for front in (first, second):
        next(front, None)


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += children.get(current, [])
    return out


def replica_pids() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "ray::Replica"], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def test_answers_come_from_two_replicas_and_survive_one_killed(
    cluster: str, tmp_path: Path, real_settings: Settings
) -> None:
    front = serve(cluster, tmp_path, real_settings.model_dir)
    base = next(front)
    llm = requests.get(base + "/health", timeout=10).json()["llm"]
    assert llm["replicas"] == 2 and llm["generating"] == 0, llm
    r = requests.post(base + "/upload", json={"store_mode": "text", "items": TOUR}, timeout=60)
    assert r.status_code == 200, r.text
    question = {"query": "What is the guest Wi-Fi network called?"}
    answers: list[str] = []

    def ask() -> None:
        r = requests.post(base + "/answer", json=question, timeout=120)
        answers.append(r.json()["answer"] if r.status_code == 200 else f"{r.status_code}")

    pool = [threading.Thread(target=ask) for _ in range(2)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(150)
    assert len(answers) == 2 and all("Calder-Guest" in a for a in answers), answers
    pids = replica_pids()
    assert len(pids) == 2, pids
    os.kill(pids[0], signal.SIGKILL)
    statuses = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # bounded: 90 s
        r = requests.post(base + "/answer", json=question, timeout=120)
        statuses.append(r.status_code)
        assert r.status_code in (200, 503), r.text  # 503 only while a replica restarts
        if r.status_code == 503:
            assert int(r.headers["Retry-After"]) >= 1
        if statuses[-3:] == [200, 200, 200] and len(replica_pids()) == 2:
            break
        time.sleep(0.5)
    assert statuses[-3:] == [200, 200, 200], statuses
    assert len(replica_pids()) == 2  # Ray restarted the killed one
    assert requests.delete(base + "/store", timeout=30).status_code == 200
    # 40 texts: embedded by the replicas' embedders, 20 each
    notices = [
        {"id": f"n{n}", "text": f"Notice {n}: the {w} opens at {n % 12 + 1} o'clock."}
        for n, w in enumerate(["library", "pool", "bakery", "clinic"] * 10)
    ]
    r = requests.post(base + "/upload", json={"store_mode": "text", "items": notices}, timeout=120)
    assert r.status_code == 200, r.text
    for n in (0, 21, 39):
        query = {"query": notices[n]["text"], "top_k": 1}
        found = requests.post(base + "/search", json=query, timeout=30).json()["results"]
        assert found[0]["id"] == f"n{n}" and found[0]["score"] > 0.99, found
    assert requests.delete(base + "/store", timeout=30).status_code == 200
    next(front, None)


def test_a_client_that_leaves_stops_its_replica(
    cluster: str, tmp_path: Path, real_settings: Settings
) -> None:
    """One replica: a streamed answer of up to 1,000 tokens is abandoned after
    its first chunk; the next request gets the replica at once instead of
    after the abandoned answer."""
    front = serve(cluster, tmp_path, real_settings.model_dir, "--replicas", "1")
    base = next(front)
    model = requests.get(base + "/v1/models", timeout=10).json()["data"][0]["id"]
    long = {
        "model": model,
        "messages": [{"role": "user", "content": "Count from 1 to 1000, one number a line."}],
        "max_tokens": 1000,
        "temperature": 0,
        "stream": True,
    }
    response = requests.post(base + "/v1/chat/completions", json=long, stream=True, timeout=60)
    lines = response.iter_lines()
    assert any(line.startswith(b"data: {") for line in lines)  # generation has begun
    response.close()  # the client leaves
    started = time.monotonic()
    short = {**long, "stream": False, "max_tokens": 4}
    r = requests.post(base + "/v1/chat/completions", json=short, timeout=120)
    assert r.status_code == 200, r.text
    # 1,000 tokens take a minute or more here: the replica stopped within seconds
    assert time.monotonic() - started < 20
    deadline = time.monotonic() + 10
    while requests.get(base + "/health", timeout=10).json()["llm"]["generating"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    next(front, None)


def test_a_node_that_does_not_come_back_leaves_its_shards_answering_503(
    tmp_path: Path,
) -> None:
    """Node 1 (a second `edgerag cluster --join` process) is killed with its Ray
    processes: searches answer 503 naming its shard, never partial results,
    and /health says which shard is missing."""
    port = free_port()
    log = tmp_path / "nodes.log"
    edgerag = [sys.executable, "-m", "flask_app.cli", "cluster", "--object-store-mb", "80"]
    with log.open("ab") as out:
        head = subprocess.Popen(
            [*edgerag, "--nodes", "1", "--port", str(port), "--cpus", "1"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "Ray cluster with 1" not in log.read_text():
            assert head.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        with log.open("ab") as out:
            joined = subprocess.Popen(
                [*edgerag, "--join", f"127.0.0.1:{port}", "--node", "1", "--cpus", "1"],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 120
        # shard i goes to node i mod (the nodes there when the shards are first made)
        while log.read_text().count("Ray runtime started") < 2:
            assert joined.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        args = ["--ray-address", f"127.0.0.1:{port}", "--shards", "2", "--no-llm"]
        args += ["--no-embedder", "--request-timeout", "10", "--data-dir", str(tmp_path / "d")]
        deadline = time.monotonic() + 120
        while True:  # the joined node may take a few seconds to register
            try:
                running = start_server(args, tmp_path / "server.log", timeout=120)
                break
            except ServerFailed:
                assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
        base = running.base
        items = [{"id": f"v{n}", "vector": [1.0 + n] + [0.5] * 127} for n in range(20)]
        body = {"store_mode": "vector", "items": items}
        assert requests.post(base + "/upload", json=body, timeout=60).status_code == 200
        query = {"query": [1.0] * 128, "top_k": 20}
        assert len(requests.post(base + "/search", json=query, timeout=30).json()["results"]) == 20
        ray_start = subprocess.run(
            ["pgrep", "-f", f"ray start --address 127.0.0.1:{port}"],
            capture_output=True,
            text=True,
        ).stdout.split()
        assert ray_start, "the joined node's ray start process"
        doomed = [p for pid in ray_start for p in descendants(int(pid))]
        for pid in doomed:  # the node's raylet and its workers (in their own groups)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        joined.kill()
        joined.wait(30)
        for _ in range(3):
            r = requests.post(base + "/search", json=query, timeout=60)
            assert r.status_code == 503, r.text  # never a partial 200
            assert "shard" in r.text, r.text
        health = requests.get(base + "/health", timeout=30).json()
        assert health["status"] == "degraded", health
        assert any(key.startswith("shard-") for key in health["unavailable"]), health
        running.stop()
    finally:
        head.send_signal(signal.SIGINT)
        head.wait(90)
