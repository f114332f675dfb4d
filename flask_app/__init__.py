"""edgerag: a RAG server for edge machines.

`create_app` is re-exported lazily, so importing a submodule (the simcore
extension, the client) does not load Flask and the model runtime.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from flask_app.app import create_app

        return create_app
    raise AttributeError(f"module 'flask_app' has no attribute {name!r}")
