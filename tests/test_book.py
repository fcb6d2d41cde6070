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
