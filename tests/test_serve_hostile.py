"""The server tried as a hostile client would, on 127.0.0.1: no request harms another, no input gets a 500 or
a traceback, nothing is held for nobody, nothing hangs. Bounded in count and in time."""

import asyncio
import json
import logging
import math
import socket
import threading
import time

import httpx
import pytest

import llmperf.serve.server as server_module
from tests.served import (NAME, events, health_latencies, raw, response, running, small_app, streamed_text,
                          wait_idle)
from tests.test_engine import failing_on

STEP_DELAY = 0.01  # seconds added to each engine step where a test needs requests to overlap


@pytest.fixture(scope="module")
def hostile(smollm2):
    """A server with SmolLM2's tokenizer, a small model, and short timeouts: yields (base URL, app)."""
    _, tokenizer = smollm2
    app = small_app(tokenizer, max_num_seqs=4, max_model_len=256, max_queue=64, body_timeout=1.0,
                    idle_timeout=1.0)
    with running(app) as url:
        yield url, app


@pytest.fixture
def slowed(hostile, monkeypatch):
    """The hostile server with every engine step `STEP_DELAY` s longer, so that requests overlap."""
    engine = hostile[1].state.engine
    step = engine.step

    def slow_step(deliver=None):
        time.sleep(STEP_DELAY)
        return step(deliver)

    monkeypatch.setattr(engine, "step", slow_step)
    return hostile


def completion(url, **fields) -> httpx.Response:
    body = {"model": NAME, "prompt": "Once upon", "max_tokens": 8, "temperature": 0, "ignore_eos": True, **fields}
    return httpx.post(f"{url}/v1/completions", content=json.dumps(body), timeout=60,
                      headers={"content-type": "application/json"})


def test_a_bad_request_sent_into_a_running_batch_leaves_the_others_unchanged(slowed, monkeypatch):
    """Three greedy requests decode together; meanwhile come a NaN temperature, a seed past 64 bits, a
    temperature of 1e-300 (valid: it samples the top token) and a request whose sampling fails inside the
    engine. The two bad ones get 400s, the failing one a JSON 500 saying what failed, and the three get the
    text they get alone."""
    url, app = slowed
    prompts = ["The sky is", "Once upon a time", "1, 2, 3,"]
    alone = [completion(url, prompt=p, max_tokens=40).json()["choices"][0]["text"] for p in prompts]
    failing_on(monkeypatch, "sample_rows", lambda logits, t, k, p, generators: any(
        g is not None and g.initial_seed() == 666 for g in generators))

    async def batch():
        async with httpx.AsyncClient(timeout=60) as client:
            async def one(p):
                r = await client.post(f"{url}/v1/completions", json={
                    "model": NAME, "prompt": p, "max_tokens": 40, "temperature": 0, "ignore_eos": True})
                return r.json()["choices"][0]["text"]
            good = [asyncio.ensure_future(one(p)) for p in prompts]
            while app.state.engine.active < 3:
                await asyncio.sleep(0.005)
            bad = await asyncio.gather(*(asyncio.to_thread(completion, url, **fields) for fields in (
                {"temperature": math.nan}, {"seed": 2**64}, {"temperature": 1e-300},
                {"temperature": 1.0, "seed": 666})))
            return await asyncio.gather(*good), bad

    texts, (nan, huge_seed, tiny_temperature, failing) = asyncio.run(batch())
    assert texts == alone
    assert (nan.status_code, nan.json()["error"]["param"]) == (400, "temperature")
    assert (huge_seed.status_code, huge_seed.json()["error"]["param"]) == (400, "seed")
    assert tiny_temperature.status_code == 200
    assert failing.status_code == 500 and failing.json()["error"] == {
        "message": "RuntimeError: sample_rows failed here", "type": "server_error", "param": None, "code": None}
    wait_idle(app.state.engine)


def test_a_client_that_gives_up_without_streaming_frees_its_slot(slowed):
    url, app = slowed
    engine = app.state.engine
    cancelled = engine.finished["cancelled"]

    def give_up():
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/completions", timeout=0.5, json={
                "model": NAME, "prompt": "Once", "max_tokens": 240, "ignore_eos": True})

    threads = [threading.Thread(target=give_up) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gone = time.perf_counter()
    took = wait_idle(engine, seconds=5)
    # 240 tokens at STEP_DELAY or more each would hold the slots for 2.4 s or more: they were freed at once.
    assert engine.finished["cancelled"] - cancelled == 4 and took < 1.0, (took, engine.finished)
    assert time.perf_counter() - gone < 1.0


def test_a_20_mb_body_is_refused_before_it_is_read_and_health_stays_fast(hostile):
    url, _ = hostile
    head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    with raw(url) as s:  # declared: refused from the headers, before any of the body is read
        s.sendall(f"{head}Content-Length: {20 << 20}\r\n\r\n".encode() + b"x" * 65536)
        status, body = response(s)
    assert status == 413 and "this server reads at most 1,048,576" in json.loads(body)["error"]["message"]

    done = threading.Event()
    polled: list[float] = []
    poller = threading.Thread(target=lambda: polled.extend(health_latencies(url, done.is_set)))
    poller.start()
    try:
        with raw(url) as s:  # undeclared (chunked): refused as soon as the limit is passed
            s.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
            chunk = b"10000\r\n" + b"x" * 65536 + b"\r\n"
            sent = 0
            try:
                while sent < 20 << 20:
                    s.sendall(chunk)
                    sent += 65536
                    s.settimeout(0.0)
                    try:
                        if s.recv(1, socket.MSG_PEEK):
                            break  # it has answered
                    except BlockingIOError:
                        pass
                    finally:
                        s.settimeout(10.0)
            except (BrokenPipeError, ConnectionResetError):
                pass
            status, body = response(s)
        # Answered before the whole 20 MB was sent: what was sent past the megabyte it read sits in the two
        # sockets' kernel buffers (several MB on loopback).
        assert status == 413 and sent < 20 << 20, (status, sent)
        assert "longer than 1,048,576 bytes" in json.loads(body)["error"]["message"]
        # The largest body it reads: a megabyte of text, tokenized in a worker thread while /health answers.
        r = completion(url, prompt="word " * 200_000)
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    finally:
        done.set()
        poller.join()
    assert polled and max(polled) < 1.0, max(polled)


def test_stalled_connections_are_closed(hostile):
    url, _ = hostile
    with raw(url) as s:  # a body that never arrives: 408 after the body timeout (1 s here)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\"")
        start = time.perf_counter()
        status, body = response(s)
        assert status == 408 and "did not arrive within 1 s" in json.loads(body)["error"]["message"]
        assert time.perf_counter() - start < 5
    for trickle in (b"", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"):  # silent; headers a byte at a time
        with raw(url) as s:
            start = time.perf_counter()
            try:
                for byte in trickle:
                    s.sendall(bytes([byte]))
                    time.sleep(0.1)
                assert s.recv(1) == b""  # closed by the server
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert time.perf_counter() - start < 5  # the idle timeout is 1 s here; the trickle would take 4.2 s


@pytest.mark.parametrize("method, path, content, status, words", [
    ("GET", "/v1/completions", None, 405, "does not take GET"),
    ("DELETE", "/health", None, 405, "does not take DELETE"),
    ("GET", "/nowhere", None, 404, "There is nothing at GET /nowhere"),
    ("POST", "/v1/completions", b'{"model": "\xff\xfe"}', 400, "not valid JSON"),
    ("POST", "/v1/chat/completions", b"", 400, "not valid JSON"),
    ("POST", "/v1/chat/completions", b'{"model": "%s", "messages": [{"role": "tool", "content": "x"}]}'
     % NAME.encode(), 400, "has the role 'tool'"),
])
def test_every_path_method_and_encoding_answers_json(hostile, method, path, content, status, words):
    url, _ = hostile
    r = httpx.request(method, f"{url}{path}", content=content)
    assert r.status_code == status and words in r.json()["error"]["message"], r.text


def test_something_unexpected_is_a_json_500_and_is_logged(hostile, monkeypatch, caplog):
    url, _ = hostile

    def broken(*args):
        raise KeyError("a bug")

    monkeypatch.setattr(server_module, "parse", broken)
    with caplog.at_level(logging.ERROR, logger="llmperf.serve"):
        r = completion(url)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert "KeyError: 'a bug'" in r.json()["error"]["message"]
    assert any("failed" in rec.message and rec.exc_info for rec in caplog.records)
    monkeypatch.undo()
    assert completion(url).status_code == 200


MALFORMED = [
    b'{"model": "%s", "prompt": "hi", "temperature": NaN}' % NAME.encode(),
    b'{"model": "%s", "prompt": "hi", "max_tokens": 0}' % NAME.encode(),
    b'{"model": "gpt-9", "prompt": "hi"}',
    b'{"model": "%s", "prompt": "hi", "seed": 18446744073709551616}' % NAME.encode(),
    b'{"model": "%s", "messages": [{"role": "user", "content": "\\ud800"}]}' % NAME.encode(),
    b'{"model": "%s", "prompt": "hi"' % NAME.encode(),
]


def test_two_hundred_requests_at_concurrency_16_one_in_five_malformed(hostile):
    """Every good request completes, streaming, with at most one chunk per token and the tokens it asked for;
    every malformed one gets its 4xx; the server ends idle."""
    url, app = hostile

    async def one(client, i, limit):
        async with limit:
            if i % 5 == 4:
                endpoint = "chat/completions" if b"messages" in MALFORMED[i % 6] else "completions"
                r = await client.post(f"{url}/v1/{endpoint}", content=MALFORMED[i % 6])
                return i, r.status_code, r.json()["error"], None
            async with client.stream("POST", f"{url}/v1/completions", json={
                    "model": NAME, "prompt": f"Request {i}:", "max_tokens": 1 + i % 7, "stream": True,
                    "ignore_eos": True, "stream_options": {"include_usage": True}}) as r:
                evs = events("\n".join([line async for line in r.aiter_lines()]))
            chunks = [e for e in evs if e["choices"] and e["choices"][0]["finish_reason"] is None]
            return i, r.status_code, len(chunks), evs[-1]["usage"]

    async def run():
        limit = asyncio.Semaphore(16)
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(*(one(client, i, limit) for i in range(200)))

    results = asyncio.run(run())
    assert len(results) == 200
    for i, status, chunks_or_error, usage in results:
        if i % 5 == 4:
            assert 400 <= status < 500 and chunks_or_error["message"], (i, status, chunks_or_error)
        else:
            assert status == 200 and usage["completion_tokens"] == 1 + i % 7, (i, usage)
            # At most one chunk per token; fewer where a token has no text (a special token) or half a character.
            assert chunks_or_error <= usage["completion_tokens"]
    wait_idle(app.state.engine, seconds=5)
    assert httpx.get(f"{url}/health").json() == {"status": "ok", "active": 0, "waiting": 0}


class Fatal(BaseException):
    """What no `except Exception` catches: the engine thread cannot go on."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_if_the_engine_thread_dies_every_request_hears_of_it_and_health_says_so(smollm2, monkeypatch):
    _, tokenizer = smollm2
    app = small_app(tokenizer, max_num_seqs=2, max_model_len=128)
    engine = app.state.engine
    steps = iter(range(10**9))
    real_step = engine.step

    def step(deliver=None):
        if next(steps) == 20:
            raise Fatal("the device is gone")
        time.sleep(STEP_DELAY)
        return real_step(deliver)

    monkeypatch.setattr(engine, "step", step)
    with running(app) as url:
        async def in_flight():
            async with httpx.AsyncClient(timeout=30) as client:
                streamed = client.post(f"{url}/v1/completions", json={
                    "model": NAME, "prompt": "a", "max_tokens": 100, "stream": True, "ignore_eos": True})
                whole = client.post(f"{url}/v1/completions", json={
                    "model": NAME, "prompt": "b", "max_tokens": 100, "ignore_eos": True})
                waiting = client.post(f"{url}/v1/completions", json={
                    "model": NAME, "prompt": "c", "max_tokens": 100, "ignore_eos": True})
                return await asyncio.gather(streamed, whole, waiting)

        streamed, whole, waiting = asyncio.run(in_flight())
        assert "the device is gone" in events(streamed.text)[-1]["error"]["message"]
        assert streamed.text.rstrip().endswith("data: [DONE]")
        for r in (whole, waiting):
            assert r.status_code == 503 and "Fatal: the device is gone" in r.json()["error"]["message"], r.text
        health = httpx.get(f"{url}/health")
        assert health.status_code == 503 and "the device is gone" in health.json()["message"]
        later = completion(url)
        assert later.status_code == 503 and "the device is gone" in later.json()["error"]["message"]


def test_chat_content_as_text_parts_and_the_same_ids_give_the_same_text(hostile, smollm2):
    """guidellm and the official client's typed messages send content as a list of text parts; a completion
    of the chat template's token ids is the same request; streamed or not, all four give the same text."""
    url, _ = hostile
    _, tokenizer = smollm2
    question = [{"role": "user", "content": "What is the capital of France?"}]
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]}]
    ids = tokenizer.encode(tokenizer.apply_chat_template(question))
    texts = []
    for chat, prompt in ((True, question), (True, parts), (False, ids)):
        for stream in (False, True):
            body = {"model": NAME, "max_tokens": 24, "temperature": 0, "ignore_eos": True, "stream": stream,
                    ("messages" if chat else "prompt"): prompt}
            r = httpx.post(f"{url}/v1/{'chat/completions' if chat else 'completions'}", json=body, timeout=60)
            assert r.status_code == 200, r.text
            if stream:
                texts.append(streamed_text(events(r.text), chat))
            else:
                choice = r.json()["choices"][0]
                texts.append(choice["message"]["content"] if chat else choice["text"])
    assert len(set(texts)) == 1 and texts[0], texts


def test_a_request_the_engine_refuses_leaves_nothing_behind(tiny, monkeypatch):
    """The server checks every request once, before handing it over (`protocol.parse`), but if the engine still
    refused one, its queue must not stay registered, waiting for tokens that never come."""
    from llmperf.engine import Engine, Request
    from llmperf.request_checks import InvalidParameter
    from llmperf.serve import APIError, EngineThread

    engine = Engine(tiny, max_batch=1, capacity=16)
    worker = EngineThread(engine)

    def refuse(request):
        raise InvalidParameter("max_tokens", "max_tokens: 100 new tokens do not fit.")

    monkeypatch.setattr(engine, "add", refuse)

    async def submit():
        with pytest.raises(APIError) as refused:
            worker.submit(Request([1, 2], 100))
        return refused.value

    error = asyncio.run(submit())
    assert (error.status, error.param) == (400, "max_tokens") and worker.queues == {}
