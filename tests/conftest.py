"""Shared fixtures: settings in a temp dir, fake models, the real default models."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from flask_app.app import create_app
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.services import Services
from flask_app.settings import Settings
from tests import stores


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store",
        choices=("local", "cluster"),
        default="local",
        help="run the surface tests on one process's store or on a 2-node local Ray cluster",
    )


def pytest_configure(config: pytest.Config) -> None:
    stores.use(config.getoption("--store"))


def pytest_unconfigure(config: pytest.Config) -> None:
    stores.stop()


@pytest.fixture(autouse=True)
def _empty_shards() -> Iterator[None]:
    """With --store cluster, every test starts on empty shards."""
    yield
    if stores.kind() == "cluster":
        stores.wipe()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.load({"data_dir": tmp_path / "data"}, {})


@pytest.fixture
def fake_services(settings: Settings) -> Services:
    return stores.services(
        settings, LLM(ScriptedBackend(), max_waiters=2, timeout=10.0), HashEmbedder()
    )


@pytest.fixture
def app(settings: Settings, fake_services: Services) -> Flask:
    return create_app(settings, fake_services)


@pytest.fixture
def client(app: Flask) -> Iterator[FlaskClient]:
    with app.test_client() as c:
        yield c


@pytest.fixture(scope="session")
def real_settings() -> Settings:
    """Settings pointing at the pulled default models; fails (never skips) without them."""
    settings = Settings.load({}, os.environ)
    missing = [p for p in (settings.llm_path(), settings.embed_path()) if not p.is_file()]
    if missing:
        pytest.fail(f"default models missing ({', '.join(map(str, missing))}); run `edgerag pull`")
    return settings
