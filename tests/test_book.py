"""Glued numbers are printed for JupyterLab readers, and kept off the built site."""

from llmperf.book import glue


def test_glue_prints_outside_the_book_build(capsys, monkeypatch):
    monkeypatch.delenv("LLMPERF_BOOK", raising=False)
    glue("ratio", 1.23456)
    glue("tokens", 12345)
    glue("text", "fell: each user waits longer")
    assert capsys.readouterr().out.splitlines() == ["ratio = 1.235", "tokens = 12,345", "text = fell: each user waits longer"]


def test_glue_is_silent_while_the_book_builds(capsys, monkeypatch):
    monkeypatch.setenv("LLMPERF_BOOK", "1")
    glue("ratio", 1.23456)
    assert capsys.readouterr().out == ""


def test_glue_hands_numpy_scalars_over_as_plain_numbers(monkeypatch):
    """MyST-NB stores a glued value's repr; np.float64(1.5) cannot be read back by a {glue:text} number format."""
    import numpy as np

    import llmperf.book

    stored = {}
    monkeypatch.setattr(llmperf.book, "_myst_glue", lambda name, value, display=False: stored.update({name: value}))
    glue("mean", np.mean([1.0, 2.0]))
    glue("count", np.int64(3))
    assert stored == {"mean": 1.5, "count": 3}
    assert type(stored["mean"]) is float and type(stored["count"]) is int


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


def test_glue_all_glues_each_name(monkeypatch):
    import llmperf.book

    stored = {}
    monkeypatch.setattr(llmperf.book, "_myst_glue", lambda name, value, display=False: stored.update({name: value}))
    llmperf.book.glue_all({"a": 1, "b": "two"})
    assert stored == {"a": 1, "b": "two"}
