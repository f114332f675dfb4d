"""The web page in a real headless browser (Debian's chromium and
chromium-driver, driven by selenium with explicit paths): with an API key,
create a collection, upload a file and paste text with progress, ask, watch
the answer stream in, click a citation and read the cited span; list more
files than one API page and delete one.

EDGERAG_SCREENSHOT=path.png saves a screenshot of the final page (README).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from flask_app.app import create_app
from flask_app.inference.embed import Vectors
from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.services import assemble
from flask_app.settings import Settings
from flask_app.store import Store
from tests.http_client import serve_in_thread

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEPLOY = (
    "# Deploys\n\nDeploys are frozen on Fridays. Hotfixes need approval from the SRE on call.\n"
)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    for program in (CHROMIUM, CHROMEDRIVER):
        assert shutil.which(program), f"{program} missing: scripts/setup.sh --dev installs it"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1100,1500")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class SlowEmbedder(HashEmbedder):
    """Ingest slow enough that files are still processing while the page lists them."""

    def embed(self, texts: Sequence[str], ids: Sequence[str] | None = None) -> Vectors:
        time.sleep(0.02)
        return super().embed(texts, ids)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, ScriptedBackend]]:
    settings = Settings.load({"data_dir": tmp_path / "data", "api_keys": "ui-key"}, {})
    backend = ScriptedBackend("Deploys are frozen on Fridays, and hotfixes need SRE approval.")
    backend.token_delay = 0.05  # slow enough to see the answer arrive piece by piece
    app = create_app(
        settings,
        assemble(settings, Store(settings.data_dir), LLM(backend, timeout=30), SlowEmbedder()),
    )
    with serve_in_thread(app, threads=8) as base:
        yield base, backend


def test_upload_ask_stream_and_open_a_citation(
    browser: WebDriver, server: tuple[str, ScriptedBackend], tmp_path: Path
) -> None:
    base, backend = server
    wait = WebDriverWait(browser, 20)
    browser.get(base + "/")
    wait.until(ec.text_to_be_present_in_element((By.ID, "health-status"), "ok"))
    assert browser.find_element(By.ID, "health-llm").text == "scripted-fake"

    # without the key the API refuses, and the page says so
    browser.find_element(By.ID, "new-namespace").send_keys("ops")
    browser.find_element(By.ID, "new-collection").send_keys("runbooks")
    browser.find_element(By.ID, "create").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "message"), "API key"))

    key = browser.find_element(By.ID, "api-key")
    key.send_keys("ui-key")
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", key)
    browser.find_element(By.ID, "create").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "message"), "ready for documents"))
    assert Select(browser.find_element(By.ID, "collection")).first_selected_option.text == (
        "runbooks"
    )
    picker = Select(browser.find_element(By.ID, "namespace"))
    assert [o.text for o in picker.options] == ["moorcheh-edge store", "ops"]
    assert picker.first_selected_option.text == "ops"

    # a file through the file input, and pasted text; each reaches "ready"
    doc = tmp_path / "deploy.md"
    doc.write_text(DEPLOY)
    browser.find_element(By.ID, "file-input").send_keys(str(doc))
    browser.find_element(By.ID, "upload").click()
    browser.find_element(By.CSS_SELECTOR, "#paste summary").click()
    path = browser.find_element(By.ID, "paste-path")
    path.clear()
    path.send_keys("oncall.md")
    browser.find_element(By.ID, "paste-text").send_keys("The on-call rota changes on Mondays.")
    browser.find_element(By.ID, "paste-upload").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#files td.status.ready")) == 2)
    rows = browser.find_elements(By.CSS_SELECTOR, "#files tbody tr")
    assert sorted(r.find_element(By.CSS_SELECTOR, ".path").text for r in rows) == [
        "deploy.md",
        "oncall.md",
    ]
    for bar in browser.find_elements(By.CSS_SELECTOR, "#files progress"):
        assert bar.get_attribute("value") == bar.get_attribute("max")

    # count how often the answer box changes while the answer streams in
    browser.execute_script(
        "window.answerUpdates = 0;"
        "new MutationObserver(() => window.answerUpdates++)"
        ".observe(document.getElementById('answer'), {childList: true, subtree: true,"
        " characterData: true});"
    )
    browser.find_element(By.ID, "question").send_keys("When are deploys frozen?")
    browser.find_element(By.ID, "ask").click()
    cite = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#answer button.cite")))
    answer = browser.find_element(By.ID, "answer").text
    assert answer.startswith("Deploys are frozen on Fridays, and hotfixes need SRE approval")
    assert "[[SRC" not in answer and cite.text == "[1]"
    assert browser.execute_script("return window.answerUpdates") > 5  # piece by piece
    assert "When are deploys frozen?" in backend.prompts[-1]

    cite.click()
    wait.until(ec.visibility_of_element_located((By.ID, "span")))
    marked = browser.find_element(By.CSS_SELECTOR, "#span-text mark").text
    assert "Deploys are frozen on Fridays." in marked
    assert browser.find_element(By.ID, "span-path").text.startswith("deploy.md")
    sources = browser.find_elements(By.CSS_SELECTOR, "#sources li")
    assert sources and "deploy.md" in sources[0].text

    shot = os.environ.get("EDGERAG_SCREENSHOT")
    if shot:
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(shot)


def test_the_page_and_its_files_need_no_key(server: tuple[str, ScriptedBackend]) -> None:
    import requests

    base, _ = server
    page = requests.get(base + "/", timeout=10)
    assert page.status_code == 200 and "edgerag" in page.text
    for asset in ("/ui/app.js", "/ui/style.css"):
        assert requests.get(base + asset, timeout=10).status_code == 200
    assert requests.get(base + "/namespaces/x/collections", timeout=10).status_code == 401


def listed_files(collection_url: str, auth: dict[str, str]) -> list[dict[str, Any]]:
    import requests

    files: list[dict[str, Any]] = []
    token = None
    while True:
        params = {"page_size": "100", **({"page_token": token} if token else {})}
        page = requests.get(f"{collection_url}/files", params=params, headers=auth, timeout=10)
        files += page.json()["files"]
        if not (token := page.json()["next_page_token"]):
            return files


def test_every_file_is_listed_and_one_can_be_deleted(
    server: tuple[str, ScriptedBackend], browser: WebDriver
) -> None:
    """More files than one page of the API (100) are all listed; Delete
    removes a file after the browser's confirmation, and its message is not
    overwritten by files that finish processing (only uploads from this page
    announce that they are ready)."""
    import requests

    base, _ = server
    auth = {"Authorization": "Bearer ui-key"}
    coll = f"{base}/namespaces/default/collections/many"
    assert requests.put(f"{base}/namespaces/default", headers=auth, timeout=10).ok
    assert requests.put(coll, headers=auth, timeout=10).ok
    for i in range(130):
        body = {"path": f"notes/{i:03}.md", "content_type": "text/markdown", "text": f"Note {i}."}
        assert requests.post(f"{coll}/files", json=body, headers=auth, timeout=10).ok

    browser.get(base + "/")
    wait = WebDriverWait(browser, 30)
    key = browser.find_element(By.ID, "api-key")
    key.send_keys("ui-key")
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", key)
    browser.find_element(By.ID, "refresh").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "files-count"), "130 files"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#files tbody tr")) == 130

    def delete_first_row(driver: WebDriver) -> str | bool:
        # the page re-renders the table while files are processing: a row may
        # go stale between finding it and clicking; then try the new one
        try:
            row = driver.find_element(By.CSS_SELECTOR, "#files tbody tr")
            path = row.find_element(By.CSS_SELECTOR, ".path").text
            row.find_element(By.CSS_SELECTOR, "button.delete").click()
        except StaleElementReferenceException:
            return False
        return path

    path = wait.until(delete_first_row)
    wait.until(ec.alert_is_present()).accept()
    wait.until(ec.text_to_be_present_in_element((By.ID, "files-count"), "129 files"))
    wait.until(ec.text_to_be_present_in_element((By.ID, "message"), f"{path} was deleted."))

    def listed_paths(driver: WebDriver) -> list[str] | bool:
        try:
            return [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#files .path")]
        except StaleElementReferenceException:
            return False

    listed = wait.until(listed_paths)
    assert isinstance(listed, list) and path not in listed and len(listed) == 129
    remaining = listed_files(coll, auth)
    assert path not in [f["path"] for f in remaining] and len(remaining) == 129

    deadline = time.monotonic() + 60
    while any(f["status"] == "processing" for f in listed_files(coll, auth)):
        assert time.monotonic() < deadline, "ingest of 130 one-line files took over 60 s"
        time.sleep(0.2)
    time.sleep(1.0)  # the page polls processing files every 0.3 s
    assert browser.find_element(By.ID, "message").text == f"{path} was deleted."


TOUR = {
    "documents": [
        {
            "id": "hours",
            "text": "The Calder City Museum is open Tuesday to Sunday from 10:00 to 18:00 "
            "and closed on Mondays.",
        },
        {"id": "wifi", "text": "The office guest Wi-Fi network is called Calder-Guest."},
    ]
}


def test_the_store_the_cli_tour_filled_is_shown_and_answers(
    browser: WebDriver, tmp_path: Path
) -> None:
    """A newcomer who followed the README tour (the CLI fills the
    moorcheh-edge store) opens `/`: the page shows that store, not an empty
    namespace, and answers a question about it with its sources."""
    import json
    import subprocess
    import sys

    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    backend = ScriptedBackend("The museum is closed on Mondays.")
    backend.token_delay = 0.05
    app = create_app(
        settings,
        assemble(settings, Store(settings.data_dir), LLM(backend, timeout=30), HashEmbedder()),
    )
    tour = tmp_path / "tour.json"
    tour.write_text(json.dumps(TOUR))
    with serve_in_thread(app) as base:
        subprocess.run(
            [
                sys.executable,
                *("-m", "flask_app.cli", "upload-documents"),
                *("--documents-file", str(tour), "--base-url", base),
            ],
            check=True,
            timeout=60,
        )
        # an Engine namespace exists too: the store is still what opens
        import requests

        assert requests.put(f"{base}/namespaces/ops", timeout=10).ok
        browser.get(base + "/")
        wait = WebDriverWait(browser, 20)
        wait.until(ec.text_to_be_present_in_element((By.ID, "files-count"), "2 items"))
        picker = Select(browser.find_element(By.ID, "namespace"))
        assert [o.text for o in picker.options] == ["moorcheh-edge store", "ops"]
        assert picker.first_selected_option.text == "moorcheh-edge store"
        assert not browser.find_element(By.ID, "collection-label").is_displayed()
        rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#files .path")]
        assert sorted(r.split(":")[0] for r in rows) == ["hours", "wifi"]

        browser.find_element(By.ID, "question").send_keys("Which day is the museum shut?")
        browser.find_element(By.ID, "ask").click()
        wait.until(
            ec.text_to_be_present_in_element((By.ID, "answer"), "The museum is closed on Mondays.")
        )
        sources = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#sources li")]
        assert sources and any(s.startswith("hours (") for s in sources), sources
        assert "Which day is the museum shut?" in backend.prompts[-1]
        assert "closed on Mondays" in backend.prompts[-1]  # the stored passage reached the model


def test_the_page_names_the_verifier_and_its_threshold(browser: WebDriver, tmp_path: Path) -> None:
    """The header's "answer gate" says the verifier checks answers, at which
    threshold (three figures), with how many sampled answers and its floor."""
    from flask_app.rag.verifier import Gate
    from tests.verifiers import scripted_verifier

    settings = Settings.load({"data_dir": tmp_path / "data"}, {})
    app = create_app(
        settings,
        assemble(
            settings,
            Store(settings.data_dir),
            LLM(ScriptedBackend("Closed on Mondays."), timeout=30),
            HashEmbedder(),
            gate=Gate(scripted_verifier(samples=3, skip_below=0.05), threshold=0.42317),
        ),
    )
    with serve_in_thread(app) as base:
        browser.get(base + "/")
        wait = WebDriverWait(browser, 20)
        wait.until(ec.text_to_be_present_in_element((By.ID, "health-gate"), "verified"))
        label = browser.find_element(By.ID, "health-gate").text
        assert label == "verified ≥ 0.423, 3 samples, floor 0.05"
