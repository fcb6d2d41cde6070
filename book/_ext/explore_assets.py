"""Serve the interactive pages' code from the site itself: Pyodide, Plotly and the course's pure modules.

After an HTML build, `llmperf.explore.bundle.write` copies Pyodide's runtime and
Plotly's basic bundle (npm packages pinned in package-lock.json, installed by
`make book`) and a zip of the pure modules into `_static/explore/`, where
`_static/explore.js` loads them when a reader opens a calculator or an
interactive figure. Copied after the build, as offline_mathjax does, so that
Jupyter Book does not inject these scripts into every page.
"""

from __future__ import annotations

from pathlib import Path

from llmperf.explore import bundle


def copy_assets(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        bundle.write(Path(app.outdir))


def setup(app):
    bundle.node_modules()  # fail at the start of the build, not after it
    app.connect("build-finished", copy_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
