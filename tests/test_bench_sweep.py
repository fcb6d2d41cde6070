"""Sweeps (llmperf.bench.sweep) against a stub server of known capacity: it serves at most N requests at once,
each taking TTFT + (TOKENS − 1)·GAP = D seconds, so it completes at most N ÷ D requests/s
(tests/stub_server.py). The sweep must find that capacity, put the knee where throughput stops rising, and
say which loads met the objectives, checked here from each point's records; then the command's sweep, its
refusals, and a concurrency sweep of llmperf.serve itself."""

import asyncio
import json
import math

import pytest

from llmperf.bench import main, sweep
from llmperf.bench.sweep import Point, Sweep
from llmperf.metrics import RequestRecord
from tests.served import NAME, free_port, running, small_app
from tests.stub_server import started

TTFT, GAP, TOKENS, REQUESTS = 0.05, 0.01, 6, 20
D = TTFT + (TOKENS - 1) * GAP  # seconds per request on the stub
PROMPTS = [[1000 + i] for i in range(REQUESTS)]


def by_rate(url: str, **options) -> Sweep:
    return asyncio.run(sweep(f"{url}/v1", "stub", PROMPTS, TOKENS, steps=3, show_progress=False, warmups=2,
                             **options))


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n} slots")
def stub(request):
    with started(free_port(), TTFT, GAP, capacity=request.param) as url:
        yield url, request.param


@pytest.fixture(scope="module")
def rate_sweep(stub):
    url, slots = stub
    return by_rate(url, objectives={"e2e": 2.5 * D}), slots


def test_a_rate_sweep_finds_the_known_capacity(rate_sweep):
    result, slots = rate_sweep
    labels = [p.label for p in result.points]
    assert labels == ["synchronous", "rate", "rate", "rate", "throughput"]  # lightest load first
    capacity = result.capacity.summary.request_throughput
    print(f"\n{slots} slots: capacity {capacity:.2f} requests/s measured, {slots / D:.2f} known")
    assert capacity == pytest.approx(slots / D, rel=0.1)
    synchronous = result.points[0]
    spans = sorted((r.sent, r.end) for r in synchronous.records)
    assert all(start >= end for (_, end), (start, _) in zip(spans, spans[1:]))  # one at a time
    # Never faster than one request per D; slower by what the client and server spend on each request besides the
    # stub's waits (5-11 ms in 100 on the 2-core hosts here, more on a loaded one).
    assert 0.75 / D <= synchronous.summary.request_throughput <= 1.01 / D
    rates = [p.rate for p in result.points[1:-1]]
    assert rates == sorted(rates) and result.points[0].summary.request_throughput < rates[0] < rates[-1] < capacity
    assert result.knee is not None and result.knee.label != "throughput"  # all at once only buys latency
    assert result.knee.summary.output_throughput <= result.capacity.summary.output_throughput


def test_the_sweep_says_which_loads_met_the_objectives(rate_sweep):
    result, _ = rate_sweep
    limit = result.objectives["e2e"]
    met = []
    for p in result.points:  # from the records themselves, not from the summary
        within = sum(r.ok and r.times.e2e <= limit for r in p.records) / len(p.records)
        assert p.attainment == pytest.approx(within)
        met.append(within >= 0.9)
    assert not met[-1], "every request at once should have queued past 2.5 D"
    best = result.best
    assert best is not None and met[result.points.index(best)]
    assert not any(met[result.points.index(best) + 1:])
    assert f"at most at {best.load}" in result.report()


def test_an_objective_no_load_meets_is_said_so(stub):
    url, _ = stub
    result = asyncio.run(sweep(f"{url}/v1", "stub", PROMPTS[:6], TOKENS, values=[5.0], show_progress=False,
                               objectives={"ttft": TTFT / 2}))  # faster than the stub ever answers
    assert result.best is None and [p.attainment for p in result.points] == [0.0]
    assert "at no load of the sweep" in result.report()


def test_a_concurrency_sweep_puts_the_knee_at_the_slots():
    with started(free_port(), TTFT, GAP, capacity=2) as url:
        result = asyncio.run(sweep(f"{url}/v1", "stub", PROMPTS[:12], TOKENS, kind="concurrency", values=[1, 2, 4, 8],
                                   show_progress=False, warmups=2))
    served = [p.summary.request_throughput for p in result.points]
    e2e = [p.summary.e2e.median for p in result.points]
    print(f"\nrequests/s at 1, 2, 4, 8 clients: {[round(s, 2) for s in served]}; median E2E (s): "
          f"{[round(e, 3) for e in e2e]}")
    assert result.knee.concurrency == 2  # two slots: a third client only waits
    assert served[1] == pytest.approx(2 * served[0], rel=0.1)  # each slot's idle moments between requests alike
    # Eight clients keep both slots busy, two leave them idle while each client turns round: at least what two got,
    # and never more than two slots serve.
    assert 0.98 * served[1] <= served[3] <= 1.01 * 2 / D
    assert e2e[2] == pytest.approx(2 * e2e[1], rel=0.15)  # four clients on two slots: each waits one request
    assert e2e[3] > 1.5 * e2e[2]  # eight queue deeper still


def records(throughput: float, latency: float, n: int = 10) -> list[RequestRecord]:
    """n one-token requests of `latency` s, sent 1/throughput s apart (n − 1 gaps and one latency span the run)."""
    gap = (n / throughput - latency) / (n - 1)
    return [RequestRecord(sent=i * gap, token_times=[i * gap + latency], output_tokens=1) for i in range(n)]


def test_the_knee_is_the_point_farthest_below_the_chord():
    curve = [(10, 0.10), (20, 0.11), (28, 0.14), (30, 0.40), (30.5, 1.0)]  # requests/s, E2E s
    points = [Point("rate", x, None, records(x, y)) for x, y in curve]
    assert Sweep("rate", points).knee is points[2]
    assert Sweep("rate", points[:2]).knee is None  # two points have no bend
    flat = [Point("rate", x, None, records(10, 0.1)) for x in (1, 2, 3)]
    assert Sweep("rate", flat).knee is None
    assert "knee: none" in Sweep("rate", flat).report()


@pytest.mark.parametrize("args, said", [
    (["--sweep", "rate", "--rate", "2"], "chooses its own rates"),
    (["--sweep", "concurrency", "--concurrency", "2"], "as --sweep-values"),
    (["--sweep", "rate", "--sweep-values", "1,x"], "comma-separated numbers"),
    (["--sweep", "rate", "--sweep-values", "0,2"], "rates > 0"),
    (["--sweep", "concurrency", "--sweep-values", "1.5"], "whole numbers"),
    (["--sweep", "rate", "--attainment", "0"], "--attainment"),
    (["--concurrency", "2", "--sweep-steps", "3"], "are for a sweep"),
])
def test_the_command_refuses_a_bad_sweep_before_any_request(args, said, capsys):
    with pytest.raises(SystemExit) as exit:  # port 9 on loopback: nothing listens, and nothing is asked
        main(["--url", "http://127.0.0.1:9", *args])
    assert exit.value.code == 2 and said in capsys.readouterr().err


def test_the_command_sweeps_and_writes_the_sweep(tmp_path, capsys):
    out = tmp_path / "sweep"
    with started(free_port(), TTFT, GAP, capacity=2) as url:
        assert main(["--url", url, "--sweep", "rate", "--sweep-steps", "1", "--num-requests", "8",
                     "--output-len", str(TOKENS), "--input-len", "4", "--e2e-slo", str(3e3 * D), "--no-metrics",
                     "--json", f"{out}.json", "--csv", f"{out}.csv", "--plot", f"{out}.svg"]) == 0
    said = capsys.readouterr().out
    assert "capacity:" in said and "knee:" in said and "met by 90% of requests" in said and "names per tool" in said
    written = json.loads(out.with_suffix(".json").read_text())
    assert written["environment"]["cpu_count"] and written["definitions"]["tpot"]["names"]["guidellm"] == "ITL"
    points = written["sweep"]["points"]
    assert [p["label"] for p in points] == ["synchronous", "rate", "throughput"] and points[-1]["rate"] == "inf"
    assert all(len(p["requests"]) == 8 for p in points) and written["sweep"]["capacity"] == "all at once"
    assert len(out.with_suffix(".csv").read_text().splitlines()) == 1 + 3  # a heading and a row per point
    assert out.with_suffix(".svg").read_text().lstrip().startswith("<?xml")


def test_a_concurrency_sweep_of_llmperf_serve(smollm2):
    _, tokenizer = smollm2
    with running(small_app(tokenizer, max_num_seqs=4)) as base:
        result = asyncio.run(sweep(f"{base}/v1", NAME, [[1000 + i] * 8 for i in range(8)], 8, kind="concurrency",
                                   values=[1, 4], show_progress=False, warmups=2))
    assert [p.concurrency for p in result.points] == [1, 4]
    assert all(p.summary.completed == 8 and p.summary.failed == 0 for p in result.points)
    assert not math.isnan(result.capacity.summary.output_throughput)
