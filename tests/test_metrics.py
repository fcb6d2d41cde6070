"""One request's latency metrics from its timestamps, as vLLM, MLPerf and GenAI-Perf define them."""

import pytest

from llmperf.metrics import RequestTimes


def test_ttft_e2e_tpot_and_gaps():
    r = RequestTimes(sent=10.0, token_times=[10.5, 10.6, 10.8, 11.1])
    assert r.n_tokens == 4
    assert r.ttft == pytest.approx(0.5) and r.e2e == pytest.approx(1.1)
    assert r.tpot == pytest.approx((1.1 - 0.5) / 3)  # (E2E − TTFT) / (n − 1)
    assert r.itl == pytest.approx([0.1, 0.2, 0.3])
    assert r.tpot == pytest.approx(sum(r.itl) / len(r.itl))  # TPOT is the mean gap after the first token
    assert r.token_times == (10.5, 10.6, 10.8, 11.1)  # stored as a tuple: the record cannot change


def test_one_token_has_no_tpot():
    r = RequestTimes(0.0, [0.25])
    assert r.ttft == r.e2e == 0.25 and r.tpot is None and r.itl == []


@pytest.mark.parametrize("sent, times, message", [
    (0.0, [], "no output tokens"),
    (5.0, [4.0, 6.0], "before the request was sent"),
    (0.0, [1.0, 3.0, 2.0], "must not decrease"),
])
def test_impossible_timestamps_are_refused(sent, times, message):
    with pytest.raises(ValueError, match=message):
        RequestTimes(sent, times)



def test_chunks_holding_several_tokens():
    # 3 chunks carrying 7 tokens (the server's usage): TPOT divides by the 6 gaps between tokens, while the
    # gaps a client can see are the 2 between chunks.
    r = RequestTimes(0.0, [0.4, 0.7, 1.0], tokens=7)
    assert r.n_tokens == 7 and r.tpot == pytest.approx(0.6 / 6) and r.itl == pytest.approx([0.3, 0.3])
    with pytest.raises(ValueError, match="cannot carry only 2 tokens"):
        RequestTimes(0.0, [0.4, 0.7, 1.0], tokens=2)


# --- a whole run ---------------------------------------------------------------------------------

from llmperf.bench.report import format_summary  # noqa: E402
from llmperf.metrics import RequestRecord, littles_law, percentile, summarize  # noqa: E402

RUN = [  # hand-made: sent, chunk arrivals, input and output tokens
    RequestRecord(0.0, [0.5, 0.6, 0.8, 1.1], input_tokens=10, output_tokens=4),  # TTFT .5, TPOT .2, E2E 1.1
    RequestRecord(0.5, [0.8, 1.0], input_tokens=20, output_tokens=2),             # TTFT .3, TPOT .2, E2E .5
    RequestRecord(1.0, [1.9], input_tokens=5, output_tokens=1),                   # TTFT .9, no TPOT, E2E .9
    RequestRecord(1.2, [], input_tokens=8, error="HTTP 503"),                     # failed: excluded, counted
    RequestRecord(1.5, [1.6], input_tokens=8, output_tokens=0),                   # no tokens: excluded, counted
    RequestRecord(1.6, [], input_tokens=8, error="HTTP 503"),
]


def test_run_summary_by_hand():
    s = summarize(RUN)
    assert (s.completed, s.failed, s.errors) == (3, 3, {"HTTP 503": 2, "no tokens": 1})
    assert s.duration == pytest.approx(1.9)  # first sent (0.0) to the last request ended (1.9)
    assert s.request_throughput == pytest.approx(3 / 1.9)
    assert s.output_throughput == pytest.approx(7 / 1.9)
    assert s.total_throughput == pytest.approx((7 + 35) / 1.9)  # completed requests' input + output
    assert s.ttft.mean == pytest.approx(1.7 / 3) and s.ttft.median == pytest.approx(0.5)
    assert s.tpot.count == 2 and s.tpot.mean == pytest.approx(0.2)  # the one-token request has no TPOT
    assert s.itl.count == 4 and s.itl.mean == pytest.approx((0.1 + 0.2 + 0.3 + 0.2) / 4)  # every gap pooled
    assert s.e2e.p99 == pytest.approx(percentile([1.1, 0.5, 0.9], 99))
    assert "completed 3, failed 3" in format_summary(s) and "TPOT" in format_summary(s)
    assert s.errors == {"HTTP 503": 2, "no tokens": 1}  # by kind, most common first


def test_the_duration_is_the_runs_wall_time_failed_requests_included():
    """A request that failed late stretches the run: the throughputs fall, the latencies (of the successful
    requests only) stay."""
    stalled = [*RUN, RequestRecord(1.7, [], error="timeout: no whole answer within 5 s", ended=6.7)]
    s, before = summarize(stalled), summarize(RUN)
    assert s.duration == pytest.approx(6.7) and s.request_throughput == pytest.approx(3 / 6.7)
    assert s.ttft == before.ttft and s.errors == {"HTTP 503": 2, "no tokens": 1, "timeout": 1}
    assert s.error_examples["timeout"] == "timeout: no whole answer within 5 s"


def test_itl_weighs_tokens_and_tpot_weighs_requests():
    # A long answer with short gaps and a short answer with long ones: pooled gaps follow the long answer.
    long = RequestRecord(0.0, [0.1 + 0.01 * i for i in range(101)])
    short = RequestRecord(0.0, [0.1, 0.3])
    s = summarize([long, short])
    assert s.tpot.mean == pytest.approx((0.01 + 0.2) / 2)
    assert s.itl.mean == pytest.approx((100 * 0.01 + 0.2) / 101)


def test_goodput_counts_requests_meeting_every_objective():
    s = summarize(RUN, objectives={"ttft": 0.6, "tpot": 0.25})
    assert s.goodput == pytest.approx(2 / 1.9)  # TTFT .9 fails; the one-token request has no TPOT to fail
    assert summarize(RUN, objectives={"e2e": 0.6}).goodput == pytest.approx(1 / 1.9)
    assert summarize(RUN).goodput is None


def test_percentile_methods():
    values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert percentile(values, 90) == pytest.approx(9.1)  # interpolated between 9 and 10
    assert percentile(values, 90, method="nearest_rank") == 9  # the 9th of 10 values
    assert percentile(values, 99, method="nearest_rank") == 10
    assert percentile([5.0], 50) == 5.0
    assert summarize(RUN, method="nearest_rank").ttft.median == 0.5


@pytest.mark.parametrize("call, message", [
    (lambda: summarize([]), "no requests"),
    (lambda: summarize([RequestRecord(0.0, error="timeout")]), "None of the 1 requests completed"),
    (lambda: summarize(RUN, objectives={"latency": 1.0}), "Unknown latency objective"),
    (lambda: summarize(RUN, method="median"), "Unknown percentile method"),
    (lambda: percentile([], 50), "No values"),
    (lambda: percentile([1.0], 101), "between 0 and 100"),
    (lambda: littles_law(RUN, start=2.0, end=1.0), "empty"),
    (lambda: littles_law(RUN, start=1.95, end=3.0), "No request was sent inside the window"),
])
def test_bad_runs_get_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_littles_law():
    # Over the whole run, L equals λ·W exactly: total time in flight ÷ duration, counted two ways.
    L, lam_w = littles_law(RUN)
    assert L == pytest.approx((1.1 + 0.5 + 0.9) / 1.9) and lam_w == pytest.approx(L)
    # A steady stream: one request every 0.1 s, each in flight 0.35 s. Inside the stream, 3.5 are in flight.
    steady = [RequestRecord(0.1 * i, [0.1 * i + 0.35]) for i in range(100)]
    L, lam_w = littles_law(steady, start=2.0, end=8.0)
    assert L == pytest.approx(3.5) and lam_w == pytest.approx(3.5)
    # A queue that keeps growing: latency rises with each arrival, and the two part by far more than 10 %.
    growing = [RequestRecord(0.1 * i, [0.1 * i + 0.05 * i]) for i in range(1, 100)]
    L, lam_w = littles_law(growing, start=2.0, end=8.0)
    assert abs(L / lam_w - 1) > 0.3


def test_time_average_holds_each_sample_until_the_next():
    from llmperf.metrics import time_average

    samples = [(0.0, 2), (1.0, 4), (3.0, 0)]
    assert time_average(samples, 0.0, 4.0) == pytest.approx((2 * 1 + 4 * 2 + 0 * 1) / 4)
    assert time_average(samples, 0.5, 2.0) == pytest.approx((2 * 0.5 + 4 * 1) / 1.5)
    # Before the first sample nothing is known: the window starts there.
    assert time_average([(1.0, 3), (2.0, 1)], 0.0, 3.0) == pytest.approx((3 + 1) / 2)
    with pytest.raises(ValueError, match="before the window's end"):
        time_average([(5.0, 1)], 0.0, 4.0)
    with pytest.raises(ValueError, match="time order"):
        time_average([(2.0, 1), (1.0, 1)], 0.0, 4.0)


def test_littles_law_with_the_servers_polled_count():
    from llmperf.metrics import littles_law_polled

    # Two requests, in flight over [0, 2] and [1, 3]: λ·W = 2 / 3 s × 2 s = 4/3.
    records = [RequestRecord(0.0, [1.0, 2.0]), RequestRecord(1.0, [2.5, 3.0])]
    honest = [(0.0, 1), (1.0, 2), (2.0, 1), (3.0, 0)]  # what a server holding them would report
    L, lam_w = littles_law_polled(records, honest)
    assert lam_w == pytest.approx(4 / 3) and L == pytest.approx(4 / 3)
    missed = [(0.0, 1), (1.0, 1), (3.0, 0)]  # a server that loses count of one: the check sees it
    L, _ = littles_law_polled(records, missed)
    assert L == pytest.approx(1.0)
    with pytest.raises(ValueError, match="none completed"):
        littles_law_polled([RequestRecord(0.0, error="HTTP 500")], honest)
