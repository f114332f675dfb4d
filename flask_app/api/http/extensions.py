"""Per-app state lives in `app.extensions["edgerag"]`; these read it back."""

from __future__ import annotations

from typing import Any

from flask import Flask

from flask_app.file_collections import FileCollections
from flask_app.rag.answer import AnswerConfig
from flask_app.rag.score_mapping import cosine_floor
from flask_app.records import Records
from flask_app.services import Services
from flask_app.settings import Settings

KEY = "edgerag"


def install(app: Flask, settings: Settings, services: Services) -> None:
    app.extensions[KEY] = {"settings": settings, "services": services}


def services_of(app: Flask) -> Services:
    services: Services = app.extensions[KEY]["services"]
    return services


def collections_of(app: Flask) -> FileCollections:
    """The app's file collections (every surface shares them)."""
    return services_of(app).collections


def records_of(app: Flask) -> Records:
    """Where the app keeps its catalog, memory and jobs."""
    return services_of(app).records


def settings_of(app: Flask) -> Settings:
    settings: Settings = app.extensions[KEY]["settings"]
    return settings


def answer_config_of(app: Flask) -> AnswerConfig:
    """The answer pipeline's part of the app's settings."""
    settings = settings_of(app)
    calibration = settings.calibration()
    gate = services_of(app).gate
    return AnswerConfig(
        verifier=gate.verifier,
        threshold=gate.threshold,
        max_tokens=settings.max_tokens,
        context_tokens=settings.context_tokens,
        candidates=settings.answer_candidates,
        refusal_probability=calibration.refusal_probability,
        evidence_alone_words=calibration.evidence_alone_words,
        min_cosine=cosine_floor(settings.answer_min_score, settings.score_mapping),
    )


def gate_of(app: Flask) -> dict[str, Any]:
    """Which gate checks answers, as /health and /info show it."""
    described = services_of(app).gate.describe()
    if described["kind"] == "unverified":
        described["refusal_probability"] = settings_of(app).calibration().refusal_probability
    return described
