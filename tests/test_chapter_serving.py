"""Chapter 6 (serving metrics): every branch of the sentences chosen from its numbers; the experiments, each
run on the tiny preset (SmolLM2's vocabulary) served on a free loopback port; the records' checks both ways on
hand-built records; the sums on Llama-3-8B and the H100.
"""

import dataclasses
import json

import numpy as np
import pytest
import torch

from llmperf import bench, build_model, hardware, metrics
from llmperf.chapters import serving
from llmperf.chapters.setup import Setup, sizes_for_type
from llmperf.config import get_config
from llmperf.metrics import RequestRecord
from llmperf.plots import serving as figures

H100 = hardware.ACCELERATORS["H100 SXM"]


def test_serving_wording():
    assert "within 2 %" in serving.itl_against_tpot(0.100, 0.101)
    assert "above it" in serving.itl_against_tpot(0.100, 0.120) and "longer gaps" in serving.itl_against_tpot(0.1, 0.12)
    assert "below it" in serving.itl_against_tpot(0.100, 0.080)
    assert "both peak at batch 16" in serving.goodput_peak(BATCHES, [1, 2, 3], [1, 2, 3])
    earlier = serving.goodput_peak(BATCHES, [1, 2, 3], [1, 2, 0])
    assert "goodput at batch 4: past that, batching adds" in earlier
    later = serving.goodput_peak(BATCHES, [1, 3, 2.5], [1, 1, 2])  # goodput peaks past throughput's peak
    assert "throughput peaks at batch 4 but goodput at the larger batch 16" in later and "past that" not in later
    assert "so many of batch 4's requests missed the objectives" in later
    assert "zero throughout" in serving.goodput_peak(BATCHES, [1, 2, 3], [0, 0, 0])
    assert "took 3.0 times as long" in serving.warm_up(0.3, 0.1)
    calm = serving.warm_up(0.11, 0.1)
    assert "not much slower" in calm and "one-time costs this server paid were small" in calm
    assert "had already run" not in calm  # no cause the run did not measure


def ttfts(p50, p90, p99):
    return {50: p50, 90: p90, 99: p99}


CLOSED = ttfts(0.1, 0.2, 0.4)


def omission(open_ttft, closed_sent=0):
    return serving.omission(closed_sent, 4, 3.5, CLOSED, open_ttft, 2.5)


def test_omission_every_branch():
    every = omission(ttfts(0.2, 0.5, 1.0))
    assert "sent 0 requests and the open loop 4, where users arriving at the open loop's rate would have sent 3.5" \
        in every
    assert "p50 200.0 ms against 100.0 ms, p90 500.0 ms against 200.0 ms, p99 1.00 s against 400.0 ms" in every
    assert "longer at every percentile" in every and "never sends them" in every
    # The executed run that filed the issue: p50 1,107 ms against 184 ms is no "close" tail.
    run = serving.omission(0, 3, 2.9, ttfts(0.184, 0.510, 0.9), ttfts(1.107, 3.035, 3.2), 1.0)
    assert "longer at every percentile" in run and "within 10 %" not in run
    tail = omission(ttfts(0.1, 0.3, 1.0))  # median equal, p90 and p99 longer
    assert "the median no longer, the tail longer (p90 and p99)" in tail and "room to spare" in tail
    assert "the tail longer (p99)" in omission(ttfts(0.09, 0.21, 0.5))  # only p99 more than 10 % above
    middle = omission(ttfts(0.2, 0.3, 0.42))  # p50 and p90 longer, p99 within 10 %
    assert "longer at p50 and p90 but not at p99" in middle
    shorter = omission(ttfts(0.05, 0.2, 0.4))
    assert "no longer at any percentile, and shorter at p50" in shorter and "counts alone" in shorter
    close = omission(ttfts(0.105, 0.21, 0.43))
    assert "within 10 % at every percentile" in close and "grows with the stall" in close
    assert "sent 1 request and" in omission(CLOSED, closed_sent=1)
    assert "sent 2 requests and" in omission(CLOSED, closed_sent=2)


def test_step_time_path_every_branch():
    rising = serving.step_time_path([1, 2, 4], [0.030, 0.040, 0.050])
    assert rising == ("Each step decodes more sequences, and took longer at every batch size here: mean TPOT went "
                      "from 30.0 ms at batch 1 to 50.0 ms at batch 4")
    # The executed run that filed the issue: from batch 2 to 4 the steps got shorter.
    dip = serving.step_time_path([1, 2, 4, 8], [0.030, 0.0482, 0.0471, 0.060])
    assert "from end to end the steps took longer" in dip and "but not at every step" in dip
    assert "it did not rise at batch 4 (47.1 ms against 48.2 ms at batch 2)" in dip
    flat = serving.step_time_path([1, 2, 4], [0.050, 0.060, 0.049])
    assert "yet the steps took no longer from end to end" in flat and "took longer" not in flat


def test_user_against_server_every_branch():
    faster = serving.user_against_server(39.4, 37.3)  # the executed run's batch 1
    assert "1 ÷ mean TPOT" in faster and "wall time" in faster and "TTFT" in faster
    assert "at batch 1, one request at a time, a user's 39.4 tokens/s exceed the server's 37.3" in faster
    slower = serving.user_against_server(30.0, 37.3)
    assert "wall time" in slower and "exceed" not in slower


def test_share_sample_size():
    assert serving.share_sample_size(0.9) == 139  # 1.96² × 0.9 × 0.1 / 0.05² = 138.3
    assert serving.share_sample_size(0.5) == 385 and serving.share_sample_size(0.9, 0.1) == 35
    assert serving.share_sample_size(1.0) == 0


BATCHES = [1, 4, 16]


def test_rate_sweep_wording():
    assert "no knee to find" in serving.knee_text(None, 0, 0)
    assert "is at 2 req/s: 1,234 tokens/s at a median E2E of 1.50 s" in serving.knee_text("2 req/s", 1234, 1.5)
    loads, served = ["1 at a time", "2 req/s", "all at once"], [1.0, 1.9, 3.0]
    none = serving.distserve_goodput(loads, served, [0.5, 0.2, 0.0], 0.9, None, 10)
    assert "not even one request at a time" in none and "requests: 5 of 10 (50 %) did, so" in none and "goodput is zero" in none
    every = serving.distserve_goodput(loads, served, [1.0, 1.0, 0.95], 0.9, 2, 20)
    assert "even with every request sent at once, 19 of 20 (95 %) met" in every
    assert "its capacity, 3.00 requests/s" in every
    between = serving.distserve_goodput(loads, served, [1.0, 0.9, 0.7], 0.9, 1, 10)
    assert ("the heaviest load at which 90 % of requests met the objectives was 2 req/s, serving 1.90 requests/s "
            "with 9 of 10 (90 %) within them") in between
    assert "at the next, all at once, only 7 of 10 (70 %) were" in between


def limits(ttft, tpot):
    """limits_met on a three-point sweep against limits of 0.5 s (TTFT) and 30 ms (TPOT)."""
    return serving.limits_met(BATCHES, ttft, tpot, 0.5, 0.03, "interactive")


def test_limits_met_every_branch():
    assert "every batch size in this sweep, up to 16, meets both" in limits([0.1] * 3, [0.02] * 3)
    text = serving.limits_met(BATCHES, [0.1, 0.3, 3.0], [0.02, 0.05, 0.2], 2.0, 0.1, "server")
    assert "hold at batch 1 and 4 only: p99 TTFT is over its limit at batch 16 and p99 TPOT is over" in text
    text = limits([0.1, 0.1, 1.0], [0.02, 0.05, 0.02])  # batch 4 misses TPOT only, batch 16 TTFT only
    assert "hold at batch 1 only" in text and "TTFT is over its limit at batch 16" in text
    assert "TPOT is over its limit at batch 4" in text
    assert "TPOT alone rules every one out" in limits([0.1] * 3, [0.05] * 3)
    assert "TTFT alone rules every one out" in limits([1.0] * 3, [0.01] * 3)
    assert "either limit alone rules every one out" in limits([1.0] * 3, [0.05] * 3)
    mixed = limits([1.0, 0.1, 1.0], [0.01, 0.05, 0.05])  # each batch misses one, no limit misses all
    assert "no batch size in this sweep meets both" in mixed and "neither limit alone" in mixed
    assert "alone rules every one out" not in mixed
    assert "TTFT is over its limit at batch 1 and 16" in mixed and "TPOT is over its limit at batch 4 and 16" in mixed
    assert serving.claims._batches([1, 4, 16]) == "1, 4 and 16"


def test_prefill_bursts_every_branch():
    burst = serving.prefill_bursts(16, 62, {16: 2, 0: 60}, 32, 32)
    assert "62 steps, and 2 of them admitted newcomers, 32 in all" in burst
    assert "16.0 at a time on average and up to 16, about one step in 31" in burst
    assert "prefilled in the same step, together, in one pass over all their prompts" in burst
    assert "waits for the whole pass" in burst
    long = serving.prefill_bursts(16, 62, {16: 2, 0: 60}, 32, 100)  # 16 of 100 tokens: passes of 5, 5, 5 and 1
    assert "in 4 passes over 4 steps (a step prefills at most 512 positions" in long
    on_a_gpu = serving.prefill_bursts(16, 62, {16: 2, 0: 60}, 32, 100, chunk=2048)  # 1,600 positions fit one step
    assert "in one pass over all their prompts" in on_a_gpu and "512" not in on_a_gpu
    assert "the passes before theirs" in long
    assert "most steps carried" in serving.prefill_bursts(4, 10, {1: 8, 0: 2}, 32, 32)
    spread = serving.prefill_bursts(4, 40, {1: 4, 0: 36}, 32, 32)
    assert "one at a time, about one step in 10" in spread
    assert "none admitted a newcomer" in serving.prefill_bursts(4, 0, {}, 32, 32)
    assert "none admitted" in serving.prefill_bursts(4, 3, {0: 3}, 32, 32)


def test_long_prefill_every_branch():
    assert "in one pass and every sequence decoding waits for all of it" in serving.long_prefill(32)
    assert "in 2 pieces of at most 512 positions, one a step" in serving.long_prefill(1024)
    assert "in 4 pieces of at most 256 positions" in serving.long_prefill(1000, 256)
    assert "it fits one step's prefill (at most 8,192 positions)" in serving.long_prefill(1024, 8192)  # a large GPU's


def test_percentiles_add_every_branch():
    assert "within 5 %" in serving.percentiles_add(50, 1.0, 1.02) and "p50 TTFT" in serving.percentiles_add(50, 1, 1)
    over = serving.percentiles_add(99, 1.0, 1.3)
    assert "30 % over" in over and "p99 of another" in over and "do not add" in over
    assert "20 % under" in serving.percentiles_add(99, 1.0, 0.8)


def spread(p50, p99):
    """percentile_spread for a run of 32 values whose largest is 2.5 s."""
    return serving.percentile_spread(p50, p99, 32, 2.5)


def test_percentile_spread_every_branch():
    wide = spread((0.3, 0.5), (1.0, 2.0))
    assert "the median stayed between 300.0 ms and 500.0 ms, the p99 between 1,000.0 ms and 2,000.0 ms" in wide
    assert "a range 5.0 times as wide" in wide and "by construction" not in wide
    assert "about as narrow" in spread((0.3, 0.5), (1.0, 1.2))
    # Either side of 1.5 times, in widths that binary floats hold exactly: median 0.25 s wide, p99 0.375 or 0.5 s.
    assert "about as narrow" in spread((0.25, 0.5), (1.0, 1.375))
    assert "a range 2.0 times as wide" in spread((0.25, 0.5), (1.0, 1.5))
    # A p99 narrower than the median: 0.25 s wide against a median 0.375 s (1.5 times) or 0.4375 s wide.
    assert "about as narrow" in spread((0.25, 0.625), (1.0, 1.25))
    narrower = spread((0.25, 0.6875), (1.0, 1.25))
    assert "the median's range was 1.8 times as wide as the p99's. That is no steadier tail" in narrower
    assert "only the run's own 32 values, so its p99 can never exceed their largest, 2,500.0 ms" in narrower
    assert "narrow by construction" in narrower and "about as" not in narrower and "luck" not in narrower
    still = spread((0.3, 0.5), (1.0, 1.0))  # the p99 did not move, the median did
    assert "the p99 did not move at all while the median did" in still and "by construction" in still
    assert "median did not move at all while the p99 did" in spread((0.3, 0.3), (1.0, 2.0))
    assert "neither moved at all" in spread((0.3, 0.3), (1.0, 1.0))


@pytest.mark.parametrize("residual, text", [
    (0.0, "exactly 0 s"), (2.2e-16, "0.22 femtoseconds, floating-point rounding"),
    (4.4e-16, "0.44 femtoseconds, floating-point rounding"), (3e-15, "3 femtoseconds, floating-point rounding"),
    (2.5e-11, "25.0 picoseconds, floating-point rounding"), (1.234e-7, "123 nanoseconds, more than floating-point"),
    (0.25, "250 milliseconds, more than"), (12.0, "12.0 seconds, more than")])
def test_residual_text(residual, text):
    assert serving.residual_text(residual, 1e-9).startswith(text)


def test_throughput_path_names_each_fall():
    rising = serving.throughput_path([1, 2, 4], [10.0, 20.0, 40.0])
    assert rising.startswith("The server's output never fell along the way")
    assert "never fell" in serving.throughput_path([1, 2], [10.0, 10.0])  # level is no fall
    dip = serving.throughput_path([1, 2, 4, 8], [100.0, 90.5, 200.0, 150.0])
    assert ("it fell at batch 2 (90.5 tokens/s against 100.0 at batch 1) and at batch 8 (150.0 tokens/s against "
            "200.0 at batch 4)") in dip and dip.endswith("not from each step")


def test_limits_come_from_the_sources():
    rows = {r.scenario: r for r in serving.sources.MLPERF_LIMITS if r.model == "Llama-3.1-8B"}
    assert serving.MLPERF_LIMITS == {k: (r.ttft_p99, r.tpot_p99) for k, r in rows.items()}
    assert serving.MLPERF_LIMITS["server"] == (2.0, 0.100) and serving.MLPERF_LIMITS["interactive"] == (0.5, 0.030)


# --- the experiments, on the tiny preset with SmolLM2's vocabulary, served on a free port (port 0) ---------

@pytest.fixture(scope="module")
def small(smollm2):
    """The chapter's setup at tiny sizes: a random-weight tiny model whose ids SmolLM2's tokenizer decodes."""
    _, tokenizer = smollm2
    model = build_model(get_config("tiny").with_(vocab_size=tokenizer.vocab_size, max_seq_len=512), "cpu", seed=0)
    sizes = dataclasses.replace(sizes_for_type("cpu"), serve_batch=2, serve_requests=4, serve_batches=(1, 2),
                                serve_prompt=4, serve_new_tokens=4, serve_long_prompt=32)
    return Setup(torch.device("cpu"), torch.float32, sizes, model, tokenizer)


@pytest.fixture(scope="module")
def run(small):
    return serving.closed_run(small)


@pytest.fixture(scope="module")
def sweep(small):
    return serving.batch_sweep(small)


@pytest.fixture(scope="module")
def rates(small, sweep):
    return serving.rate_sweep(small, sweep.objectives)


@pytest.fixture(scope="module")
def loops(small):
    return serving.stall_loops(small)


def json_ok(record):
    json.dumps(dataclasses.asdict(record))


def test_closed_run(run, small):
    assert run.asked == serving.request_lengths(4, 4) and all(2 <= n <= 4 for n in run.asked)
    assert len(run.requests) == 4 and all(r.ok and r.input_tokens == 4 for r in run.requests)
    assert [r.output_tokens for r in run.requests] == run.asked
    assert run.polled and max(v for _, v in run.polled) <= 2
    assert (run.device, run.concurrency, run.prompt_tokens, run.max_tokens) == ("cpu", 2, 4, 4)
    json_ok(run)
    # The identities hold whatever the timings (Little's Law is left to the hand-built records: noise).
    assert run.residual < 1e-9 and run.one_token_chunks
    assert abs(run.summary.itl.mean - run.weighted_tpot) < 1e-9
    numbers = run.numbers()
    assert {"T", "run_tok_s", "itl_text", "L_polled", "littles_pct"} <= set(numbers)
    assert numbers["T"] == 4 and isinstance(numbers["itl_text"], str)
    sizes = serving.setup_numbers(small)  # what the prose names before the run, from the same sizes
    assert (sizes["N"], sizes["C"], sizes["P"], sizes["max_len"]) == (len(run.requests), 2, 4, 4)
    assert len(run.table().data) == 4 and len(run.gap_table().data) == 3 and len(run.littles_table().data) == 2
    assert len(run.identity_table().data) == 4
    for q in (50, 99):
        e2e, rebuilt = run.rebuilt(q)
        assert e2e > 0 and rebuilt > 0 and f"p{q} E2E" in numbers[f"p{q}_add_text"]
    assert run.drawn.ok and len(run.drawn.token_times) == max(run.asked) == numbers["drawn_n"]  # 3, the nearest to 6
    assert numbers["drawn_e2e_ms"] >= numbers["drawn_ttft_ms"] > 0
    assert len(figures.request_timeline(run.drawn).axes) >= 1 and len(figures.ttft_cdf(run.requests).axes) >= 1


def test_lone_request(small):
    record = serving.lone_request(small, 5)
    assert record.ok and record.output_tokens == 5 and len(record.token_times) == 5 and record.input_tokens == 4


def test_batch_sweep(sweep):
    assert sweep.batches == [1, 2] and [len(p.requests) for p in sweep.points] == [4, 4]
    assert all(r.ok and r.output_tokens == 4 for p in sweep.points for r in p.requests)
    json_ok(sweep)
    numbers = sweep.numbers()
    assert numbers["b_max"] == 2 and numbers["slo_ttft_x"] == 5 and numbers["slo_tpot_x"] == 2
    assert all(isinstance(numbers[k], str) for k in ("server_limits", "interactive_limits", "goodput_text",
                                                     "warmup_text", "agg_path_text", "step_path_text"))
    assert numbers["step_path_text"].startswith("Each step decodes more sequences")
    assert "wall time" in sweep.table().caption and "TPOT mean (ms)" in sweep.table().data
    assert all(0 <= g <= x + 1e-12 for g, x in zip(sweep.goodput, sweep.req_s))
    assert len(sweep.table().data) == 2 and len(sweep.goodput_table().data) == 2
    # Every request asks 4 tokens: the first from its prefill, the rest from 3 decode steps, the first of which is
    # the prefill's own step. Each point's steps carry all its prefills; a run never prefills more than its slots.
    for p in sweep.points:
        assert sum(k * n for k, n in p.prefills.items()) == len(p.requests) and max(p.prefills) <= p.batch
        assert p.steps == sum(p.prefills.values()) >= len(p.requests) // p.batch * 3
    assert sweep.points[0].prefills == {1: 4, 0: 8}  # batch 1: one request after another
    assert numbers["prefills_text"].startswith("at batch 2 the engine ran")
    assert (numbers["server_ttft_s"], numbers["server_tpot_ms"], numbers["interactive_rate"]) == pytest.approx(
        (2.0, 100.0, 1 / 0.03))
    assert numbers["lone_tokens"] == 8 and numbers["lone_pred_ms"] == pytest.approx(
        numbers["lone_ttft_ms"] + 7 * numbers["lone_tpot_ms"])
    assert len(figures.exchange_rate(sweep).axes) == 2 and len(figures.goodput(sweep).axes) == 1


def test_rate_sweep(rates, sweep):
    labels = [p.label for p in rates.points]
    # Rates between run only where all at once served more than one at a time (the tiny model may not gain).
    gained = rates.points[-1].summary.request_throughput > rates.points[0].summary.request_throughput
    assert labels == ["synchronous", *["rate"] * (2 if gained else 0), "throughput"]
    assert all(len(p.records) == 4 and all(r.ok and r.output_tokens == 2 for r in p.records) for p in rates.points)
    assert rates.sweep.objectives == sweep.objectives and rates.max_tokens == 2
    numbers = rates.numbers()
    assert numbers["rs_batch"] == 2 and numbers["rs_requests"] == 4 and numbers["rs_steps"] == labels.count("rate")
    assert numbers["rs_step_pct"] == 25 and numbers["rs_target_pct"] == 90 and numbers["rs_claim_n"] == 139
    ran = sum(p.summary.duration for p in rates.points) / 60
    assert numbers["rs_claim_min"] == pytest.approx(ran * 139 / 4) and numbers["rs_half_pct"] == 5
    assert numbers["rs_gain"] == pytest.approx(numbers["rs_capacity"] / numbers["rs_sync"])
    assert isinstance(numbers["rs_knee_text"], str) and isinstance(numbers["rs_goodput_text"], str)
    assert len(rates.table().data) == len(labels) and len(rates.figure().axes) == 3
    # (Not rates.check(): the tiny model's step costs so little that batching cannot gain 1.5 times here.)


def hand_rates(all_at_once_e2e: float, limit: float = 10.0):
    """One at a time: four requests of 1.1 s one after another; then all four at once, each taking
    `all_at_once_e2e`; a TTFT objective of `limit` s."""
    from llmperf.bench import Point, Sweep

    one = [request(i * 1.1, gap=0.1) for i in range(4)]
    together = [request(0.0, gap=(all_at_once_e2e - 0.1) / 10) for _ in range(4)]
    objectives = {"ttft": limit}
    points = [Point("synchronous", None, 1, one, objectives), Point("throughput", float("inf"), None, together,
                                                                   objectives)]
    return serving.RateSweep("cpu", 4, 4, 11, Sweep("rate", points, objectives))


def test_rate_sweep_check():
    hand_rates(2.0).check()  # 2 requests/s all at once against 0.91 one at a time: 2.2 times
    with pytest.raises(AssertionError, match="not 1.5 times"):
        hand_rates(3.2).check()  # 1.25 requests/s: 1.4 times
    assert "goodput is zero" in hand_rates(2.0, limit=0.05).numbers()["rs_goodput_text"]
    assert "its goodput is its capacity" in hand_rates(2.0).numbers()["rs_goodput_text"]


def test_stall_loops(loops):
    assert loops.closed.load == {"concurrency": 2} and set(loops.open.load) == {"rate", "seed"}
    assert loops.open.load["rate"] == pytest.approx(serving.OPEN_LOAD * loops.closed.summary.request_throughput)
    assert serving.OPEN_LOAD == 0.7
    for x in loops.loops:
        assert len(x.requests) == 4 and x.long_index == 1 and all(r.ok for r in x.requests)
        long = x.requests[1]
        assert long.input_tokens == 32 and long.output_tokens == 1
        assert x.polled and 0 <= x.sent_in_stall <= 3
    assert max(v for _, v in loops.closed.polled) <= 2
    json_ok(loops)
    numbers = loops.numbers()
    assert numbers["long"] == 32 and numbers["n_ttft"] == 4 and "in one pass" in numbers["long_prefill_text"]
    assert numbers["open_load_pct"] == pytest.approx(70) and "the open loop's rate" in numbers["omission_text"]
    assert "3 requests other than the long one" in loops.table().caption
    assert all(len(x.other_ttfts) == 3 and set(x.other_percentiles) == {50, 90, 99} for x in loops.loops)
    assert numbers["p99_nearest"] == numbers["ttft_max_ms"]  # under 100 values, nearest rank is the largest
    assert len(loops.table().data) == 2 and len(loops.percentile_table().data) == 2
    axes = figures.loops_over_time(loops).axes  # a panel per loop, each with its TTFT on an axis of its own
    assert [ax.get_ylabel() for ax in axes] == ["requests in flight"] * 2 + ["TTFT (s)"] * 2


def test_answer_table(small):
    from openai import OpenAI

    from llmperf.serve import background, create_app

    with background(create_app(small.model, small.tokenizer, max_num_seqs=2, max_model_len=64)) as server:
        answer = OpenAI(base_url=server.url, api_key="unused").chat.completions.create(
            model=serving.NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0)
    table = serving.answer_table(answer).data
    assert list(table.columns) == ["answer", "prompt tokens", "completion tokens"]
    assert table["completion tokens"][0] == answer.usage.completion_tokens <= 3


# --- the checks, both ways, on hand-built records ------------------------------------------------------------

def request(sent, ttft=0.1, gap=0.01, n=11, error=None):
    """A request sent at `sent` whose n tokens arrive `ttft` after it, then every `gap` seconds."""
    if error:
        return RequestRecord(sent, error=error)
    return RequestRecord(sent, [sent + ttft + gap * i for i in range(n)], input_tokens=4, output_tokens=n)


def polled(requests, scale=1, step=0.005):
    """The exact count of requests in flight, sampled every `step` seconds, times `scale`."""
    ok = [r for r in requests if r.ok]
    start, end = min(r.sent for r in ok), max(r.token_times[-1] for r in ok)
    ts = [start + step * i for i in range(int((end - start) / step) + 1)]
    return [(t, scale * sum(r.sent <= t < r.token_times[-1] for r in ok)) for t in ts]


def hand_run(requests=None, asked=None, scale=1):
    requests = requests or [request(i * 1.0) for i in range(4)]
    return serving.Run("cpu", 1, 4, 11, asked or [11] * 4, requests, polled(requests, scale))


def test_run_check():
    hand_run().check()
    with pytest.raises(AssertionError, match="failed"):
        hand_run([request(0.0), request(1.0, error="HTTP 500: boom"), request(2.0), request(3.0)]).check()
    with pytest.raises(AssertionError, match="differ from those asked"):
        hand_run(asked=[11, 11, 11, 10]).check()
    with pytest.raises(AssertionError, match="Little's Law"):
        hand_run(scale=2).check()
    # E2E = TTFT + TPOT·(n − 1) and mean ITL = the weighted TPOTs are identities of any valid timestamps:
    # no record breaks them, and these hand-built ones pass them.
    r = hand_run()
    assert r.residual < 1e-12 and r.one_token_chunks and abs(r.weighted_tpot - 0.01) < 1e-12
    assert r.numbers()["overshoot_ms"] == pytest.approx(10.0)


def hand_sweep(e2e_at_4: float):
    """Batch 1: four requests one after another, 1.1 s each; batch 4: four at once, each taking `e2e_at_4`."""
    one = serving.BatchPoint(1, [request(i * 1.1, gap=0.1) for i in range(4)])
    four = serving.BatchPoint(4, [request(0.0, gap=(e2e_at_4 - 0.1) / 10) for _ in range(4)])
    return serving.BatchSweep("cpu", 4, 11, [one, four])


def test_sweep_check():
    hand_sweep(1.2).check()  # 3.7 times the tokens/s; each user at 9.1 tokens/s against 10
    with pytest.raises(AssertionError, match="not 2.5 times"):
        hand_sweep(2.0).check()  # 2.2 times
    with pytest.raises(AssertionError, match="faster than"):
        hand_sweep(0.6).check()  # each user at 20 tokens/s
    s = hand_sweep(1.2)
    assert s.objectives == pytest.approx({"ttft": 0.5, "tpot": 0.2})
    assert s.goodput == pytest.approx(s.req_s)  # every request meets both
    assert s.warm_up == pytest.approx((0.1, 0.1))
    assert s.points[0].prefills == {} and s.points[0].steps == 0  # hand-built: no engine counted
    assert s.numbers()["agg_path_text"].startswith("The server's output never fell along the way")


def hand_loops(scale=1, spike=False, fail=False):
    reqs = [request(i * 0.5, n=5) for i in range(6)]  # 0.14 s each, one at a time
    if fail:
        reqs.append(request(2.9, error="ReadTimeout"))
    samples = polled(reqs, scale)
    if spike:  # one poll of 3 in flight, for 5 ms: L moves by well under 10 %
        samples[10] = (samples[10][0], 3)
    closed = serving.Loop("closed", {"concurrency": 2}, reqs, samples, 1)
    opened = serving.Loop("open", {"rate": 2.0, "seed": 0}, reqs, polled(reqs), 1)
    return serving.Loops(2, 32, closed, opened)


def test_loops_check():
    hand_loops().check()
    with pytest.raises(AssertionError, match="closed loop: L"):
        hand_loops(scale=2).check()
    with pytest.raises(AssertionError, match="had 3 in flight"):
        hand_loops(spike=True).check()
    with pytest.raises(AssertionError, match="ReadTimeout"):
        hand_loops(fail=True).check()
    x = hand_loops()
    assert x.closed.stall == pytest.approx((0.5, 0.6)) and x.stall_s == pytest.approx(0.1)
    assert x.closed.sent_in_stall == 0 and x.closed.other_ttfts == pytest.approx([0.1] * 5)
    assert x.closed.other_percentiles == pytest.approx({50: 0.1, 90: 0.1, 99: 0.1})
    assert "within 10 % at every percentile" in x.numbers()["omission_text"]
    json_ok(x)


def test_claim_and_kv_capacity():
    kv = serving.kv_capacity()
    assert kv.in_flight == 200 and kv.per_token == 128 * 1024  # Llama-3-8B: 2 × 32 layers × 1024 × 2 bytes
    assert kv.memory == 81_559 * 2**20 and kv.usable == pytest.approx(0.9 * kv.memory)  # the driver's, vLLM's share
    assert kv.kv_free == pytest.approx(0.9 * kv.memory - kv.weights)
    assert kv.tokens_each == pytest.approx(kv.kv_free / 200 / kv.per_token)
    assert kv.numbers()["mem_gb"] == pytest.approx(85.52, abs=0.01) and kv.numbers()["util_pct"] == 90
    json_ok(kv)
    claim = serving.claim_check(kv)
    claim.check()
    n = claim.numbers()
    assert claim.ctx == 1152 and claim.newcomers == 1 and n["input_user"] == pytest.approx(11.71875)
    assert 1 / claim.with_prefill < 1 / claim.step < claim.per_user_claimed * 2
    # The figures: one prefill per step leaves about 33 tokens/s each, 8,400 in all; the claim is about
    # 94 % of the roofline's ~16,000, where gpt-fast reached about 69 % of its own at batch 1.
    assert n["prefill_user"] == pytest.approx(33, abs=1) and n["prefill_total"] == pytest.approx(8_400, rel=0.02)
    assert n["roof_total"] == pytest.approx(16_000, rel=0.01) and n["roof_share_pct"] == pytest.approx(94, abs=0.5)
    assert n["published_pct"] == pytest.approx(69, abs=0.5) == 100 * serving.published_share("llama-3-8b")
    json_ok(claim)
    with pytest.raises(AssertionError, match="is not 58.6"):
        dataclasses.replace(claim, claimed=14_000).check()
    with pytest.raises(AssertionError, match="is not 3,072"):
        dataclasses.replace(claim, batch=255, claimed=58.6 * 255).check()
    with pytest.raises(AssertionError, match="not below"):
        dataclasses.replace(claim, prefill_one=0.0).check()
    with pytest.raises(AssertionError, match="do not fit"):
        dataclasses.replace(claim, prompt=4096).check()
    with pytest.raises(AssertionError, match="counting input tokens gives"):
        dataclasses.replace(claim, prompt=256, prefill_one=0.1).check()
    with pytest.raises(AssertionError, match="not above gpt-fast"):
        dataclasses.replace(claim, published_share=0.99).check()
    assert len(kv.table().data) == 7 and len(claim.table().data) == 4
    ex = serving.exercise_numbers(kv)
    assert (ex["ex_in_flight"], ex["ex_ctx_tokens"], ex["ex_rank99"], ex["ex_rank90"], ex["ex_n_tail"]) == (
        500, 2500, 40, 36, 100)
    assert ex["ex_tpot_mean"] == pytest.approx(35.0) and ex["ex_itl_mean"] == pytest.approx((20 + 100 * 50) / 101)
    assert ex["ex_gpus"] == 3
    assert ex["ex_kv_avg_pct"] == pytest.approx(90.0)  # the whole prompt and half the answer, on average


def test_bootstrap_and_seeds():
    values = [0.1 * i for i in range(1, 41)]
    spread = metrics.bootstrap_percentiles(values, (50, 99), 2000, 90, seed=0)
    reruns = np.random.default_rng(0).choice(values, size=(2000, 40))  # the notebook's old way
    for q in (50, 99):
        expected = np.percentile(np.percentile(reruns, q, axis=1), [5, 95])
        assert spread[q] == pytest.approx(tuple(expected)) and spread[q][0] <= spread[q][1]
    assert spread == metrics.bootstrap_percentiles(values, (50, 99), 2000, 90, seed=0)
    with pytest.raises(ValueError):
        metrics.bootstrap_percentiles([], (50,))
    seed = serving.matching_seed(3.0, 20)
    miss = [abs(sum(bench.arrival_gaps(3.0, 20, seed=s)) * 3.0 / 20 - 1) for s in range(20)]
    assert miss[seed] == min(miss)
    assert serving.request_lengths(5, 7) == serving.request_lengths(5, 7)


def test_every_glued_name_is_read_once(run, sweep, loops, rates, small, memory, turns):
    """The notebook's glued parts name no number twice; the prose reads every name it needs, and every name
    glued is read by the prose."""
    from pathlib import Path

    from tests.prose import check_glued_once

    notebook = Path(__file__).resolve().parents[1] / "notebooks" / "06_metrics.ipynb"
    kv = serving.kv_capacity()
    parts = [serving.setup_numbers(small), run.numbers(), kv.numbers(), sweep.numbers(), rates.numbers(), loops.numbers(),
             serving.claim_check(kv).numbers(),
             serving.exercise_numbers(kv), serving.memory_predictions(small), memory.numbers(),
             turns.shape.numbers(), turns.numbers()]
    check_glued_once(parts, notebook, unread_allowed=set())


# --- where the cache's memory goes: the sentences, the arithmetic, the runs -------------------------------

def test_cache_wording_every_branch():
    claims = serving.cache_claims
    assert "16 requests in flight at once against the reserved one's 4: 4.0 times as many, exactly as the " \
        "arithmetic predicted" in claims.at_once(4, 16, 4, 16)
    assert "where the arithmetic predicted 16 and 4" in claims.at_once(4, 15, 4, 16)
    held = claims.memory_use(0.11, 0.84, 0.13, 0.845)
    assert "11 % of the memory the reserved engine held and 84 % of the paged one's" in held
    assert "emptier still" in held and "within 1 point of" in held
    assert "within 4 points" in claims.memory_use(0.11, 0.80, 0.13, 0.84)
    plain = claims.memory_use(0.14, 0.70, 0.13, 0.84)  # reserved above, paged far below: no explanation
    assert plain.endswith("13 % and 84 %") and "emptier" not in plain
    assert "1.57 times more tokens/s than the reserved one (179 against 114)" in claims.burst_speed(114, 179, 1.77, 0.338)
    assert "5.2 times sooner than on the reserved engine (1.77 s)" in claims.burst_speed(114, 179, 1.77, 0.338)
    assert "about as many tokens/s as the reserved one (101)" in claims.burst_speed(100, 101, 1.0, 1.01)
    assert "about as soon as on the reserved engine" in claims.burst_speed(100, 101, 1.0, 1.01)
    slower = claims.burst_speed(100, 50, 1.0, 2.0)
    assert "2.0 times fewer tokens/s" in slower and "2.0 times later" in slower
    none = claims.preempted(0, 0, 0, 16, None, 0.02, (0, 0))
    assert "no request was preempted (as the scheduler's dry run" in none
    some = claims.preempted(7, 171, 3, 16, 0.5, 0.04, (7, 171))
    assert "7 preemptions of 3 of the 16 requests made the engine prefill 171 positions again (as the " in some
    assert "waited up to 500.0 ms between two of its tokens, 12.5 times the run's median gap of 40.0 ms" in some
    assert "where the dry run predicted 6 and 150" in claims.preempted(7, 171, 3, 16, 0.5, 0.04, (6, 150))
    assert "no longer between two of its tokens than the run's median gap" in claims.preempted(1, 9, 1, 4, 0.04,
                                                                                              0.04, (1, 9))
    assert claims.preempted(1, 9, 1, 4, None, 0.04, (1, 9)).endswith("dry run on the lengths alone predicted)")
    assert claims.preempted(1, 9, 1, 4, None, 0.04, (1, 9)).startswith("1 preemption of 1 of")
    assert "all 16 answers were the same" in claims.identical(16, 16)
    assert "15 of the 16 answers were the same" in claims.identical(15, 16) and "nearly tied" in claims.identical(15, 16)
    less = claims.turns_gain(0.1, 0.25, 4, 44, 172)
    assert "left 44 positions to prefill instead of 172, and the median TTFT fell from 250.0 ms to 100.0 ms, " \
        "2.5 times shorter: less than the 3.9 times fewer positions" in less
    assert "in proportion to the 3.9 times fewer positions or more" in claims.turns_gain(0.06, 0.25, 4, 44, 172)
    assert "about the same" in claims.turns_gain(0.1, 0.102, 4, 44, 172)
    assert "rose from 100.0 ms to 150.0 ms" in claims.turns_gain(0.15, 0.1, 4, 44, 172)


@pytest.mark.parametrize("device_type", ["cpu", "mps", "cuda"])
def test_the_budget_arithmetic_at_every_devices_sizes(device_type):
    """The chapter's workload on each device's sizes: reserved and paged run as many at once as the arithmetic
    says, paged never preempts, and a quarter of the budget does (the scheduler alone, on the lengths)."""
    budget = serving.budget
    work = budget.workload(sizes_for_type(device_type), 49152)
    assert work.budget == int(budget.RESERVATIONS * work.reservation) and work.budget % work.reservation > 0
    assert work.at_once(True) == 4 and work.at_once(False) > work.at_once(True)
    assert 0 < work.use(True) < work.use(False) <= 1
    for reserve in (True, False):
        preemptions, recomputed, most = budget.dry_run(work, work.budget, work.max_num_seqs, reserve, 512)
        assert (preemptions, recomputed, most) == (0, 0, work.at_once(reserve))
    preemptions, recomputed, _ = budget.dry_run(work, work.budget // budget.OVERCOMMIT, work.max_num_seqs, False, 512)
    assert preemptions > 0 and recomputed > 0


def test_the_turns_arithmetic():
    d = serving.turns.Dialogue(opening=64, added=32, answer=4, turns=4, conversations=3)
    assert d.prompts == [64, 100, 136, 172] and d.hits == [0, 64, 96, 128]
    assert d.prefilled(True) == [64, 36, 40, 44] and d.prefilled(False) == d.prompts
    assert d.hit_rate == 288 / 472 and d.pool == 3 * (5 + 7 + 9 + 11)
    assert serving.turns.dialogue(sizes_for_type("cpu")) == serving.turns.Dialogue(64, 32, 4)


@pytest.fixture(scope="module")
def memory(small):
    """The three burst runs at small sizes where paging matters: 8 requests, contexts of 96 positions."""
    sizes = dataclasses.replace(small.sizes, serve_requests=16, serve_prompt=4, serve_new_tokens=8)
    return serving.memory_runs(small._replace(sizes=sizes))


def test_memory_runs(memory, small):
    """The engine, with a model, counts what the scheduler alone predicted; the glued names and the figure."""
    memory.check()
    w = memory.work
    assert w.n == 8 and w.context == 96 and w.reservation == 6 and w.budget == 27
    assert memory.reserved.most == 4 and memory.paged.most == 8 and memory.over.budget == 6
    assert memory.over.preemptions == memory.over.predicted[0] > 0 and memory.identical <= 8
    assert memory.paged.use > memory.reserved.use
    said = serving.memory_predictions(small._replace(sizes=dataclasses.replace(
        small.sizes, serve_requests=16, serve_prompt=4, serve_new_tokens=8)))
    assert said["mem_pred_ratio"] == 2 and said["mem_left_over"] == 3 and said["mem_over_budget"] == 6
    assert set(memory.numbers()) == {"mem_concurrency_text", "mem_use_text", "mem_speed_text", "mem_preempt_text",
                                     "mem_identical_text"}
    assert list(memory.table().columns) == ["reserved", "paged", "overcommitted"]
    figures_memory = pytest.importorskip("llmperf.plots.memory")
    figures_memory.memory_over_time(memory.runs)


def test_memory_check_catches_a_count_the_dry_run_did_not_predict(memory):
    wrong = dataclasses.replace(memory.over, preemptions=memory.over.preemptions + 1)
    runs = dict(memory.runs, overcommitted=wrong)
    with pytest.raises(AssertionError, match="overcommitted: .* preemptions.*the scheduler's dry run predicted"):
        dataclasses.replace(memory, runs=runs).check()
    leaked = dataclasses.replace(memory.paged, free_at_end=memory.paged.budget - 1)
    with pytest.raises(AssertionError, match="paged: 1 blocks never freed"):
        dataclasses.replace(memory, runs=dict(memory.runs, paged=leaked)).check()


@pytest.fixture(scope="module")
def turns(small):
    return serving.turn_runs(small)


def test_turn_runs(turns):
    """Two servers, the prefix cache off and on: /metrics counts every hit the arithmetic predicts."""
    turns.check()
    d = turns.shape
    assert d == serving.turns.Dialogue(16, 8, 2) and d.hits == [0, 16, 16, 32]
    assert turns.on.hits == 3 * 64 and turns.on.queries == 3 * sum(d.prompts) and turns.off.queries == 0
    assert len(turns.table().data) == 4
    from llmperf.plots import memory as figures_memory

    figures_memory.ttft_by_turn(turns)
    wrong = dataclasses.replace(turns, on=dataclasses.replace(turns.on, hits=turns.on.hits - 16))
    with pytest.raises(AssertionError, match="the prefix cache found 176 tokens; predicted 192"):
        wrong.check()
