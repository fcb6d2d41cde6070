"""How a chapter hands its computed numbers to its prose, and shows its tables and notes.

The chapters never type a number into their text. A code cell computes it and
`glue`s it under a name; the text refers to the name, {glue:text}`name:.2f`,
and Jupyter Book writes the number in when it builds the site (MyST-NB's glue).

Opened in JupyterLab, the same text shows only the name: glue references are
resolved at build time, not by the notebook. So `glue` here also prints
"name = value" in the cell's output whenever the notebook is not being built
into the site, and a student reading in JupyterLab finds every number right
under the cell that computed it. `make book` sets LLMPERF_BOOK=1, which keeps
those lines off the website.

Tables: every DataFrame or Styler a cell shows renders through `table_html`, which
marks the columns of numbers so that the site's one table style (_static/llmperf.css)
right-aligns them; `Collapsed` folds a long sweep's table under its figure. `note`
shows a boxed note. Importing this module needs no Jupyter: a reference run on a
GPU machine imports it through the chapters.
"""

from __future__ import annotations

import html
import re

from .progress import building_the_book

__all__ = ["Collapsed", "building_the_book", "glue", "glue_all", "note", "table_html", "use_book_tables"]


def _myst_glue(name: str, value, display: bool = False) -> None:
    from myst_nb import glue as myst_glue  # here, so that a program without Jupyter can import this module

    myst_glue(name, value, display=display)


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


def note(text: str, title: str = "Note") -> None:
    """`text` as a MyST admonition in a notebook (Markdown; the site renders it as a boxed note), or printed
    as a plain line elsewhere (a terminal, a script)."""
    if getattr(_shell(), "kernel", None) is None:  # no notebook's kernel to show Markdown
        print(f"{title}: {text}")
        return
    from IPython.display import Markdown, display

    display(Markdown(f":::{{admonition}} {title}\n:class: note\n{text}\n:::"))


def _shell():
    """The running IPython shell, or None (no IPython, or a plain interpreter)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


# --- Tables -------------------------------------------------------------------------------------------------
# A chapter's table is a pandas DataFrame or Styler, the last value of its cell. `use_book_tables()` (run when
# this module is imported inside IPython) has IPython render both through `table_html`, so every table on the
# site, a chapter's, the reference runs' or the benchmarks', takes the site's one table style (_static/
# llmperf.css): numbers right-aligned, text left, rules between rows.

LONG_TABLE = 8  # rows; `Collapsed` folds a longer sweep's table away under its figure
_NUMBER = re.compile(r"^[−\-+]?(\d[\d,]*\.?\d*|\.\d+)(e[−\-+]?\d+)?\s*(%|×|x|ms|s|µs|GB/s|GB|MB)?$", re.I)
_PLACEHOLDER = {"", "—", "-", "nan", "none", "n/a", "not in this reference"}  # in a column of numbers
_ROW = re.compile(r"<tr[^>]*>(.*?)</tr>", re.S)
_CELL = re.compile(r"<(td|th)([^>]*)>(.*?)</\1>", re.S)


def _text(cell_html: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", cell_html)).strip()


def _numeric_positions(body: str) -> set[int]:
    """Positions (0 = first cell of a row) of the body's columns that hold numbers and placeholders only,
    with at least one number."""
    kinds: dict[int, set[str]] = {}
    for row in _ROW.findall(body):
        for i, (tag, _, inner) in enumerate(_CELL.findall(row)):
            text = _text(inner)
            kind = ("blank" if text.lower() in _PLACEHOLDER else "number" if _NUMBER.match(text) else
                    "text") if tag == "td" else "text"
            kinds.setdefault(i, set()).add(kind)
    return {i for i, k in kinds.items() if "number" in k and "text" not in k}


def _classed(table_html: str, numeric: set[int]) -> str:
    """Each cell of `table_html`'s rows in a `numeric` position gets the class llmperf-number, others'
    headings llmperf-text."""
    def row(match):
        position = iter(range(10_000))

        def cell(m):
            tag, attrs, inner = m.groups()
            name = "llmperf-number" if next(position) in numeric else "llmperf-text"
            if 'class="' in attrs:
                attrs = attrs.replace('class="', f'class="{name} ', 1)
            else:
                attrs = f' class="{name}"{attrs}'
            return f"<{tag}{attrs}>{inner}</{tag}>"

        return match.group(0).replace(match.group(1), _CELL.sub(cell, match.group(1)), 1)

    return _ROW.sub(row, table_html)


def table_html(table) -> str:
    """A DataFrame or a Styler as the book's HTML table: each column that holds only numbers (and "—") is
    right-aligned, every other column left-aligned; nothing else about the table changes."""
    source = table.to_html()
    body = source[source.find("<tbody"):] if "<tbody" in source else source
    return _classed(source, _numeric_positions(body))


class Collapsed:
    """A long sweep's table, folded under the figure that draws it: shown open when it has at most
    LONG_TABLE rows, else behind a "Show the N rows" line (HTML's <details>)."""

    def __init__(self, table, what: str = "table"):
        self.table, self.what = table, what

    def __getattr__(self, name):  # the table's own: a Styler's .data, .caption, .to_html
        return getattr(self.__dict__["table"], name)

    def _repr_html_(self) -> str:
        frame = getattr(self.table, "data", self.table)  # a Styler's DataFrame
        inner = table_html(self.table)
        if len(frame) <= LONG_TABLE:
            return inner
        return (f'<details class="llmperf-long-table"><summary>The {self.what}: {len(frame)} rows</summary>'
                f"{inner}</details>")


def use_book_tables() -> bool:
    """Render DataFrames and Stylers through `table_html` in this IPython session; False outside IPython."""
    shell = _shell()
    if shell is None:
        return False
    import pandas as pd
    from pandas.io.formats.style import Styler

    formatter = shell.display_formatter.formatters["text/html"]
    for kind in (pd.DataFrame, Styler):
        formatter.for_type(kind, table_html)
    return True


use_book_tables()
