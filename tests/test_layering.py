"""The surfaces are thin adapters over the core: no `api/<surface>/` package
imports another surface's, and the shared HTTP helpers (`api/http/`) and the
core import no surface at all."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "flask_app"
SURFACES = sorted(
    p.name for p in (ROOT / "api").iterdir() if p.is_dir() and p.name not in ("http", "__pycache__")
)


def _imported_modules(source: str, package: str) -> set[str]:
    """Every module a file of `package` imports (absolute or relative, at any
    depth of the code)."""
    tree = ast.parse(source)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _surface_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["flask_app", "api"] and len(parts) > 2 and parts[2] in SURFACES:
        return parts[2]
    return None


def _crossings(name: str, source: str, own: str | None) -> list[str]:
    package = ".".join(name.removesuffix(".py").split("/")[:-1])
    return [
        f"{name} imports {module}"
        for module in sorted(_imported_modules(source, package))
        if _surface_of(module) not in (None, own)
    ]


def _violations(files: list[Path], own: str | None) -> list[str]:
    bad = []
    for path in files:
        bad += _crossings(str(path.relative_to(ROOT.parent)), path.read_text(), own)
    return bad


def test_the_four_surfaces_are_found() -> None:
    assert SURFACES == ["engine", "lucidworks", "moorcheh", "openai"]


def test_no_surface_imports_another() -> None:
    bad = []
    for surface in SURFACES:
        bad += _violations(sorted((ROOT / "api" / surface).rglob("*.py")), surface)
    assert bad == []


def test_shared_helpers_and_core_import_no_surface() -> None:
    files = [
        p
        for p in sorted(ROOT.rglob("*.py"))
        if "api" not in p.relative_to(ROOT).parts[:1]
        or p.relative_to(ROOT).parts[:2] == ("api", "http")
    ]
    files = [p for p in files if p.name != "app.py"]  # the factory installs every surface
    assert len(files) > 20
    assert _violations(files, None) == []


def test_the_walker_sees_a_crossing_import() -> None:
    """The check can fail: absolute and relative crossings are reported."""
    source = (
        "from flask_app.api.engine.answer import visible_files\n"
        "from . import errors\n"
        "def late():\n    from ..lucidworks import models\n"
    )
    assert _crossings("flask_app/api/openai/probe.py", source, "openai") == [
        "flask_app/api/openai/probe.py imports flask_app.api.engine.answer",
        "flask_app/api/openai/probe.py imports flask_app.api.engine.answer.visible_files",
        "flask_app/api/openai/probe.py imports flask_app.api.lucidworks",
        "flask_app/api/openai/probe.py imports flask_app.api.lucidworks.models",
    ]


def test_the_default_server_imports_no_ray() -> None:
    """Ray is imported only for --ray-address: start-up time and memory stay as they were."""
    import subprocess
    import sys

    code = (
        "import sys, flask_app.cli.main, flask_app.services, flask_app.app; "
        "from flask_app.services import load_services; "
        "assert not [m for m in sys.modules if m == 'ray' or m.startswith('ray.')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
