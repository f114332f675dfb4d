"""Per-app state lives in `app.extensions["edgerag"]`; these read it back."""

from __future__ import annotations

from flask import Flask

from flask_app.api.moorcheh.scores import cosine_floor
from flask_app.rag.answer import AnswerConfig
from flask_app.services import Services
from flask_app.settings import Settings

KEY = "edgerag"


def install(app: Flask, settings: Settings, services: Services) -> None:
    app.extensions[KEY] = {"settings": settings, "services": services}


def services_of(app: Flask) -> Services:
    services: Services = app.extensions[KEY]["services"]
    return services


def settings_of(app: Flask) -> Settings:
    settings: Settings = app.extensions[KEY]["settings"]
    return settings


def answer_config_of(app: Flask) -> AnswerConfig:
    """The answer pipeline's part of the app's settings."""
    settings = settings_of(app)
    calibration = settings.calibration()
    return AnswerConfig(
        max_tokens=settings.max_tokens,
        context_tokens=settings.context_tokens,
        candidates=settings.answer_candidates,
        refusal_probability=calibration.refusal_probability,
        judge=calibration.judge,
        min_cosine=cosine_floor(settings.answer_min_score, settings.score_mapping),
    )
