"""`edgerag serve` freezes what it made while starting before it serves, so
full collections no longer walk it (benches/serving/gc_pauses.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flask_app.api.http import waitress_server
from flask_app.cli.main import main
from flask_app.gc_tuning import freeze_startup_objects
from tests.http_client import free_port


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the test run collects as usual


def test_frozen_objects_are_no_longer_walked(unfrozen: None) -> None:
    kept = [[n] for n in range(1000)]
    assert any(o is kept for o in gc.get_objects())
    frozen = freeze_startup_objects()
    assert frozen >= 1000
    # a frozen object freed since (by another thread: pytest-xdist's I/O)
    # leaves the permanent generation; nothing else enters it
    assert frozen - 100 <= gc.get_freeze_count() <= frozen
    assert not any(o is kept for o in gc.get_objects())
    later = [[n] for n in range(10)]
    assert any(o is later for o in gc.get_objects())  # made after: collected as before


def test_serve_freezes_its_start_up_objects_before_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unfrozen: None
) -> None:
    seen: dict[str, Any] = {}

    def serve(app: Any, **options: Any) -> None:
        seen.update(frozen=gc.get_freeze_count(), app=app)

    monkeypatch.setattr(waitress_server, "serve", serve)
    port = str(free_port())
    args = ["serve", "--no-llm", "--no-embedder", "--data-dir", str(tmp_path), "--port", port]
    assert main(args) == 0
    assert seen["frozen"] > 10_000  # modules, the app, its services
    assert not any(o is seen["app"] for o in gc.get_objects())
