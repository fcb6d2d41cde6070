"""The prose's computed values (glue and val), tables, notes and progress bars in the book's style."""

import re

import pytest

from llmperf.book import Markdown, Text, glue, glue_all, val


def test_val_formats_a_glued_value_as_the_prose_asks():
    glue("ratio", 1.23456)
    glue("tokens", 12345.0)  # a float asked for as a whole number, as MyST-NB's glue allowed
    glue("text", "fell: each user waits longer")
    assert val("ratio:.2f") == "1.23" and val("tokens:,d") == "12,345" and val("tokens:,.0f") == "12,345"
    assert val("text") == "fell: each user waits longer" and val("ratio") == "1.23456"


def test_val_shows_itself_on_both_surfaces():
    """{eval} shows a value's repr: Text's is the text itself, without quotes; a sentence holding Markdown
    renders it (text/markdown), one without stays plain."""
    glue("said", "it's \"odd\"")
    glue("code", "the `generate` loop")
    plain, marked = val("said"), val("code")
    assert type(plain) is Text and repr(plain) == "it's \"odd\""
    assert isinstance(marked, Markdown) and marked._repr_markdown_() == "the `generate` loop"


def test_glue_hands_numpy_scalars_over_as_plain_numbers():
    import numpy as np

    glue_all({"mean": np.mean([1.0, 2.0]), "count": np.int64(3)})
    assert val("mean:.1f") == "1.5" and val("count:d") == "3"
    assert val("mean") == "1.5"  # not np.float64(1.5)


def test_val_of_a_name_nothing_glued_says_what_to_run():
    with pytest.raises(KeyError, match="run the code cells above this text first"):
        val("never_glued")


def test_glue_prints_nothing(capsys):
    glue("quiet", 1.0)
    assert capsys.readouterr().out == ""


def load_extension(name):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "book" / "_ext" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_student_edition_drops_answer_cells_only_when_solutions_are_hidden():
    from types import SimpleNamespace

    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    student = load_extension("student_edition")

    def page():
        doc = new_document("page", get_default_settings(Parser))
        doc += nodes.container(classes=["cell", "tag_hide-cell"])
        doc += nodes.container(classes=["cell"])
        return doc

    kept, dropped = page(), page()
    student.drop_answer_cells(SimpleNamespace(config=SimpleNamespace(hide_solutions=False)), kept)
    student.drop_answer_cells(SimpleNamespace(config=SimpleNamespace(hide_solutions=True)), dropped)
    assert len(kept.children) == 2
    assert [c["classes"] for c in dropped.children] == [["cell"]]


def test_mathjax_is_found_in_the_pinned_package():
    offline = load_extension("offline_mathjax")
    root = offline.mathjax_source()
    for part in offline.PARTS:
        assert (root / part).exists(), part
    assert 'VERSION="3.2.2"' in (root / "tex-mml-chtml.js").read_text(encoding="utf-8", errors="replace")


def test_tables_mark_their_columns_of_numbers():
    import pandas as pd

    from llmperf.book import table_html

    frame = pd.DataFrame({"kind": ["norms", "LM head"], "time (ms)": [1.5, 22.25], "GB/s": ["1,632", "—"],
                          "share": ["12 %", "3.5 ×"]})
    for table in (frame, frame.style.hide(axis="index")):
        page = table_html(table)
        cells = re.findall(r'<td[^>]*class="(llmperf-\w+)[^"]*"[^>]*>([^<]*)</td>', page)
        assert {text: kind for kind, text in cells} == {
            "norms": "llmperf-text", "LM head": "llmperf-text", "1.50": "llmperf-number", "22.25": "llmperf-number",
            "1,632": "llmperf-number", "—": "llmperf-number", "12 %": "llmperf-number", "3.5 ×": "llmperf-number"} \
            or table is not frame  # the Styler writes its floats with six decimals
        assert 'class="llmperf-number' in page and 'class="llmperf-text' in page


def test_a_long_table_is_collapsed_and_a_short_one_is_not():
    import pandas as pd

    from llmperf.book import LONG_TABLE, Collapsed

    short = Collapsed(pd.DataFrame({"x": range(LONG_TABLE)}), "sweep")._repr_html_()
    long = Collapsed(pd.DataFrame({"x": range(LONG_TABLE + 1)}).style, "sweep")._repr_html_()
    assert "<details" not in short and "<table" in short
    assert long.startswith('<details class="llmperf-long-table"><summary>The sweep: 9 rows</summary>')


def test_a_note_is_a_line_outside_a_notebook(capsys):
    from llmperf.book import note

    note("This machine looked busy.", title="A busy machine")
    assert capsys.readouterr().out == "A busy machine: This machine looked busy.\n"


def test_progress_bars_stay_off_the_built_pages(capsys, monkeypatch):
    from llmperf.progress import progress

    monkeypatch.setenv("LLMPERF_BOOK", "1")
    assert list(progress(range(3), "work")) == [0, 1, 2]
    assert capsys.readouterr().out == ""
    monkeypatch.delenv("LLMPERF_BOOK")
    list(progress(range(3), "work"))
    assert "work: 100%" in capsys.readouterr().out


def test_the_book_module_needs_no_jupyter():
    """A GPU machine's reference run imports the chapters, and so this module, without Jupyter installed."""
    import subprocess
    import sys

    blocked = ("myst_nb", "IPython", "ipykernel", "nbformat")
    code = f"import sys; sys.modules.update(dict.fromkeys({blocked!r})); import llmperf.book; llmperf.book.note('x')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "Note: x\n", done.stderr


def test_every_chapter_figure_is_numbered_and_captioned():
    """A cell that draws a figure (`fig = ...`) carries MyST-NB's figure metadata, a name and a caption, and shows
    nothing else (the metadata would wrap a table of the same cell too)."""
    import json
    from pathlib import Path

    names = []
    for notebook in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            source = "".join(cell["source"])
            figure = cell.get("metadata", {}).get("mystnb", {}).get("figure")
            if cell["cell_type"] == "code" and re.search(r"^fig = ", source, re.M):
                assert figure and figure["caption"] and figure["name"], (notebook.name, source[:80])
                assert source.rstrip().split("\n")[-1].startswith("fig = "), (notebook.name, source[:80])
            if figure:
                names.append(figure["name"])
    assert len(names) == len(set(names)) > 20
