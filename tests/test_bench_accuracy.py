"""How closely llmperf.bench's clock sees what a server did: against a stub server in its own process that sends
its first token 200 ms after a request arrives and then one every 20 ms, and records its own timestamps as the
truth (tests/stub_server.py). At 4 clients on 2 cores, the client's TTFT, inter-token gaps and E2E must each lie
within 5 ms of the server's on the mean and 10 ms at p99 (or within twice and four times the host's own
round trip to the stub, where that is slower); the test prints what it measured.

What remains of the difference is the stub's clock starting when it reads the request's bytes, after the
client's starts (llmperf.bench's `send` starts it as the head goes out), and the two event loops taking turns.
Starting the client's clock before httpx's own work, or letting the first requests open their connections and
meet the stub's first-use costs, each made TTFT several milliseconds too long (the test prints the errors).

A bias in the client's clock shows in every run; a hiccup of the host (a virtual machine's stolen time, a
collection in a large process) shows in one. One pause of about 15 ms delays the tokens of all four streams:
more than 1 % of the 264 gaps, and the p99 of the 24 TTFTs is close to their largest. That happened in about one
run in five on an idle 2-core host, so the test measures up to three times and needs one run within the bounds;
a bias fails all three."""

import asyncio
import json
import statistics
import time

import httpx
import pytest

from llmperf.bench import run
from llmperf.metrics import percentile
from tests.served import free_port
from tests.stub_server import started

TTFT, GAP, TOKENS = 0.2, 0.02, 12


@pytest.fixture(scope="module")
def stub():
    with started(free_port(), TTFT, GAP) as url:
        yield url


def errors_ms(records, truth, first: int) -> dict[str, list[float]]:
    """Client minus server, in ms, for each request's TTFT and E2E and each of its inter-token gaps; request i's
    prompt is [first + i]."""
    out = {"TTFT": [], "ITL": [], "E2E": []}
    for i, r in enumerate(records):
        t = truth[json.dumps([first + i])]
        ours, theirs = r.token_times, t["tokens"]
        assert len(ours) == len(theirs) == TOKENS
        out["TTFT"].append(1e3 * ((ours[0] - r.sent) - (theirs[0] - t["arrived"])))
        out["E2E"].append(1e3 * ((ours[-1] - r.sent) - (theirs[-1] - t["arrived"])))
        out["ITL"] += [1e3 * ((b - a) - (d - c)) for a, b, c, d in zip(ours, ours[1:], theirs, theirs[1:])]
    return out


def round_trip_ms(url: str, n: int = 30) -> float:
    """The median time, in ms, an event loop in this process takes to get the stub's /health answer on one open
    connection, asking every `GAP` s as a stream's tokens come: a small message each way through both event loops,
    each woken from a wait, which is what a clock's error is made of here."""
    async def trips() -> list[float]:
        async with httpx.AsyncClient() as client:
            times = []
            for _ in range(n):
                start = time.perf_counter()
                await client.get(f"{url}/health")
                times.append(time.perf_counter() - start)
                await asyncio.sleep(GAP)
            return times

    return 1e3 * statistics.median(asyncio.run(trips()))


def test_the_load_generator_sees_what_the_server_did(stub):
    # Four warm-up requests first, as a reader would send them: a fresh server's first requests pay for what it
    # sets up on first use (this stub's first streamed answer took about 14 ms longer to start).
    runs = []
    for attempt in range(3):
        # The bounds: 5 ms on the mean and 10 ms at p99, or twice and four times this host's round trip where that
        # is longer (2.2-2.7 ms on an idle 2-core host, where TTFT's error was +2.9 to +4.3 ms on the mean).
        trip = round_trip_ms(stub)
        mean_bound, p99_bound = max(5.0, 2 * trip), max(10.0, 4 * trip)
        first = 1000 + 100 * attempt  # fresh prompts: the stub keys its truth by prompt
        records = asyncio.run(run(f"{stub}/v1", "stub", [[first + i] for i in range(24)], TOKENS, concurrency=4,
                                  show_progress=False, warmups=4))
        assert all(r.ok for r in records)
        errors = errors_ms(records, httpx.get(f"{stub}/truth").json(), first)
        measured = {k: (statistics.fmean(v), percentile([abs(e) for e in v], 99)) for k, v in errors.items()}
        runs.append("; ".join(f"{k} off by {mean:+.2f} ms on the mean, {p99:.2f} ms at p99"
                              for k, (mean, p99) in measured.items())
                    + f" (round trip {trip:.2f} ms: bounds {mean_bound:.1f} and {p99_bound:.1f} ms)")
        print(f"\nllmperf.bench against the stub's own clock, 4 clients, run {attempt + 1}: {runs[-1]}")
        if all(abs(mean) < mean_bound and p99 < p99_bound for mean, p99 in measured.values()):
            return
    pytest.fail("no run of three came within its bounds on the mean and at p99:\n" + "\n".join(runs))
