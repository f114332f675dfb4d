"""The README and the docs pages cannot drift from the server: every fenced
block marked `bash tested` runs, in page order, against a real `edgerag
serve` with the default models (each page in its own shell, all pages on one
server: the Lucidworks page asks the collection the Engine page made). A
`curl` that gets an HTTP error, or any failing command, fails the test; and
every block holding a `curl` or an `edgerag` client command must be marked."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from flask_app.settings import Settings
from tests.http_client import ServerFailed, start_server

ROOT = Path(__file__).resolve().parent.parent
# run in this order: the Engine page makes the collection the Lucidworks page asks
PAGES = [
    "README.md",
    "docs/moorcheh-edge.md",
    "docs/engine.md",
    "docs/lucidworks.md",
    *sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "docs").glob("*.md")
        if p.name not in ("moorcheh-edge.md", "engine.md", "lucidworks.md")
    ),
]
BLOCK = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
CLIENT_COMMAND = re.compile(
    r"(\bcurl\s|\$E\s|edgerag\s+(upload|search|answer|status|export|delete|clear-store|add|ask)\b)"
)
PRELUDE = """set -euo pipefail
curl() { command curl --fail-with-body --max-time 180 "$@"; echo; }
"""


def blocks(page: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block of `page`."""
    return [(info.strip(), body) for info, body in BLOCK.findall((ROOT / page).read_text())]


def runnable_blocks(page: str) -> list[str]:
    return [body for info, body in blocks(page) if info == "bash tested"]


def test_every_client_command_in_the_docs_is_tested() -> None:
    untested = [
        f"{page}: {body.splitlines()[0]}"
        for page in PAGES
        for info, body in blocks(page)
        if CLIENT_COMMAND.search(body) and info != "bash tested"
    ]
    assert untested == []
    assert sum(len(runnable_blocks(page)) for page in PAGES) >= 6


def test_the_readme_is_a_short_front_door() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert readme.startswith("# edgerag\n\n```bash\n./scripts/serve.sh")
    for link in re.findall(r"\]\((docs/[^)#]+)\)", readme):
        assert (ROOT / link).is_file(), link


@pytest.fixture(scope="module")
def server(real_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("docs")
    args = ["--data-dir", str(where / "data"), "--model-dir", str(real_settings.model_dir)]
    try:
        running = start_server(args, where / "server.log", timeout=180)
    except ServerFailed as exc:
        pytest.fail(str(exc))
    yield running.base
    running.stop()


@pytest.mark.real_model
@pytest.mark.parametrize("page", [p for p in PAGES if runnable_blocks(p)])
def test_the_documented_commands_run(page: str, server: str, tmp_path: Path) -> None:
    host = server.removeprefix("http://")
    script = PRELUDE + "\n".join(runnable_blocks(page))
    script = re.sub(r"(http://)?(localhost|127\.0\.0\.1):8080", host, script)
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")  # the tour's `.venv/bin/edgerag`
    (tmp_path / "docs").symlink_to(ROOT / "docs")  # the example folder `edgerag add` reads
    env = {**os.environ, "EDGERAG_BASE_URL": server}
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(result.stdout[-4000:])
    assert result.returncode == 0, (result.stdout[-6000:], result.stderr[-3000:])
