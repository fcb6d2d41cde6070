"""Chapter 6's cited tables (`llmperf.chapters.serving.sources`: MLPerf's limits, each tool's metric names) and its
figures (`llmperf.plots.serving`), drawn from small hand-built RequestRecords; no server, no model."""

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from llmperf import metrics  # noqa: E402
from llmperf.chapters.serving import sources  # noqa: E402
from llmperf.chapters.serving.sweep import BatchPoint, BatchSweep  # noqa: E402
from llmperf.metrics import RequestRecord  # noqa: E402
from llmperf.plots import MEASURED, PREDICTED  # noqa: E402
from llmperf.plots import serving as figures  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FACTS = ROOT.parent / "shared" / "reference" / "facts.md"
BIB = ROOT / "book" / "references.bib"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def streamed(sent, ttft, gaps, error=None):
    """A request sent at `sent` whose first token came `ttft` s later and each next one after `gaps`."""
    times = [sent + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestRecord(sent=sent, token_times=times, error=error)


# --- MLPerf's limits ------------------------------------------------------------------------------

def test_limits_match_the_facts():
    expected = {("Llama-2-70B", "server"): (2.0, 0.200), ("Llama-3.1-8B", "server"): (2.0, 0.100),
                ("Llama-3.1-405B", "server"): (6.0, 0.175), ("Llama-2-70B", "interactive"): (0.450, 0.040),
                ("Llama-3.1-8B", "interactive"): (0.500, 0.030)}
    got = {(r.model, r.scenario): (r.ttft_p99, r.tpot_p99) for r in sources.MLPERF_LIMITS}
    assert got == expected
    assert all(r.scenario in ("server", "interactive") for r in sources.MLPERF_LIMITS)
    assert all(r.cite in ("mlperf2025rules", "mlcommons2025smallllm") for r in sources.MLPERF_LIMITS)


@pytest.mark.skipif(not FACTS.exists(), reason="the shared facts file is not beside this checkout")
def test_limits_are_the_facts_files_lines():
    text = " ".join(FACTS.read_text().split())
    server = text[text.index("server-scenario limits"):text.index("Interactive scenario")]
    interactive = text[text.index("Interactive scenario"):text.index("Known pitfalls")]
    for r in sources.MLPERF_LIMITS:
        if r.scenario == "server":
            assert f"{r.model} TTFT {r.ttft_p99:g} s / TPOT {r.tpot_p99 * 1e3:.0f} ms" in server
        else:
            assert f"{r.model} {r.ttft_p99 * 1e3:.0f} ms / {r.tpot_p99 * 1e3:.0f} ms" in interactive


def test_limit_lookup_and_its_error():
    row = sources.limit("Llama-3.1-8B", "interactive")
    assert (row.ttft_p99, row.tpot_p99) == (0.5, 0.03)
    with pytest.raises(ValueError, match="Llama-3.1-8B/server") as err:
        sources.limit("Llama-3.1-8B", "offline")
    assert "offline" in str(err.value) and "Llama-2-70B/interactive" in str(err.value)
    with pytest.raises(ValueError, match="known"):
        sources.limit("GPT-J", "server")


def test_limits_table():
    table = sources.limits_table()
    assert list(table.columns) == ["model", "scenario", "TTFT p99 limit (s)", "TPOT p99 limit (ms)", "source"]
    assert len(table) == len(sources.MLPERF_LIMITS) == 5
    row = table[(table.model == "Llama-3.1-405B") & (table.scenario == "server")].iloc[0]
    assert row["TTFT p99 limit (s)"] == 6.0 and row["TPOT p99 limit (ms)"] == 175.0


def test_limits_view_names_each_source():
    assert {r.cite for r in sources.MLPERF_LIMITS} <= set(sources.SOURCE_NAMES)
    view = sources.limits_view()
    assert list(view.data["source"]) == [sources.SOURCE_NAMES[r.cite] for r in sources.MLPERF_LIMITS]
    html = view.to_html()
    assert "MLPerf Inference rules (MLCommons, 2025)" in html and "mlperf2025rules" not in html
    assert "row_heading" not in html  # no index
    assert list(sources.limits_table()["source"]) == [r.cite for r in sources.MLPERF_LIMITS]  # the keys stay


def test_the_chapters_dict_agrees():
    from llmperf.chapters.serving import MLPERF_LIMITS as chapter  # the sweep's Llama-3.1-8B limits

    for scenario, (ttft, tpot) in chapter.items():
        row = sources.limit("Llama-3.1-8B", scenario)
        assert (row.ttft_p99, row.tpot_p99) == (ttft, tpot)


# --- each tool's names ----------------------------------------------------------------------------

def test_names_table_shape():
    table = sources.names_table()
    assert list(table.columns) == ["definition", "vLLM", "GenAI-Perf / AIPerf", "guidellm", "LLMPerf (Ray)"]
    assert len(table) == len(sources.NAMES) == 7
    assert table.notna().all().all() and (table != "").all().all()
    assert all(len(row.names) == len(sources.TOOLS) for row in sources.NAMES)


def test_names_view_shows_every_cell_whole():
    html = sources.names_view().to_html()
    assert "row_heading" not in html  # no index
    for row in sources.NAMES:  # the longest definitions and names, not cut with "..."
        assert row.definition in html and all(name in html for name in row.names)
    assert "..." not in html


def test_names_table_known_cells():
    table = sources.names_table().set_index("definition")
    tpot = table.loc["per request, (E2E − TTFT) ÷ (output tokens − 1)"]
    assert tpot["vLLM"] == "TPOT" and "ITL" in tpot["GenAI-Perf / AIPerf"] and tpot["guidellm"] == "ITL"
    assert tpot["LLMPerf (Ray)"] == sources.NONE
    first_included = table.loc["per request, E2E ÷ output tokens, the first token included"]
    assert first_included["guidellm"] == "TPOT" and first_included["vLLM"] == sources.NONE
    assert first_included["LLMPerf (Ray)"] == "inter_token_latency_s"
    pooled = table.loc["every gap between successive streamed tokens, pooled over requests"]
    assert pooled["vLLM"] == "ITL"
    assert table.iloc[0]["LLMPerf (Ray)"] == "ttft_s"
    distserve = sources.NAMES[-1]
    assert "DistServe" in distserve.definition and distserve.cite == "zhong2024distserve"
    assert set(distserve.names) == {sources.NONE}


def test_every_cite_is_in_the_bibliography():
    keys = set(re.findall(r"^@\w+\{([^,]+),", BIB.read_text(), flags=re.M))
    assert set(sources.cites()) <= keys
    assert set(sources.cites()) >= {"vllm_bench_serve", "nvidia_genaiperf", "nvidia_aiperf", "guidellm",
                                    "ray_llmperf", "zhong2024distserve"}
    assert len(sources.cites()) == len(set(sources.cites()))
    assert [t.column for t in sources.TOOLS] == list(sources.names_table().columns[1:])


# --- figures --------------------------------------------------------------------------------------

def test_request_timeline():
    record = streamed(10.0, 0.2, [0.05, 0.06, 0.03, 0.06, 0.05])
    fig = figures.request_timeline(record)
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "TTFT = 200 ms" in texts and "E2E = 450 ms" in texts and "TPOT = mean gap = 50.0 ms" in texts
    assert all(f"{g:.0f}" in texts.split() for g in (50, 60, 30))
    ax = plt.subplots()[1]
    assert figures.request_timeline(streamed(0, 0.1, [0.01] * 20), ax=ax) is ax.figure  # long: gaps unlabelled
    assert "10" not in [t.get_text() for t in ax.texts]


def test_request_timeline_needs_two_tokens():
    with pytest.raises(ValueError, match="at least 2"):
        figures.request_timeline(streamed(0, 0.1, []))
    with pytest.raises(ValueError, match="has 0"):
        figures.request_timeline(RequestRecord(sent=0.0, error="timeout"))


def test_ttft_cdf():
    records = [streamed(0.0, 0.05 + 0.01 * i, [0.01]) for i in range(20)] + [RequestRecord(0.0, error="500")]
    fig = figures.ttft_cdf(records)
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    ttfts = [r.times.ttft * 1e3 for r in records if r.ok]
    for q in (50, 90, 99):
        assert f"p{q} = {metrics.percentile(ttfts, q):,.0f} ms (interpolated)" in labels  # the method, said
    assert [t.get_text() for t in ax.get_legend().get_texts()] == labels
    assert "TTFT of 20 requests" in labels
    step = ax.get_lines()[0]
    assert step.get_ydata()[-1] == pytest.approx(1.0) and step.get_ydata()[0] == 0
    ax2 = plt.subplots()[1]
    assert figures.ttft_cdf(records, percentiles=(99,), ax=ax2, method="nearest_rank") is ax2.figure
    nearest = metrics.percentile(ttfts, 99, "nearest_rank")
    assert f"p99 = {nearest:,.0f} ms (nearest rank)" in [line.get_label() for line in ax2.get_lines()]
    with pytest.raises(ValueError, match="Unknown percentile method"):
        figures.ttft_cdf(records, method="midpoint")


def test_ttft_cdf_needs_a_success():
    with pytest.raises(ValueError, match="No successful request"):
        figures.ttft_cdf([RequestRecord(0.0, error="500"), RequestRecord(1.0)])


def small_sweep():
    """Batch 1: steady 20 ms gaps; batch 2: 40 ms gaps, one request with 100 ms ones (a long p99 TPOT)."""
    one = [streamed(i * 1.0, 0.1, [0.02] * 4) for i in range(4)]
    two = [streamed(i * 0.5, 0.2, [0.04] * 4) for i in range(3)] + [streamed(2.0, 0.2, [0.1] * 4)]
    return BatchSweep("cpu", 8, 5, [BatchPoint(1, one), BatchPoint(2, two)])


def test_exchange_rate_bars_and_limits():
    sweep = small_sweep()
    fig = figures.exchange_rate(sweep)
    ax, ax2 = fig.axes
    assert "1 ÷ p99 TPOT" in ax.get_xlabel() and "1 ÷ mean TPOT" in ax.get_xlabel()
    bars = ax.collections[0].get_segments()
    for seg, p99, mean in zip(bars, sweep.percentile("tpot", "p99"), sweep.per_user):
        (x0, _), (x1, _) = seg
        assert x0 == pytest.approx(1 / p99) and x1 == pytest.approx(mean) and x0 <= x1
    labels = [line.get_label() for line in ax.get_lines()]
    assert "MLPerf server: p99 TPOT ≤ 100 ms" in labels and "MLPerf interactive: p99 TPOT ≤ 30 ms" in labels
    assert "MLPerf server: p99 TTFT ≤ 2 s" in [line.get_label() for line in ax2.get_lines()]
    assert all(line.get_color() != PREDICTED for line in ax.get_lines())


def test_goodput_is_drawn_as_a_measurement():
    fig = figures.goodput(small_sweep())
    lines = fig.axes[0].get_lines()
    assert len(lines) == 2 and all(line.get_color() == MEASURED for line in lines)
    assert lines[0].get_marker() != lines[1].get_marker() and lines[0].get_linestyle() != lines[1].get_linestyle()
