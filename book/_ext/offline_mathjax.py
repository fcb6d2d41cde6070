"""Serve MathJax from the site itself, so that equations typeset offline.

Sphinx loads MathJax from a CDN by default: a reader without a network, or a
site opened from a file, sees raw TeX. The PyPI package sphinx-mathjax-offline
(pinned in requirements.txt) carries MathJax 3.2.2; this extension copies the
part of it the book uses into the built site's `_static/mathjax` once the build
has finished:

- `tex-mml-chtml.js`, the combined TeX-input, HTML-output component that
  `mathjax_path` names in _config.yml;
- `output/chtml/fonts/woff-v2/`, its fonts;
- `input/tex/extensions/`, the TeX packages it loads on demand (\\cancel and
  the like), which it looks for next to itself.

About 2 MB, against the package's 24 MB. The files are copied after the build,
into the output, because Jupyter Book 1 injects every script found under a
source `html_static_path` folder into every page. Loaded through
`sphinx: local_extensions` in _config.yml.
"""

from __future__ import annotations

import shutil
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

PACKAGE = "sphinx-mathjax-offline"
PARTS = ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions")


def mathjax_source() -> Path:
    """Where the installed package keeps MathJax."""
    try:
        root = Path(distribution(PACKAGE).locate_file("sphinx-mathjax-offline/static/mathjax"))
    except PackageNotFoundError:
        raise RuntimeError(f"{PACKAGE} is not installed, so MathJax cannot be served offline. Run `make book`, "
                           "which installs requirements.txt into .venv.") from None
    if not (root / PARTS[0]).is_file():
        raise RuntimeError(f"{PACKAGE} has no {PARTS[0]} under {root}: reinstall it (pip install --force-reinstall "
                           f"{PACKAGE}==0.0.2).")
    return root


def copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source, target = mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
    for part in PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, target / part, dirs_exist_ok=True)
        else:
            (target / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / part, target / part)


def setup(app):
    mathjax_source()  # fail at the start of the build, not after it
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
