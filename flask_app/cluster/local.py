"""`edgerag cluster`: Ray nodes for edgerag's shards, run in the foreground
and stopped (by their own process handles, never `ray stop`, which would stop
every Ray process on the host) on Ctrl-C.

Node i offers the Ray resource `edgerag_node_i`: shard s lives on node
s mod nodes and comes back there after a restart.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STOP_SECONDS = 40  # a node drains for up to 30 s on SIGTERM


def _ray() -> str:
    found = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if found is None:
        raise SystemExit(
            "Error: Ray is not installed: pip install 'edgerag[cluster]' "
            "(or scripts/setup.sh --cluster)"
        )
    return found


def _node_args(node: int, cpus: int | None, object_store_mb: int) -> list[str]:
    args = [
        "--block",
        "--disable-usage-stats",
        f"--resources={json.dumps({f'edgerag_node_{node}': 1})}",
        f"--object-store-memory={object_store_mb * 1024 * 1024}",
    ]
    return args + ([f"--num-cpus={cpus}"] if cpus is not None else [])


def _wait_for_port(host: str, port: int, child: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise SystemExit(f"Error: the Ray head exited with status {child.returncode}")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"Error: the Ray head did not listen on {host}:{port} in {timeout:.0f} s")


def _wait_for_nodes(
    address: str, count: int, children: list[subprocess.Popen[bytes]], timeout: float
) -> None:
    """Until the cluster has `count` live edgerag nodes: shards and replicas
    are spread over the nodes there when they are first made."""
    import ray

    from flask_app.cluster.store import node_numbers

    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        deadline = time.monotonic() + timeout
        while len(node_numbers(alive_only=True)) < count:
            if any(child.poll() is not None for child in children):
                raise SystemExit("Error: a Ray node exited while the cluster started")
            if time.monotonic() > deadline:
                raise SystemExit(f"Error: {count} nodes did not join in {timeout:.0f} s")
            time.sleep(0.5)
    finally:
        ray.shutdown()


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in reversed(children):
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for child in reversed(children):
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # the node's own processes too


def run(
    *,
    nodes: int,
    port: int,
    join: str | None,
    node: int,
    cpus: int | None,
    object_store_mb: int,
) -> int:
    """Start `nodes` nodes here (a head and workers), or with `join` one
    worker numbered `node` joining the head at that address; block until
    interrupted, then stop them."""
    ray = _ray()
    # Ctrl-C, and a plain kill, stop the nodes (a shell may have started this
    # in the background with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    if cpus is None and join is None:
        cpus = max(1, (os.cpu_count() or 1) // nodes)  # nodes sharing this machine share its cores
    children: list[subprocess.Popen[bytes]] = []

    def start(args: list[str]) -> subprocess.Popen[bytes]:
        child = subprocess.Popen([ray, "start", *args], start_new_session=True)
        children.append(child)
        return child

    try:
        if join is not None:
            start(["--address", join, *_node_args(node, cpus, object_store_mb)])
            print(f"edgerag node {node} joining {join}; Ctrl-C stops it", flush=True)
        else:
            head_args = ["--head", f"--port={port}", "--include-dashboard=false"]
            head = start([*head_args, *_node_args(0, cpus, object_store_mb)])
            _wait_for_port("127.0.0.1", port, head, 60)
            address = f"{socket.gethostbyname(socket.gethostname())}:{port}"
            for n in range(1, nodes):
                start(["--address", f"127.0.0.1:{port}", *_node_args(n, cpus, object_store_mb)])
            _wait_for_nodes(f"127.0.0.1:{port}", nodes, children, 120)
            print(
                f"Ray cluster with {nodes} edgerag node(s) at {address}\n"
                f"  serve it:      edgerag serve --ray-address {address} --shards {nodes}\n"
                f"  add a machine: edgerag cluster --join {address} --node {nodes}\n"
                "Ctrl-C stops the nodes started here.",
                flush=True,
            )
        while all(child.poll() is None for child in children):
            time.sleep(1)
        failed = next(c for c in children if c.poll() is not None)
        print(f"Error: a Ray node exited with status {failed.returncode}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping the Ray nodes …", flush=True)
        return 0
    finally:
        _stop(children)
