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
