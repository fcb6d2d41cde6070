"""The errata page's corrections: each right figure from the cost model, and what each row claims of it."""

from llmperf.chapters import errata


def test_every_correction_holds_for_the_notes_setting():
    n = errata.numbers()
    errata.check(n)
    assert round(n["qkv_mb"], 1) == 50.3 and round(n["flops_per_token_g"], 1) == 15.0
    assert round(n["per_user_tps"], 1) == 58.6 and round(n["launch_overhead_us"], 1) == 0.9


def test_the_table_gives_each_figure_its_unit():
    rows = errata.table(errata.numbers())
    assert len(rows) == 8 and all(set(r) == {"figure", "the notes", "right"} for r in rows)
    assert all(any(u in r["right"] for u in ("MB", "GB", "GFLOP", "FLOP/byte", "tokens", "µs", "×")) for r in rows)


def test_the_launch_sentence_names_a_gpu_count_or_says_there_is_none():
    said = errata.kernel_numbers([("reference run: NVIDIA H200, 2026-11-29", 1179), ("cpu", None)])["kernels_text"]
    assert "1,179 kernels (reference run: NVIDIA H200, 2026-11-29)" in said and "200" in said
    assert "No committed GPU reference" in errata.kernel_numbers([("cpu", None)])["kernels_text"]


def test_a_chapter_names_the_source_notes_at_most_once():
    """The notes' errors live on the errata page: a chapter's text (its markdown, and the sentences its claims
    module writes into it) names the notes once at most, where a reader needs to know."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    packages = {"01": "chain", "02": "prefill", "03": "intensity", "04": "caching", "05": "anatomy", "06": "serving"}
    for notebook in sorted((root / "notebooks").glob("0*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        for module in (root / "llmperf" / "chapters" / packages[notebook.name[:2]]).glob("*.py"):
            text += module.read_text(encoding="utf-8")
        text = " ".join(text.split())  # a citation may follow on the next line
        named = text.count("source notes") + text.count("sourcenotes") - text.count("source notes {cite:p}`sourcenotes`")
        assert named <= 1, f"{notebook.name} names the source notes {named} times"
