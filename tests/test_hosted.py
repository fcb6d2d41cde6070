"""A hosted notebook (Colab, Binder) installs the course where it is missing: each chapter's first cell, and
llmperf/hosted.py, which that cell runs before the package can be imported."""

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from llmperf import hosted

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def install_cell(notebook: Path) -> dict:
    return json.loads(notebook.read_text())["cells"][1]


def test_every_chapter_opens_with_the_same_install_cell_hidden_on_the_site():
    cells = [install_cell(nb) for nb in CHAPTERS]
    assert len(CHAPTERS) == 6 and all(c["cell_type"] == "code" for c in cells)
    assert all(c["metadata"].get("tags") == ["remove-cell"] for c in cells)
    assert len({"".join(c["source"]) for c in cells}) == 1, "the six install cells differ"


def test_the_cell_clones_the_repository_the_site_names():
    """A notebook opened on its own (Colab's launch button) clones REPOSITORY: the URL _config.yml gives the
    site's buttons, so that setting one without the other fails here."""
    source = "".join(install_cell(CHAPTERS[0])["source"])
    url = re.search(r'^REPOSITORY = "(.*)"', source, re.M).group(1)
    config = (ROOT / "_config.yml").read_text()
    assert re.search(r'^repository:\n  url: "(.*)"', config, re.M).group(1) == url


def test_the_constraints_keep_every_pin_but_torch():
    text = "# comment\ntorch==2.13.0\nnumpy==2.4.6\n\n-r other.txt\nPandas==3.1.1\n"
    assert hosted.constraints(text) == "numpy==2.4.6\nPandas==3.1.1\n"
    pins = hosted.constraints((ROOT / "requirements.txt").read_text())
    assert "torch" not in pins and "numpy==" in pins and "jupyter-book==" in pins


def test_torch_is_installed_only_where_there_is_none():
    kept = hosted.commands(ROOT, "py", have_torch=True)
    fresh = hosted.commands(ROOT, "py", have_torch=False)
    assert len(fresh) == len(kept) + 1 and fresh[0][-1] == "torch==2.13.0"
    assert kept[0][-2:] == ["-e", f"{ROOT}[notebooks,fast]"] and kept[-1][-2:] == ["--no-deps", hosted.WEIGHTS]


def test_a_folder_that_is_not_the_checkout_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not the course's checkout"):
        hosted.install(tmp_path)


def test_the_cell_installs_the_course_into_a_fresh_python_and_keeps_its_torch(tmp_path):
    """A fresh virtual environment with torch (as Colab has) and nothing of the course: the chapters' first
    cell, run from the notebooks folder, installs the package from the checkout through pip (registries only),
    and the chapters' imports then succeed in the same process, with the hosted torch untouched."""
    env = tmp_path / "hosted"
    venv.create(env, with_pip=True)
    python = str(env / "bin" / "python")
    torch_pin = next(line for line in (ROOT / "requirements.txt").read_text().splitlines()
                     if line.startswith("torch=="))
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-compile", torch_pin], check=True, timeout=900)
    before = subprocess.run([python, "-c", "import torch; print(torch.__file__, torch.__version__)"],
                            capture_output=True, text=True, check=True).stdout
    cell = "".join(install_cell(CHAPTERS[0])["source"])
    imports = ("\nimport llmperf, torch\n"
               "from llmperf.book import glue_all, val\n"
               "from llmperf.chapters import anatomy, chain, serving\n"
               "from llmperf.chapters.setup import setup\n"
               "from llmperf.plots import serving as figures\n"
               "from llmperf.references import compare, results\n"
               "from llmperf.serve import background, create_app\n"
               "from openai import OpenAI\n"
               "print(torch.__file__, torch.__version__)\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([python, "-c", cell + imports], cwd=ROOT / "notebooks", capture_output=True, text=True,
                          timeout=1200, env=clean)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith(before.strip()), (before, done.stdout[-500:])  # the same torch
    assert "$ pip install --quiet --no-compile -c" in done.stdout  # it did install, from the checkout
