"""The load generator against a server that misbehaves on purpose (tests/stub_server.py --hostile): each
request ends within its timeout with a recorded reason of a known kind, and a run counts its failures by kind
and divides by its wall time, so that requests that fail or stall make it look slower, never faster.

The timeout is 1 s, so the file runs in a few seconds; the stub serves every other prompt in about 0.1 s."""

import asyncio
import json
import time

import httpx
import pytest

from llmperf.bench import main, send
from llmperf.metrics import RequestRecord, summarize
from tests.served import free_port
from tests.stub_server import MISBEHAVIOURS, started

TIMEOUT = 1.0  # seconds: the client's --timeout
SLACK = 0.5  # seconds past it that a request may take to be given up (closing its connection, the event loop)
KIND = {"drop": "connection", "malformed": "malformed", "error500": "HTTP 500", "html502": "HTTP 502",
        "stall": "timeout", "headers": "timeout", "trickle": "timeout", "nodone": "incomplete",
        "json": "not a stream", "huge": "HTTP 503"}


def test_every_misbehaviour_has_an_expected_kind():
    assert set(KIND) == set(MISBEHAVIOURS)


@pytest.fixture(scope="module")
def stub():
    with started(free_port(), 0.05, 0.01, hostile=True) as url:
        yield f"{url}/v1"


def one(url: str, prompt: str) -> tuple[RequestRecord, float]:
    """`send` one request as `run` does (httpx's per-read timeout and the deadline both TIMEOUT): its record,
    and how long the call took."""
    async def go():
        async with httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT, connect=10.0)) as client:
            began = time.perf_counter()
            record = await send(client, url, "stub", prompt, 4)
            return record, time.perf_counter() - began

    return asyncio.run(go())


@pytest.mark.parametrize("mode", sorted(KIND))
def test_each_misbehaviour_ends_within_the_timeout_with_its_reason(stub, mode):
    record, took = one(stub, mode)
    assert not record.ok and record.kind == KIND[mode], record
    assert took < TIMEOUT + SLACK, (mode, took)
    assert record.sent <= record.ended <= record.sent + TIMEOUT + SLACK, record
    assert len(record.error) < 400, record.error  # a 64 MiB refusal is quoted, not kept
    if mode == "trickle":  # bytes keep coming, so only the deadline over the whole request ends it
        assert f"within {TIMEOUT:g} s" in record.error, record.error
    if mode == "html502":
        assert "Bad Gateway" in record.error and "\n" not in record.error, record.error
    if mode == "error500":
        assert record.error == "HTTP 500: The stub failed on purpose.", record.error


def test_a_well_behaved_answer_is_still_served(stub):
    record, _ = one(stub, "hello")
    assert record.ok and record.error is None and record.output_tokens == 4, record
    assert record.ended >= record.token_times[-1]


def test_a_run_against_a_hostile_server_counts_its_failures_by_kind_over_its_wall_time(stub, tmp_path, capsys):
    """Every misbehaviour once and four good requests, all at once: the run ends soon after its timeout, the
    summary (printed and in --json) counts each kind, and the throughputs divide by the run's wall time, which
    the stalled requests stretch to the timeout (the good ones alone took about 0.1 s)."""
    prompts = tmp_path / "prompts.txt"
    lines = sorted(KIND) + ["hello"] * 4
    prompts.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run.json"
    began = time.perf_counter()
    assert main(["--url", stub, "--rate", "inf", "--num-requests", str(len(lines)), "--prompts-file", str(prompts),
                 "--output-len", "3", "--timeout", f"{TIMEOUT:g}", "--no-metrics", "--json", str(out)]) == 0
    assert time.perf_counter() - began < TIMEOUT + 5  # connecting, the deadline, printing
    printed = capsys.readouterr().out
    summary = json.loads(out.read_text())["summary"]
    expected: dict[str, int] = {}
    for kind in KIND.values():
        expected[kind] = expected.get(kind, 0) + 1
    assert summary["errors"] == expected and summary["completed"] == 4 and summary["failed"] == len(KIND)
    assert set(summary["error_examples"]) == set(expected)
    assert TIMEOUT <= summary["duration"] < TIMEOUT + SLACK, summary["duration"]
    assert summary["request_throughput"] == pytest.approx(4 / summary["duration"])
    assert "timeout 3" in printed and "e.g. timeout: no whole answer within 1 s" in printed, printed
    assert "wall time" in printed and "the 4 successful requests" in printed, printed


def test_a_run_in_which_nothing_succeeded_says_why_by_kind():
    records = [RequestRecord(0.0, error="timeout: no whole answer within 1 s", ended=1.0),
               RequestRecord(0.1, error="HTTP 502: Bad Gateway", ended=0.2),
               RequestRecord(0.2, error="timeout: no whole answer within 1 s", ended=1.2)]
    said = r"None of the 3 requests .*\(timeout 2, HTTP 502 1\).*commonest kind: timeout: no whole"
    with pytest.raises(ValueError, match=said):
        summarize(records)


def test_a_run_in_which_every_request_failed_still_writes_its_json(stub, tmp_path, capsys):
    prompts, out = tmp_path / "prompts.txt", tmp_path / "run.json"
    prompts.write_text("error500\nhtml502\n")
    assert main(["--url", stub, "--concurrency", "2", "--num-requests", "3", "--prompts-file", str(prompts),
                 "--timeout", f"{TIMEOUT:g}", "--no-metrics", "--json", str(out)]) == 1
    assert "(HTTP 500 2, HTTP 502 1)" in capsys.readouterr().err
    written = json.loads(out.read_text())
    assert written["summary"] is None and written["errors"] == {"HTTP 500": 2, "HTTP 502": 1}
    assert [r["error"].split(":")[0] for r in written["requests"]] == ["HTTP 500", "HTTP 502", "HTTP 500"]
