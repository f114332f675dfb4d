"""The web page at `/`: static HTML, JS and CSS shipped in the package (no
build step, no CDN), talking to the Engine and health routes with the API
key the person types in (kept in the browser's localStorage)."""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Flask, Response, send_from_directory

from flask_app.api.http.openapi import operation

STATIC = Path(__file__).parent / "static"
PREFIX = "/ui"
OPEN_PREFIXES = (PREFIX + "/",)
OPEN_PATHS = ("/",)

blueprint = Blueprint("web", __name__, static_folder=str(STATIC), static_url_path=PREFIX)


@blueprint.get("/")
@operation(
    summary="The web page (collections, uploads, cited answers)", tag="web", media_type="text/html"
)
def page() -> Response:
    return send_from_directory(STATIC, "index.html", max_age=0)


def install(app: Flask) -> None:
    app.register_blueprint(blueprint)
