"""The load generator against a running llmperf.serve: the URL as the peers take it, warm-up, a rate with a cap
on requests in flight, and the rate the requests really arrived at."""

import asyncio
import json

import pytest

from llmperf.bench import achieved_rate, api_base, arrival_gaps, discover_model, main, run
from tests.served import NAME, free_port, running, small_app


@pytest.fixture(scope="module")
def server(smollm2):
    _, tokenizer = smollm2
    app = small_app(tokenizer, max_num_seqs=4, max_model_len=128)
    with running(app) as url:
        yield url, app.state.engine


@pytest.mark.parametrize("url, base", [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),  # the root, as AIPerf, guidellm and vLLM take it
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),  # the API's base, as the openai client takes it
    ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
    (" https://example.org/openai/v1 ", "https://example.org/openai/v1"),
    ("https://example.org/proxy", "https://example.org/proxy"),  # any other path is a proxy's base: kept
])
def test_the_url_as_the_peers_take_it(url, base):
    assert api_base(url) == base


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://host/v1", "http://", ""])
def test_a_url_that_is_not_a_servers(url):
    with pytest.raises(ValueError, match="is not an http:// or https:// URL"):
        api_base(url)


def test_what_answered_when_it_is_not_the_api(server):
    url, _ = server
    assert discover_model(api_base(url)) == NAME
    with pytest.raises(ValueError, match=r"/health/models answered HTTP 404 \(application/json\).*not OpenAI's API"):
        discover_model(f"{url}/health")
    with pytest.raises(ValueError, match="Nothing answered at http://127.0.0.1:.*/v1/models"):
        discover_model(f"http://127.0.0.1:{free_port()}/v1")


def test_python_m_llmperf_bench_at_the_servers_root_with_warm_up_and_a_cap(server, tmp_path, capsys):
    url, engine = server
    before = sum(engine.finished.values())
    out = tmp_path / "run.json"
    assert main(["--url", url, "--rate", "50", "--concurrency", "2", "--warmups", "3", "--num-requests", "8",
                 "--input-len", "4", "--output-len", "3", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{NAME} at {url}/v1, open loop at 50 requests/s, at most 2 in flight" in printed
    assert "(3 warm-up requests first, not counted)" in printed and "waited for a slot in the client" in printed
    assert "requests arrived at" in printed and "the gaps drawn for them average" in printed
    # The server's own counters, scraped from /metrics after the warm-up: the 8 requests' tokens, exactly.
    assert "the server's own count (/metrics, vLLM (and llmperf.serve)):" in printed and "λ·W" in printed
    assert "prompt tokens 32; the clients' usage says 32" in printed
    assert "generated tokens 24; the clients' usage says 24" in printed
    # Prompts of 4 tokens fill no 16-position block: nothing to find cached; and nothing was preempted.
    assert "prefix cache: 0 of 32 prompt tokens looked up were found cached (0.0 %)" in printed
    assert "preemptions: 0 (requests whose KV blocks were taken back" in printed
    saved = json.loads(out.read_text())
    assert len(saved["requests"]) == 8 and saved["command"].startswith("python -m llmperf.bench --url ")
    # What two runs need to be compared: where the client ran, and which definition each number follows.
    assert {"started", "processor", "cpu_count", "python", "httpx", "llmperf"} <= set(saved["environment"])
    assert saved["definitions"]["tpot"]["names"]["GenAI-Perf / AIPerf"] == "Inter Token Latency (ITL)"
    assert "guidellm's TPOT counts the first token in" in printed and "names per tool" in printed
    server = saved["server_metrics"]
    assert server["prefix_cache"] == [32, 0] and server["preemptions"] == 0
    assert server["after"]["vllm:generation_tokens_total"] - server["before"]["vllm:generation_tokens_total"] == 24
    assert sum(engine.finished.values()) - before == 8 + 3  # the warm-up requests were sent, and not counted


def test_a_cap_holds_requests_in_the_client_and_keeps_them_out_of_ttft(server):
    """All 8 arrive at once (rate inf) with at most 2 in flight: never more than 2 are at the server, and the
    later ones wait in the client, a wait recorded apart from their TTFT."""
    url, _ = server
    records = asyncio.run(run(f"{url}/v1", NAME, [[1001, 1002]] * 8, 6, rate=float("inf"), concurrency=2,
                              show_progress=False))
    assert all(r.ok for r in records)
    spans = [(r.sent, r.token_times[-1]) for r in records]
    for start, _ in spans:
        assert sum(s <= start < e for s, e in spans) <= 2
    waits = sorted(r.queued for r in records)
    assert waits[:2] == pytest.approx([0, 0], abs=0.05) and waits[-1] > 0
    assert achieved_rate(records) > 100  # all arrived within a few ms: far above any rate a server could keep


def test_a_run_keeps_the_collector_off_the_objects_made_before_it(server, monkeypatch):
    """While requests are sent, what existed before the run is frozen (out of the garbage collector's scans: a
    full collection over a big heap would hold the event loop); afterwards it is given back, and a freeze made
    by someone else is left as it was."""
    import gc

    from llmperf.bench import load

    url, _ = server
    seen, real_send = [], load.send

    async def watched_send(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        return await real_send(*args, **kwargs)

    monkeypatch.setattr(load, "send", watched_send)
    assert gc.get_freeze_count() == 0
    records = asyncio.run(run(f"{url}/v1", NAME, [[1001]] * 3, 2, rate=50.0, show_progress=False))
    assert all(r.ok for r in records) and len(seen) == 3 and min(seen) > 0
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        asyncio.run(run(f"{url}/v1", NAME, [[1001]], 2, concurrency=1, show_progress=False))
        assert gc.get_freeze_count() > 0  # the caller's freeze, kept (unfrozen, the count would be 0)
    finally:
        gc.unfreeze()


def test_the_achieved_rate_is_the_drawn_schedules(server):
    """At 25 requests/s the sender keeps to the schedule it drew: the arrivals' rate matches the drawn gaps',
    which is what a sender that fell behind (vLLM's once sent 183.5/s when asked for 200) would not show."""
    url, _ = server
    n, rate = 12, 25.0
    records = asyncio.run(run(f"{url}/v1", NAME, [[1001]] * n, 2, rate=rate, show_progress=False, seed=5))
    drawn = (n - 1) / sum(arrival_gaps(rate, n, seed=5)[1:])
    assert achieved_rate(records) == pytest.approx(drawn, rel=0.2)


@pytest.mark.parametrize("kwargs, words", [
    (dict(), r"Give a rate \(open loop\), a concurrency \(closed loop\), or both"),
    (dict(rate=0.0), "rate must be > 0"),
    (dict(rate=1.0, concurrency=0), "concurrency must be at least 1"),
    (dict(concurrency=1, warmups=-1), "warmups must be 0 or more"),
])
def test_run_refuses_impossible_loads_before_sending(kwargs, words):
    with pytest.raises(ValueError, match=words):
        asyncio.run(run(f"http://127.0.0.1:{free_port()}/v1", NAME, [[1]], 1, show_progress=False, **kwargs))


@pytest.mark.parametrize("how, said", [
    (["--concurrency", "2"], "completed 3, failed 0"),
    (["--sweep", "concurrency", "--sweep-values", "1,2", "--turns", "2", "--plot", "PLOT"], "knee:"),
    (["--chat", "--concurrency", "1"], "the client's count 3.0 (SmolLM2"),  # its tokenizer from the GGUF file
], ids=["a run", "a sweep of conversations, drawn", "chat with synthetic text"])
def test_the_load_generator_runs_where_torch_cannot_be_imported(server, how, said, tmp_path):
    """A reader points it at vLLM from a machine without PyTorch: `import torch` is made to fail, and the
    command still loads the server and prints its summary (or its sweep, and draws it)."""
    import subprocess
    import sys

    url, _ = server
    how = [str(tmp_path / "sweep.svg") if a == "PLOT" else a for a in how]
    code = """
import importlib.abc, runpy, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
sys.meta_path.insert(0, NoTorch())
sys.argv = ["llmperf.bench", "--url", sys.argv[1], "--num-requests", "3", "--input-len", "3", "--output-len", "2",
            *sys.argv[2:]]
try:
    runpy.run_module("llmperf.bench", run_name="__main__")
except SystemExit as e:
    assert "torch" not in sys.modules and e.code == 0, e.code
"""
    out = subprocess.run([sys.executable, "-c", code, url, *how], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and said in out.stdout, out.stdout + out.stderr


def test_a_server_without_metrics_is_loaded_all_the_same(server, capsys):
    """A server whose /metrics is missing (here: a path with nothing under it) is reported as such; the run
    itself is unchanged."""
    from llmperf.bench import scrape_metrics

    url, _ = server

    async def scraped():
        async with scrape_metrics(f"{url}/nothing/v1") as view:
            return view

    assert asyncio.run(scraped()) is None
    with pytest.raises(ValueError, match="interval must be > 0"):
        asyncio.run(scrape_metrics(url, interval=0).__aenter__())


def test_python_m_llmperf_bench_with_drawn_lengths_and_shared_prefixes(server, tmp_path, capsys):
    from llmperf.bench.workloads import lengths

    url, _ = server
    out = tmp_path / "run.json"
    assert main(["--url", url, "--concurrency", "2", "--num-requests", "6", "--input-len", "4", "--output-len", "6",
                 "--length-dist", "uniform", "--output-spread", "0.5", "--shared-prefix", "3", "--prefix-groups", "2",
                 "--json", str(out)]) == 0
    requests = json.loads(out.read_text())["requests"]
    assert [r["output_tokens"] for r in requests] == lengths(6, 6, 0.5, "uniform", seed=1)  # ignore_eos: as drawn
    assert [r["input_tokens"] for r in requests] == [3 + 4] * 6
    with pytest.raises(SystemExit):
        main(["--url", url, "--rate", "1", "--length-dist", "uniform", "--input-spread", "1.5"])
    assert "A uniform spread is a fraction of the mean" in capsys.readouterr().err


def test_python_m_llmperf_bench_draws_the_run(server, tmp_path, capsys):
    url, _ = server
    png = tmp_path / "run.png"
    assert main(["--url", url, "--concurrency", "2", "--num-requests", "6", "--input-len", "4", "--output-len", "5",
                 "--ttft-slo", "500", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"figure: {png}" in capsys.readouterr().out
    for bad in (tmp_path / "run.jpg", tmp_path / "missing" / "run.png"):
        with pytest.raises(SystemExit):
            main(["--url", url, "--concurrency", "1", "--plot", str(bad)])
        assert "--plot needs a .png, .svg or .pdf file in a folder that exists" in capsys.readouterr().err


def test_the_run_figure_shows_each_distribution_and_the_objectives():
    from llmperf.bench.report import run_figure
    from llmperf.metrics import RequestRecord

    records = [RequestRecord(i, [i + 0.1 + 0.01 * i, i + 0.12 + 0.01 * i, i + 0.15 + 0.01 * i], 3, 3)
               for i in range(10)] + [RequestRecord(20.0, error="HTTP 500")]
    fig = run_figure(records, "a run", {"ttft": 0.2, "tpot": 0.02})
    ttft_ax, tpot_ax, itl_ax = fig.axes
    labels = [line.get_label() for line in ttft_ax.get_lines()]
    assert "TTFT of 10 requests" in labels and "objective 200 ms" in labels and any("p99 =" in x for x in labels)
    assert "objective 20 ms" in [line.get_label() for line in tpot_ax.get_lines()]
    assert sum(p.get_height() for p in itl_ax.patches) == 20  # two gaps per request
    with pytest.raises(ValueError, match="No request succeeded"):
        run_figure(records[-1:], "nothing")


def test_only_the_samples_a_view_reads_are_parsed():
    """A server's /metrics is mostly histograms; the scraper parses only the gauges and counters it reads, each
    summed over its label sets, comments and all else left out."""
    from llmperf.bench.scrape import WANTED, parse

    text = "\n".join(["# HELP vllm:num_requests_running Requests running.", "# TYPE vllm:num_requests_running gauge",
                      'vllm:num_requests_running{model_name="a"} 2.0', 'vllm:num_requests_running{model_name="b"} 1.0',
                      'vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="a"} 7.0',
                      "vllm:num_requests_running_extra 9.0", "sglang:num_queue_reqs 4", ""])
    assert parse(text, WANTED) == {"vllm:num_requests_running": 3.0, "sglang:num_queue_reqs": 4.0}
    assert parse(text)["vllm:e2e_request_latency_seconds_bucket"] == 7.0  # without `wanted`: everything


def test_a_view_reads_the_prefix_cache_and_preemptions_where_the_server_counts_them():
    """vLLM V1's counters grown over the run: the hit rate in tokens, and the preemptions; a server without them
    (SGLang's names here) gets neither line."""
    from llmperf.bench.scrape import CACHE, SERVERS, ServerView

    names = SERVERS["vLLM (and llmperf.serve)"]
    before = {names[2]: 0.0, names[3]: 0.0, CACHE[0]: 100.0, CACHE[1]: 20.0, CACHE[2]: 1.0}
    after = {names[2]: 0.0, names[3]: 0.0, CACHE[0]: 500.0, CACHE[1]: 320.0, CACHE[2]: 4.0}
    view = ServerView("vLLM (and llmperf.serve)", names, before, after)
    assert view.prefix_cache == (400.0, 300.0) and view.preemptions == 3.0
    said = view.report([])
    assert "prefix cache: 300 of 400 prompt tokens looked up were found cached (75.0 %)" in said
    assert "preemptions: 3 (requests whose KV blocks" in said
    other = ServerView("SGLang", SERVERS["SGLang"], {}, {})
    assert other.prefix_cache is None and other.preemptions is None
    assert "prefix cache" not in other.report([]) and "preemptions" not in other.report([])
