"""The load generator's arrival process and prompts (its HTTP side is tested against the server in test_serve)."""

import statistics

import pytest

from llmperf.bench import arrival_gaps, synthetic_prompts


@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_arrival_gaps_have_the_rate_and_burstiness_asked_for(burstiness):
    gaps = arrival_gaps(rate=5.0, n=40_000, burstiness=burstiness, seed=1)
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / 5.0, rel=0.03)
    # A gamma distribution of shape b has a squared coefficient of variation of 1 / b: b = 1 is exponential
    # (Poisson arrivals), smaller b burstier, larger b more regular.
    assert statistics.pvariance(gaps) / mean**2 == pytest.approx(1 / burstiness, rel=0.06)


def test_arrival_gaps_are_reproducible_and_infinite_rate_sends_at_once():
    assert arrival_gaps(2.0, 10, seed=3) == arrival_gaps(2.0, 10, seed=3) != arrival_gaps(2.0, 10, seed=4)
    assert arrival_gaps(float("inf"), 4) == [0.0] * 4


@pytest.mark.parametrize("kwargs", [dict(rate=0.0, n=3), dict(rate=1.0, n=3, burstiness=0.0), dict(rate=1.0, n=-1)])
def test_arrival_gaps_refuse_impossible_settings(kwargs):
    with pytest.raises(ValueError, match="Need rate > 0"):
        arrival_gaps(**kwargs)


def test_synthetic_prompts():
    prompts = synthetic_prompts(3, 17, seed=2)
    assert len(prompts) == 3 and all(len(p) == 17 and all(1000 <= t < 32_000 for t in p) for p in prompts)
    assert prompts == synthetic_prompts(3, 17, seed=2)
    with pytest.raises(ValueError, match="input_len >= 1"):
        synthetic_prompts(3, 0)


@pytest.mark.parametrize("ignore_eos", [True, False])
def test_what_a_request_asks_a_server_for(ignore_eos):
    """The body `send` posts, read off a mock transport: streaming with usage, greedy, max_tokens, and
    ignore_eos (vLLM's extension) unless the caller lets the server stop at its end-of-sequence token."""
    import asyncio
    import json

    import httpx

    from llmperf.bench import send

    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content)))
        events = ['{"choices": [{"text": "a"}]}', '{"choices": [], "usage": {"prompt_tokens": 2, '
                  '"completion_tokens": 1}}', "[DONE]"]
        return httpx.Response(200, text="".join(f"data: {e}\n\n" for e in events))

    async def one():
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            return await send(client, "http://server/v1", "m", [5, 6], 7, ignore_eos=ignore_eos)

    record = asyncio.run(one())
    assert record.ok and (record.input_tokens, record.output_tokens) == (2, 1)
    assert seen == [("/v1/completions", {"model": "m", "max_tokens": 7, "temperature": 0.0, "stream": True,
                                         "stream_options": {"include_usage": True}, "ignore_eos": ignore_eos,
                                         "prompt": [5, 6]})]


@pytest.mark.parametrize("distribution, spread", [("fixed", 0.0), ("uniform", 0.5), ("normal", 0.25),
                                                  ("exponential", 0.0)])
def test_lengths_are_drawn_about_their_mean_as_the_peers_draw_them(distribution, spread):
    from llmperf.bench.workloads import lengths

    drawn = lengths(20_000, 100, spread, distribution, seed=1)
    assert drawn == lengths(20_000, 100, spread, distribution, seed=1) and min(drawn) >= 1
    assert statistics.fmean(drawn) == pytest.approx(100, rel=0.03)
    if distribution == "fixed":
        assert set(drawn) == {100}
    if distribution == "uniform":  # vLLM's --random-range-ratio: uniform over mean·(1 ± spread)
        assert (min(drawn), max(drawn)) == (50, 150)
    if distribution == "normal":  # guidellm's: a standard deviation of spread·mean
        assert statistics.pstdev(drawn) == pytest.approx(25, rel=0.05)
    if distribution == "exponential":  # a long tail: the standard deviation is the mean
        assert statistics.pstdev(drawn) == pytest.approx(100, rel=0.05)


@pytest.mark.parametrize("kwargs, words", [
    (dict(n=3, mean=10, distribution="zipf"), "Unknown length distribution 'zipf'"),
    (dict(n=3, mean=0), "a mean length of at least 1"),
    (dict(n=3, mean=10, spread=1.0, distribution="uniform"), "a fraction of the mean in"),
    (dict(n=3, mean=10, spread=-0.1, distribution="normal"), "spread must be 0 or more"),
])
def test_lengths_refuse_what_cannot_be_drawn(kwargs, words):
    from llmperf.bench.workloads import lengths

    with pytest.raises(ValueError, match=words):
        lengths(**kwargs)


def test_prompts_of_a_group_share_their_prefix():
    from llmperf.bench.workloads import prompts

    drawn = prompts([3, 5, 4, 2, 6], prefix=8, groups=2, seed=4)
    assert [len(p) for p in drawn] == [11, 13, 12, 10, 14]
    assert drawn[0][:8] == drawn[2][:8] == drawn[4][:8] != drawn[1][:8] == drawn[3][:8]
    assert len({tuple(p[8:]) for p in drawn}) == 5  # each its own after the prefix
    assert prompts([7, 7], seed=2) == synthetic_prompts(2, 7, seed=2)  # no prefix: the plain synthetic prompts
    with pytest.raises(ValueError, match="Need sizes >= 1"):
        prompts([3, 0])


def test_exact_arrival_gaps_arrive_at_the_rate_asked():
    """24 drawn gaps average well off 1/rate; scaled, the 23 between the arrivals average exactly 1/rate, and
    every gap keeps its share of the whole."""
    drawn, exact = arrival_gaps(2.0, 24, seed=0), arrival_gaps(2.0, 24, seed=0, exact=True)
    assert abs(23 / sum(drawn[1:]) - 2.0) > 0.05
    assert 23 / sum(exact[1:]) == pytest.approx(2.0)
    assert [e / sum(exact) for e in exact] == pytest.approx([d / sum(drawn) for d in drawn])
    assert arrival_gaps(2.0, 1, exact=True) == arrival_gaps(2.0, 1)
