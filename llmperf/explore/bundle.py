"""What the site serves for its interactive parts, all from itself: the pure modules as one zip, Pyodide's
runtime and Plotly's basic bundle.

Pyodide (CPython 3 compiled to WebAssembly) and plotly.js-basic-dist-min come
from the npm registry, pinned in package.json and package-lock.json; `make book`
installs them into node_modules/. `write(site)` puts every file under the built
site's `_static/explore/` (book/_ext/explore_assets.py calls it after the build).
"""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llmperf"
PURE = ("__init__.py", "config.py", "accelerators.py", "calculator.py", "cost/__init__.py", "cost/passes.py",
        "cost/roofline.py", "cost/generations.py", "explore/__init__.py", "explore/views.py")
"""The modules the browser runs, under llmperf/: each imports only the standard library and the others."""

PYODIDE = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")
"""Pyodide's core runtime: the loader, the compiled interpreter and its standard library (no packages)."""
PLOTLY = "plotly.js-basic-dist-min/plotly-basic.min.js"


def node_modules() -> Path:
    """Where npm installed Pyodide and Plotly, with a clear error if it has not."""
    where = ROOT / "node_modules"
    missing = [n for n in [f"pyodide/{f}" for f in PYODIDE] + [PLOTLY] if not (where / n).is_file()]
    if missing:
        raise RuntimeError(f"{where} lacks {', '.join(missing)}: the interactive pages need them. Run `make book`, "
                           "which runs `npm ci` (package-lock.json pins them), or run `npm ci` yourself.")
    return where


def weight() -> int:
    """Bytes a browser fetches for the interactive views, the first time: Pyodide, Plotly and the zip."""
    source = node_modules()
    files = [source / "pyodide" / name for name in PYODIDE] + [source / PLOTLY]
    return sum(p.stat().st_size for p in files) + len(zipped())


def zipped() -> bytes:
    """The pure modules as a zip whose root holds the package folder `llmperf/`."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in PURE:
            z.write(PACKAGE / name, f"llmperf/{name}")
    return out.getvalue()


def write(site: Path) -> dict[str, int]:
    """Every file the interactive parts load, under `site`/_static/explore/; returns {file: bytes}."""
    source, target = node_modules(), Path(site) / "_static" / "explore"
    (target / "pyodide").mkdir(parents=True, exist_ok=True)
    for name in PYODIDE:
        shutil.copy2(source / "pyodide" / name, target / "pyodide" / name)
    shutil.copy2(source / PLOTLY, target / "plotly-basic.min.js")
    (target / "llmperf.zip").write_bytes(zipped())
    return {p.relative_to(target).as_posix(): p.stat().st_size for p in sorted(target.rglob("*")) if p.is_file()}
