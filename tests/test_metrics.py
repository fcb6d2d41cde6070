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

