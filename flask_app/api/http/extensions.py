"""Per-app state lives in `app.extensions["edgerag"]`; these read it back."""

from __future__ import annotations

from flask import Flask

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
