"""The site's interactive parts: a calculator and figures that recompute the cost model as a reader changes
the model, the accelerator and the workload.

One source of truth: the page runs this package's own pure-Python modules
(`llmperf.calculator`, `llmperf.cost`, `llmperf.accelerators`, `llmperf.config`
and `views`) in the reader's browser with Pyodide, CPython compiled to
WebAssembly. No formula is written again in JavaScript: `_static/explore.js` only
builds the controls `views.controls` lists and draws what `views.render` returns,
with Plotly. Everything is served from the site itself (`bundle`), so it works
offline, over HTTP (a browser does not let a page opened from a file fetch
WebAssembly: `python -m http.server -d _build/html` serves the built site).

`page.embed(kind, ...)` is what a chapter's cell shows: the view's default
numbers as a table, computed at build time, inside the element the page's
script makes interactive. This file imports nothing, so that the browser's
`views` loads without `page`'s build-time needs.
"""
