"""The house's rules, checked: files and classes of a size one can read,
errors told apart by their code rather than their class, and benchmark
results in git only where a page cites them."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flask_app"
MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 250


def python_files(under: Path) -> list[Path]:
    return sorted(p for p in under.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_over_450_lines_and_no_class_over_250() -> None:
    too_long = []
    for path in python_files(PACKAGE):
        source = path.read_text()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}: class {node.name}, {lines} lines")
    assert too_long == []


def _error_class_names() -> set[str]:
    """Classes named like errors (…Error, …Exception) anywhere in flask_app."""
    names = set()
    for path in python_files(PACKAGE):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Exception")):
                names.add(node.name)
    return names - {"ServiceError"}


def test_the_surfaces_tell_errors_apart_by_code_not_by_class() -> None:
    """No `isinstance(x, SomeError)` under flask_app/api (telling a
    ServiceError from anything else is the one allowed)."""
    errors = _error_class_names()
    found = []
    for path in python_files(PACKAGE / "api"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
            ):
                classes = node.args[1]
                named = [classes] if not isinstance(classes, ast.Tuple) else list(classes.elts)
                for cls in named:
                    name = cls.attr if isinstance(cls, ast.Attribute) else getattr(cls, "id", "")
                    if name in errors:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert found == []


def test_committed_results_are_few_small_and_cited() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "benches/results"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    pages = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    uncited = [f for f in tracked if Path(f).name not in pages]
    assert uncited == []
    assert sum((ROOT / f).stat().st_size for f in tracked) <= 2 << 20


def test_no_test_imports_a_benchmark_that_no_page_runs() -> None:
    """Tests may import the benchmarks the docs cite (they check their
    helpers), never a one-off experiment."""
    pages = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    imported = set()
    for path in python_files(ROOT / "tests"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benches."):
                imported.add(node.module or "")
    uncited = sorted(
        m for m in imported if m.replace(".", "/") + ".py" not in pages and m.count(".") >= 2
    )
    assert uncited == []


def test_the_answer_quality_page_says_what_is_in_300_lines() -> None:
    """History lives in git; the page holds how answers are made, where each
    preset stands and its limits."""
    assert len((ROOT / "docs" / "answer-quality.md").read_text().splitlines()) <= 300
