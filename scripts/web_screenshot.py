"""The README's screenshot of the web page, taken with the default models:
starts `edgerag serve` on a scratch data directory, uploads a Markdown
runbook and a two-page PDF, asks a question in headless Chromium, opens the
citation and saves docs/web-ui.png.

    .venv/bin/python scripts/web_screenshot.py   # needs `edgerag pull` and setup.sh --dev
"""

from __future__ import annotations

import base64
import subprocess
import tempfile
import time
from pathlib import Path

import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.wait import WebDriverWait

from tests.test_engine import _pdf

ROOT = Path(__file__).resolve().parent.parent
BASE = "http://127.0.0.1:8094"
KEY = "demo-key-1"
DEPLOY = (
    "# Deploy runbook\n\n## Freeze windows\n\nDeploys are frozen on Fridays and during the "
    "last week of December. Hotfixes during a freeze need approval from the SRE on call.\n\n"
    "## Rollback\n\nTo roll back, run `deployctl rollback --to <release>`; a rollback takes "
    "about four minutes."
)
HANDBOOK = [
    "The status page is updated every 30 minutes during an incident.",
    "On-call engineers hand over at 09:00 on Mondays.",
]


def upload(auth: dict[str, str]) -> None:
    requests.put(f"{BASE}/namespaces/ops", headers=auth, timeout=10).raise_for_status()
    coll = f"{BASE}/namespaces/ops/collections/runbooks"
    requests.put(coll, headers=auth, json={}, timeout=10).raise_for_status()
    files = [
        {"path": "runbooks/deploy.md", "content_type": "text/markdown", "text": DEPLOY},
        {
            "path": "handbook.pdf",
            "content_type": "application/pdf",
            "data": base64.b64encode(_pdf(HANDBOOK)).decode(),
        },
    ]
    for body in files:
        requests.post(f"{coll}/files", headers=auth, json=body, timeout=10).raise_for_status()


def shoot(path: Path) -> None:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1100,1250",
    ):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        browser.get(BASE + "/")
        wait = WebDriverWait(browser, 60)
        for field, value in (("api-key", KEY), ("namespace", "ops")):
            box = browser.find_element(By.ID, field)
            box.clear()
            box.send_keys(value)
            browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", box)
        wait.until(ec.text_to_be_present_in_element((By.ID, "files-count"), "2 files"))
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#files td.status.ready")) == 2)
        browser.find_element(By.ID, "question").send_keys("Who approves hotfixes during a freeze?")
        browser.find_element(By.ID, "ask").click()
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#answer button.cite"))).click()
        wait.until(ec.visibility_of_element_located((By.ID, "span")))
        print("answer:", browser.find_element(By.ID, "answer").text)
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(str(path))
    finally:
        browser.quit()


def main() -> None:
    with tempfile.TemporaryDirectory() as data:
        edgerag = str(ROOT / ".venv/bin/edgerag")
        server = subprocess.Popen(
            [edgerag, "serve", "--port", "8094", "--data-dir", data, "--api-key", KEY]
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if requests.get(BASE + "/health", timeout=1).ok:
                        break
                except requests.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start within 120 s")
                time.sleep(0.5)
            upload({"Authorization": f"Bearer {KEY}"})
            shoot(ROOT / "docs" / "web-ui.png")
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
