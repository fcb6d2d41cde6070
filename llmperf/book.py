"""How a chapter hands its computed numbers to its prose.

The chapters never type a number into their text. A code cell computes it and
`glue`s it under a name; the text refers to the name, {glue:text}`name:.2f`,
and Jupyter Book writes the number in when it builds the site (MyST-NB's glue).

Opened in JupyterLab, the same text shows only the name: glue references are
resolved at build time, not by the notebook. So `glue` here also prints
"name = value" in the cell's output whenever the notebook is not being built
into the site, and a student reading in JupyterLab finds every number right
under the cell that computed it. `make book` sets LLMPERF_BOOK=1, which keeps
those lines off the website.
"""

from __future__ import annotations

import os

from myst_nb import glue as _myst_glue


def building_the_book() -> bool:
    """True while `make book` executes the notebooks (LLMPERF_BOOK=1)."""
    return os.environ.get("LLMPERF_BOOK") == "1"


def glue(name: str, value, display: bool = False) -> None:
    """Store `value` under `name` for the text's {glue:text} references; outside the book build, print it too."""
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # a NumPy scalar: glue writes its
        value = value.item()  # repr, np.float64(...), which the text's number formats cannot read
    _myst_glue(name, value, display=display)
    if not building_the_book():
        if isinstance(value, float):
            shown = f"{value:,.4g}"
        elif isinstance(value, int) and not isinstance(value, bool):
            shown = f"{value:,}"
        else:
            shown = str(value)
        print(f"{name} = {shown}")


def glue_all(values) -> None:
    """Glue every (name, value) of `values`, a mapping: a result record's `numbers()`, in one call."""
    for name, value in values.items():
        glue(name, value)
