"""A served app with scripted models (fast and deterministic) for the API
conformance run: `python -m tests.conformance_server PORT DATA_DIR`."""

from __future__ import annotations

import sys
from pathlib import Path

from flask import Flask

from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.services import assemble
from flask_app.settings import Settings
from flask_app.store import Store


def conformance_app(data_dir: Path) -> Flask:
    settings = Settings.load({"data_dir": data_dir}, {})
    services = assemble(
        settings,
        store=Store(settings.data_dir),
        llm=LLM(ScriptedBackend("A short answer."), max_waiters=settings.queue_size, timeout=30),
        embedder=HashEmbedder(dim=384),
    )
    return create_app(settings, services)


if __name__ == "__main__":
    from flask_app.api.http.waitress_server import serve

    port, data_dir = int(sys.argv[1]), Path(sys.argv[2])
    serve(conformance_app(data_dir), host="127.0.0.1", port=port, threads=4, channel_timeout=30)
