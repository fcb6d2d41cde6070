"""A chapter as a student runs it in JupyterLab: once it has run, its prose shows numbers, not expressions.

JupyterLab (with jupyterlab-myst, as `make lab` starts it) runs on loopback, and
headless Chromium, driven by Playwright as in the site test, opens a copy of
chapter 5 (the quickest), runs all its cells, and reads every Markdown cell.
Each {eval}`val("...")` must have been evaluated by the kernel, with no error,
and the saved notebook must hold each expression's result.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.test_site import chromium, skip_or_fail

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "05_step_anatomy.ipynb"
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook on show
WINDOWING = {"windowingMode": "none"}  # what `make lab` sets: JupyterLab evaluates only cells it has drawn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on loopback over a folder holding a copy of the chapter: (base URL, the copy)."""
    if chromium() is None:
        skip_or_fail("No Chromium on this machine, so JupyterLab is not opened (`sudo apt-get install chromium`).")
    if shutil.which("jupyter", path=str(Path(sys.executable).parent)) is None:
        skip_or_fail("JupyterLab is not installed; it is in requirements.txt: run `make test`.")
    home = tmp_path_factory.mktemp("lab")
    shutil.copy(CHAPTER, home / CHAPTER.name)
    settings = home / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps(WINDOWING))
    port = free_port()
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"))
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", "--allow-root", f"--port={port}",
         "--ip=127.0.0.1", "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={home}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not answer on loopback within a minute")
        yield base, home / CHAPTER.name
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_chapter_run_in_jupyterlab_shows_numbers_in_its_prose(lab):
    from playwright.sync_api import sync_playwright

    base, copy = lab
    expressions = sum("{eval}" in "".join(c["source"]) for c in json.loads(copy.read_text())["cells"]
                      if c["cell_type"] == "markdown")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/lab/tree/{copy.name}?reset")
        page.wait_for_selector(f"{PANEL} .jp-MarkdownCell", timeout=120_000)
        page.wait_for_selector(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        page.wait_for_function(f"""() => {{ const p = document.querySelectorAll('{PANEL} .jp-CodeCell .jp-InputPrompt');
            return p.length && /\\[\\d+\\]/.test(p[p.length - 1].textContent); }}""", timeout=600_000)
        page.wait_for_selector(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=600_000)
        assert page.locator(f"{PANEL} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] "
                            ".jp-RenderedText:has-text('Error')").count() == 0
        cells = page.locator(f"{PANEL} .jp-MarkdownCell")
        shown = []
        for i in range(cells.count()):
            cells.nth(i).scroll_into_view_if_needed()
            shown.append(cells.nth(i).locator(".myst").first.text_content() or "")
        left = [text[:120] for text in shown if 'val("' in text]
        assert not left, f"expressions JupyterLab did not evaluate: {left[:3]}"
        page.keyboard.press("Control+s")
        time.sleep(3)
        browser.close()
    saved = [c for c in json.loads(copy.read_text())["cells"] if c["cell_type"] == "markdown"
             and "{eval}" in "".join(c["source"])]
    assert len(saved) == expressions > 10
    results = [e for c in saved for e in c["metadata"].get("user_expressions", [])]
    assert results and all(e["result"]["status"] == "ok" for e in results), \
        [e for e in results if e["result"]["status"] != "ok"][:3]
    assert len(results) == sum("".join(c["source"]).count("{eval}") for c in saved)
