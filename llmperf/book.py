"""How a chapter hands its computed numbers to its prose, and shows its tables and notes.

The chapters never type a number into their text. A code cell computes it and
glues it under a name (`glue_all(record.numbers())`); the text asks for it with
MyST's inline expression, {eval}`val("name:.2f")`, which the kernel evaluates:

- on the site, MyST-NB executes each page inline (`execute_notebooks: inline`)
  and writes the value in as it reaches the expression;
- in JupyterLab, jupyterlab-myst evaluates a Markdown cell's expressions when the
  cell is run, so once a chapter has run its prose shows numbers, not names.

One mechanism for both surfaces, with one consequence: a value must be glued in a
cell above the text that reads it. `val` formats the value with the spec after
the colon (Python's format mini-language, `,.1f`, `d`, ...) and hands it back as
`Text`, which both surfaces show as itself; a sentence holding Markdown (`code`,
**bold**, $math$) comes back as `Markdown`, rendered inline.

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

__all__ = ["Collapsed", "Markdown", "Text", "building_the_book", "glue", "glue_all", "note", "table_html",
           "use_book_tables", "val"]

_values: dict[str, object] = {}  # name -> value: everything glued in this process so far
_MARKDOWN = re.compile(r"`|\*\*|\$|\{[a-z]+\}")  # code, bold, math, a role: text that needs rendering


class Text(str):
    """A computed number or sentence as the prose shows it: its repr is the text itself, so an {eval}
    expression shows it without quotes, on the site and in JupyterLab."""

    def __repr__(self) -> str:
        return str(self)


class Markdown(Text):
    """A computed sentence holding Markdown: rendered inline as MyST Markdown on both surfaces."""

    def _repr_markdown_(self) -> str:
        return str(self)


def glue(name: str, value) -> None:
    """Keep `value` under `name` for the prose's {eval}`val("name")` (a NumPy scalar as a plain number)."""
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()
    _values[name] = value


def glue_all(values) -> None:
    """Glue every (name, value) of `values`, a mapping: a result record's `numbers()`, in one call."""
    for name, value in values.items():
        glue(name, value)


def val(ref: str) -> Text:
    """The value glued as `name`, formatted: `ref` is "name" or "name:spec". A spec ending in d, x, ... takes
    the value as a whole number, one ending in f, g, %, ... as a float, as MyST-NB's glue did. A string holding
    Markdown comes back as `Markdown`. KeyError, saying what to run, for a name nothing has glued."""
    name, _, spec = ref.partition(":")
    if name not in _values:
        raise KeyError(f"Nothing is glued as {name!r} yet: run the code cells above this text first "
                       "(a value must be computed before the prose that shows it).")
    value = _values[name]
    if spec:
        kind = spec[-1]
        value = int(value) if kind in "bcdoxX" else float(value) if kind in "eEfFgGn%" else \
            str(value) if kind == "s" else value
    text = format(value, spec)
    return Markdown(text) if isinstance(value, str) and _MARKDOWN.search(text) else Text(text)


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
