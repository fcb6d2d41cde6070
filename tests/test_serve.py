"""The OpenAI-compatible server, end to end on 127.0.0.1: the official client, streaming, bad input, load."""

import asyncio
import json
import time

import httpx
import pytest

from llmperf.fast import served
from llmperf.serve import background, create_app
from tests.served import NAME, free_port, running, small_model


@pytest.fixture(scope="module")
def server(smollm2):
    """A server with SmolLM2's real tokenizer and a small model. Yields (base URL, app)."""
    _, tokenizer = smollm2
    app = create_app(served(small_model(tokenizer)), tokenizer, model_name=NAME, max_num_seqs=4, max_model_len=256,
                     max_queue=64)
    with running(app) as url:
        yield url, app


def test_health_and_models(server):
    url, _ = server
    assert httpx.get(f"{url}/health").json()["status"] == "ok"
    assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == [NAME]


def test_official_client_completion_and_chat(server):
    from openai import OpenAI

    url, _ = server
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    c = client.completions.create(model=NAME, prompt="The sky is", max_tokens=5, temperature=0)
    assert c.usage.completion_tokens == 5 and c.choices[0].finish_reason == "length"
    chunks = list(client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                                 max_tokens=6, stream=True, stream_options={"include_usage": True},
                                                 temperature=0))
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens <= 6
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")
    # Greedy and the same prompt: streamed and whole answers agree.
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    whole = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=6, temperature=0)
    assert whole.choices[0].message.content == text


def test_streamed_chunks_match_usage(server):
    url, _ = server
    with httpx.stream("POST", f"{url}/v1/completions", json={
            "model": NAME, "prompt": [1, 2, 3], "max_tokens": 7, "stream": True, "temperature": 0,
            "stream_options": {"include_usage": True}}) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    body = [json.loads(e) for e in events[:-1]]
    assert body[-1]["usage"]["completion_tokens"] == 7 and body[-1]["usage"]["prompt_tokens"] == 3


@pytest.mark.parametrize("payload, status, param, words", [
    (b"{not json", 400, None, "not valid JSON"),
    (b"[1, 2]", 400, None, "JSON object"),
    ({"prompt": "hi"}, 400, "model", "model: missing"),
    ({"model": NAME}, 400, "prompt", "prompt: missing"),
    ({"model": "gpt-9", "prompt": "hi"}, 404, "model", "does not exist"),
    ({"model": NAME, "prompt": "hi", "max_tokens": "ten"}, 400, "max_tokens",
     "max_tokens: The number of new tokens asked for must be a whole number, got 'ten'"),
    ({"model": NAME, "prompt": "hi", "max_tokens": 0}, 400, "max_tokens", "at least 1"),
    ({"model": NAME, "prompt": "hi", "max_completion_tokens": 0}, 400, "max_completion_tokens", "at least 1"),
    ({"model": NAME, "prompt": "hi", "max_tokens": 10_000}, 400, "max_tokens", "more than the context of 256"),
    ({"model": NAME, "prompt": "word " * 300, "max_tokens": 1}, 400, "prompt", "leaves no room for an answer"),
    ({"model": NAME, "prompt": "hi", "temperature": -0.5}, 400, "temperature", "from 0 (greedy) to 2, got -0.5"),
    (b'{"model": "%s", "prompt": "hi", "temperature": NaN}' % NAME.encode(), 400, "temperature", "got nan"),
    (b'{"model": "%s", "prompt": "hi", "temperature": Infinity}' % NAME.encode(), 400, "temperature", "got inf"),
    ({"model": NAME, "prompt": "hi", "seed": 2**64}, 400, "seed", "signed 64-bit"),
    ({"model": NAME, "prompt": "hi", "stream": "yes"}, 400, "stream", "stream: must be true or false"),
    ({"model": NAME, "prompt": [1, "a"]}, 400, "prompt", "token ids"),
    ({"model": NAME, "prompt": [1, 10**9]}, 400, "prompt", "Token ids must lie in"),
    (b'{"model": "%s", "prompt": "a\\ud800"}' % NAME.encode(), 400, "prompt", "lone UTF-16 surrogate"),
    (b'{"model": "%s", "prompt": "hi", "stop": ["a\\udfff"]}' % NAME.encode(), 400, "stop", "lone UTF-16 surrogate"),
    ({"model": NAME, "prompt": "hi", "n": 2}, 400, "n", "n: not supported by this server: leave it out, or send 1"),
    ({"model": NAME, "prompt": "hi", "top_p": 0}, 400, "top_p", "top_p must be a number above 0 and at most 1"),
    ({"model": NAME, "prompt": "hi", "top_p": 1.01}, 400, "top_p", "at most 1 (1: every token), got 1.01"),
    ({"model": NAME, "prompt": "hi", "top_p": "0.5"}, 400, "top_p", "got '0.5'"),
    (b'{"model": "%s", "prompt": "hi", "top_p": NaN}' % NAME.encode(), 400, "top_p", "got nan"),
    ({"model": NAME, "prompt": "hi", "min_p": 0.5}, 400, "min_p", "or send 0"),
    ({"model": NAME, "prompt": "hi", "echo": True}, 400, "echo", "or send false"),
    (b'{"model": "x", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, None, "nests JSON too deeply"),
    (b'{"model": "x", "prompt": ' + b"[" * 20 + b"]" * 20 + b"}", 400, "prompt", "more than 16 deep"),
    (b'{"model": "\\ud800", "prompt": "hi"}', 404, "model", "does not exist"),
    (b'{"model": "x", "prompt": 1' + b"0" * 5000 + b"}", 400, None, "not valid JSON"),
])
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server, payload, status, param, words):
    url, _ = server
    kwargs = {"content": payload} if isinstance(payload, bytes) else {"json": payload}
    r = httpx.post(f"{url}/v1/completions", **kwargs)
    assert r.status_code == status and words in r.json()["error"]["message"], r.text
    assert r.json()["error"]["param"] == param and {"message", "type", "param", "code"} <= r.json()["error"].keys()
    assert param is None or r.json()["error"]["message"].startswith(f"{param}:"), r.text
    ok = httpx.post(f"{url}/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 2})
    assert ok.status_code == 200


def test_a_small_top_p_is_served_as_greedy(server):
    """top_p 1e-6 keeps only the most likely token of each step: at temperature 1 the answer is the greedy one."""
    url, _ = server
    body = {"model": NAME, "prompt": "Once upon a time", "max_tokens": 12, "ignore_eos": True}
    greedy = httpx.post(f"{url}/v1/completions", json={**body, "temperature": 0})
    nucleus = httpx.post(f"{url}/v1/completions", json={**body, "temperature": 1.0, "top_p": 1e-6, "seed": 3})
    assert greedy.status_code == nucleus.status_code == 200, nucleus.text
    assert nucleus.json()["choices"][0]["text"] == greedy.json()["choices"][0]["text"]


def test_bad_chat_messages(server):
    url, _ = server
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": NAME, "messages": [{"role": "user"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text


def test_disconnecting_clients_free_their_slots(server):
    url, app = server
    engine = app.state.engine

    async def leave_early():
        async with httpx.AsyncClient(timeout=30) as client:
            async with client.stream("POST", f"{url}/v1/completions", json={
                    "model": NAME, "prompt": "Once", "max_tokens": 240, "stream": True}) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        return  # hang up after the first chunk

    async def fifty():
        await asyncio.gather(*(leave_early() for _ in range(50)))

    before = engine.finished["cancelled"]
    asyncio.run(fifty())
    deadline = time.time() + 30
    while not engine.idle:
        assert time.time() < deadline, (engine.active, engine.waiting)
        time.sleep(0.05)
    # Each of the 50 was cancelled, not run to its 200 tokens (a request that the engine finished in the moment
    # its client left would count as "length"; allow a few).
    assert engine.finished["cancelled"] - before >= 45, engine.finished


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])  # Ctrl-C; systemd's, Docker's and Kubernetes' stop
def test_python_m_llmperf_serve_answers_then_stops_at_a_signal_mid_answer(signal_name):
    """The real command: it answers the chat, then a signal mid-stream ends it within a few seconds, and the
    stream in flight ends with an error saying why, rather than being cut."""
    import signal
    import subprocess
    import sys
    import threading

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llmperf.serve", "--port", str(port), "--max-batch", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "the server did not answer /health within 120 s"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        question = [{"role": "user", "content": "What is the capital of France?"}]
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=60, json={
            "model": NAME, "messages": question, "max_tokens": 40, "temperature": 0})
        assert r.status_code == 200, r.text
        # The model's end-of-sequence token ends the answer, and is no part of its text.
        answer = r.json()["choices"][0]
        assert answer["message"]["content"] == "The capital of France is Paris." and answer["finish_reason"] == "stop"
        prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60, json={
            "model": NAME, "prompt": prompt, "max_tokens": 40, "temperature": 0})
        assert r.json()["choices"][0]["text"] == answer["message"]["content"], r.text  # completions stop at EOS too
        assert r.json()["choices"][0]["finish_reason"] == "stop"
        lines, first = [], threading.Event()

        def long_answer():
            with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", timeout=60, json={
                    "model": NAME, "prompt": "Once upon a time", "max_tokens": 1500, "stream": True,
                    "ignore_eos": True}) as streamed:
                for line in streamed.iter_lines():
                    lines.append(line)
                    first.set()

        reader = threading.Thread(target=long_answer)
        reader.start()
        assert first.wait(60)
        proc.send_signal(getattr(signal, signal_name))
        sent = time.perf_counter()
        out, _ = proc.communicate(timeout=30)
        took = time.perf_counter() - sent
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and took < 10, (took, out)
    assert f"http://127.0.0.1:{port}/v1" in out and "Traceback" not in out and "Stopped." in out
    data = [line for line in lines if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]", data[-3:]  # the error, then [DONE], as vLLM ends a stream that failed
    assert json.loads(data[-2][6:])["error"]["message"] == "The server is shutting down.", data[-3:]


def test_a_full_queue_answers_503_at_once(smollm2):
    _, tokenizer = smollm2
    app = create_app(served(small_model(tokenizer)), tokenizer, model_name=NAME, max_num_seqs=1, max_model_len=256,
                     max_queue=2)

    async def flood(url):
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(client.post(f"{url}/v1/completions", json={
                "model": NAME, "prompt": "x", "max_tokens": 100}) for _ in range(12)))

    with running(app) as url:
        started = time.perf_counter()
        answers = asyncio.run(flood(url))
        codes = sorted(r.status_code for r in answers)
        refused = [r for r in answers if r.status_code == 503]
        assert refused and set(codes) == {200, 503}, codes
        assert refused[0].json()["error"]["code"] == "overloaded"
        assert all(r.json()["usage"]["completion_tokens"] == 100 for r in answers if r.status_code == 200)
        assert time.perf_counter() - started < 60


def test_stop_strings_cut_the_answer_and_free_the_slot(server):
    url, app = server
    body = {"model": NAME, "prompt": "The sky is", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    full = httpx.post(f"{url}/v1/completions", json=body).json()["choices"][0]["text"]
    assert len(full) >= 6, full
    stop = full[3:6]
    before = app.state.engine.finished["cancelled"]
    for stream in (False, True):
        # 240 tokens: the engine is still generating when the server sees the stop string a few tokens in, so its
        # request must be cancelled (with max_tokens=12 the tiny model could finish first, and the count would race)
        r = httpx.post(f"{url}/v1/completions", json={**body, "max_tokens": 240, "stop": [stop], "stream": stream})
        if stream:
            events = [json.loads(line[6:]) for line in r.text.splitlines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
            text = "".join(e["choices"][0]["text"] for e in events)
            reason = events[-1]["choices"][0]["finish_reason"]
        else:
            text, reason = r.json()["choices"][0]["text"], r.json()["choices"][0]["finish_reason"]
        assert text == full[:full.find(stop)] and reason == "stop", (stream, text, full, stop)
    deadline = time.time() + 10
    while not app.state.engine.idle:
        assert time.time() < deadline
        time.sleep(0.02)
    assert app.state.engine.finished["cancelled"] - before == 2  # the engine stopped generating, too


# --- the load generator against this server ---------------------------------------------------------

def test_load_generator_open_and_closed_loop(server):
    from llmperf.bench import run, synthetic_prompts
    from llmperf.metrics import littles_law, summarize

    url, _ = server
    prompts = synthetic_prompts(24, 8, vocab=1000 + 100, seed=0)  # ids the small model's vocabulary holds
    for kwargs in (dict(rate=40.0), dict(rate=float("inf")), dict(concurrency=4)):
        records = asyncio.run(run(f"{url}/v1", NAME, prompts, max_tokens=5, show_progress=False, **kwargs))
        assert len(records) == 24 and all(r.ok and r.output_tokens == 5 and r.input_tokens == 8 for r in records)
        s = summarize(records)
        for r in records:  # E2E = TTFT + TPOT·(n − 1), request by request
            t = r.times
            assert t.e2e == pytest.approx(t.ttft + t.tpot * (t.n_tokens - 1))
        L, lam_w = littles_law(records)
        assert L == pytest.approx(lam_w) and s.completed == 24


def test_load_generator_records_errors_without_stopping(server):
    from llmperf.bench import run
    from llmperf.metrics import summarize

    url, _ = server
    records = asyncio.run(run(f"{url}/v1", "no-such-model", [[1001, 1002]] * 3, 4, concurrency=2,
                              show_progress=False))
    assert all(r.error and r.error.startswith("HTTP 404") for r in records)
    with pytest.raises(ValueError, match="None of the 3 requests completed"):
        summarize(records)
    dead = asyncio.run(run(f"http://127.0.0.1:{free_port()}/v1", NAME, [[1001]] * 2, 4, rate=100.0,
                           show_progress=False))
    assert len(dead) == 2 and all(r.error and "Connect" in r.error for r in dead)


def test_python_m_llmperf_bench(server, tmp_path, capsys):
    from llmperf.bench import main

    url, _ = server
    out_json, out_csv = tmp_path / "run.json", tmp_path / "run.csv"
    assert main(["--url", f"{url}/v1", "--concurrency", "3", "--num-requests", "9", "--input-len", "4",
                 "--output-len", "3", "--ttft-slo", "10000", "--json", str(out_json), "--csv", str(out_csv),
                 "--percentiles", "nearest_rank"]) == 0
    printed = capsys.readouterr().out
    assert "completed 9, failed 0" in printed and "goodput" in printed and "nearest_rank" in printed
    assert len(json.loads(out_json.read_text())["requests"]) == 9
    rows = out_csv.read_text().splitlines()
    assert len(rows) == 10 and rows[0].startswith("sent,queued,turn,ttft,e2e,tpot,")


@pytest.mark.parametrize("argv, words", [
    (["--rate", "0"], "--rate must be > 0"),
    (["--concurrency", "0"], "--concurrency must be at least 1"),
    (["--num-requests", "3"], "give --rate (open loop), --concurrency (closed loop), or both"),
    (["--rate", "1", "--warmups", "-1"], "--warmups must be 0 or more"),
    (["--rate", "nan"], "--rate must be > 0"),
    (["--rate", "1", "--dataset", "jsonl"], "--dataset and --dataset-path go together"),
    (["--rate", "1", "--output-len", "0"], "need --num-requests"),
])
def test_python_m_llmperf_bench_refuses_bad_arguments(argv, words, capsys):
    from llmperf.bench import main

    with pytest.raises(SystemExit):
        main(["--url", "http://127.0.0.1:9/v1", *argv])
    assert words in capsys.readouterr().err


def test_load_generator_takes_a_length_per_request(server):
    from llmperf.bench import run

    url, _ = server
    records = asyncio.run(run(f"{url}/v1", NAME, [[1001, 1002]] * 3, [1, 4, 2], concurrency=2, show_progress=False))
    assert [r.output_tokens for r in records] == [1, 4, 2]
    with pytest.raises(ValueError, match="one number, or one each"):
        asyncio.run(run(f"{url}/v1", NAME, [[1001]] * 3, [1, 2], concurrency=2, show_progress=False))


def test_watching_the_servers_count_of_requests_in_flight(server):
    from llmperf.bench import run, watch_in_flight

    url, app = server

    async def measured():
        async with watch_in_flight(url, interval=0.005) as samples:
            records = await run(f"{url}/v1", NAME, [[1001, 1002]] * 12, 24, concurrency=3, show_progress=False)
        return samples, records

    samples, records = asyncio.run(measured())
    assert all(r.ok for r in records)
    counts = [n for _, n in samples]
    times = [t for t, _ in samples]
    assert times == sorted(times) and len(samples) >= 2
    assert max(counts) <= 3  # three clients can have at most three requests in the server
    assert app.state.engine.idle


def test_watching_something_that_is_not_this_server_fails_at_once():
    from llmperf.bench import watch_in_flight

    async def watch(url):
        async with watch_in_flight(url):
            pass

    with pytest.raises(ValueError, match="Cannot watch http://127.0.0.1:9/health"):
        asyncio.run(watch("http://127.0.0.1:9"))
    with pytest.raises(ValueError, match="interval must be > 0"):
        asyncio.run(watch_in_flight_with_bad_interval())


async def watch_in_flight_with_bad_interval():
    from llmperf.bench import watch_in_flight

    async with watch_in_flight("http://127.0.0.1:9", interval=0):
        pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # uvicorn's own bind error
def test_background_says_when_the_port_is_taken(smollm2):
    import socket

    _, tokenizer = smollm2
    app = create_app(served(small_model(tokenizer)), tokenizer, model_name=NAME, max_num_seqs=1, max_model_len=64)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(RuntimeError, match="did not start"):
            with background(app, port=taken.getsockname()[1]):
                pass


def parsed(tokenizer, stop=(), chat=False, ignore_eos=False):
    from llmperf.serve import Parsed

    return Parsed([1, 2], 8, 0.0, None, 1.0, None, () if ignore_eos else (tokenizer.eos_id,), tuple(stop), True, True,
                  chat)


def test_text_held_back_for_an_unfinished_character_is_sent_at_the_end(smollm2):
    """A token can be part of a character; its text waits for the rest. An answer that ends mid-character must
    still hand over what it generated (as U+FFFD), or a streaming client sees no text, and no token, at all."""
    from llmperf.serve import Answer

    _, tokenizer = smollm2
    partial = next(i for i in range(256, 2000) if tokenizer.decode([i]) == "\ufffd")  # one byte of a character
    answer = Answer(parsed(tokenizer), tokenizer, NAME)
    assert answer.add(partial) == "" and answer.add(partial) == ""
    assert answer.flush() == tokenizer.decode([partial, partial]) and "\ufffd" in answer.sent_text
    assert answer.flush() == ""  # nothing is sent twice


def test_a_stop_string_across_two_tokens_is_never_streamed(smollm2):
    """With stop "s Par", the token " is" could be its start: its text is held until the next token decides."""
    from llmperf.serve import Answer

    _, tokenizer = smollm2
    ids = tokenizer.encode("The capital is Paris, France")
    pieces = [tokenizer.decode([i]) for i in ids]
    for stop in ("al is", "s Par", "is Paris,", "e capital"):
        assert not any(stop in p for p in pieces)  # each stop string spans tokens
        answer = Answer(parsed(tokenizer, stop=[stop]), tokenizer, NAME)
        streamed = "".join(answer.add(i) for i in ids if not answer.stopped) + answer.flush()
        whole = tokenizer.decode(ids)
        assert streamed == whole[:whole.find(stop)] and answer.stopped, (stop, streamed, pieces)


def test_special_tokens_have_no_text_and_eos_ends_unless_ignored(smollm2):
    from llmperf.serve import Answer

    _, tokenizer = smollm2
    hi = tokenizer.encode("Hi")
    for chat in (False, True):
        stopping = Answer(parsed(tokenizer, chat=chat), tokenizer, NAME)
        assert "".join(stopping.add(i) for i in [*hi, tokenizer.eos_id]) + stopping.flush() == "Hi"
        assert stopping.stopped and stopping.finish_reason() == "stop" and stopping.n_tokens == len(hi) + 1
        going = Answer(parsed(tokenizer, chat=chat, ignore_eos=True), tokenizer, NAME)
        for i in [*hi, tokenizer.eos_id, tokenizer.bos_id, *hi]:
            going.add(i)
        going.flush()
        assert going.sent_text == "HiHi" and not going.stopped and going.finish_reason() == "length"


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """/metrics as {(sample name, sorted labels): value}, parsed by prometheus-client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(f"{url}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def test_metrics_count_what_the_requests_were_told(server):
    """vLLM's names, and the engine's counts: the token counters grow by exactly the summed `usage` of a run,
    each histogram by one observation per request (or per gap), and the gauges end at zero."""
    from llmperf.bench import run

    url, app = server
    label = (("model_name", NAME),)
    before = scrape(url)
    records = asyncio.run(run(f"{url}/v1", NAME, [[1001, 1002, 1003]] * 6 + [[1004] * 9] * 6, [5, 9] * 6,
                              concurrency=3, show_progress=False))
    assert all(r.ok for r in records)
    after = scrape(url)

    def grew(name, labels=label):
        return after[(name, labels)] - before.get((name, labels), 0)

    assert grew("vllm:generation_tokens_total") == sum(r.output_tokens for r in records) == 6 * 5 + 6 * 9
    assert grew("vllm:prompt_tokens_total") == sum(r.input_tokens for r in records) == 6 * 3 + 6 * 9
    assert grew("vllm:request_success_total", (("finished_reason", "length"), *label)) == 12
    for name in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
                 "request_time_per_output_token_seconds", "request_prompt_tokens", "request_generation_tokens"):
        assert grew(f"vllm:{name}_count") == 12, name
    assert grew("vllm:inter_token_latency_seconds_count") == 6 * 4 + 6 * 8
    assert grew("vllm:request_generation_tokens_sum") == 6 * 5 + 6 * 9
    for gauge in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        assert after[(f"vllm:{gauge}", label)] == 0, gauge
    assert httpx.get(f"{url}/health").json() == {"status": "ok", "active": 0, "waiting": 0}


def test_metrics_gauges_while_requests_run(tiny):
    from llmperf.engine import Engine, Request
    from llmperf.serve.exported import Exported

    engine = Engine(tiny, max_batch=2, capacity=128)
    for prompt in ([1, 2, 3], [4, 5], [6]):
        engine.submit(Request(prompt, 4))
    engine.step()  # two admitted (a prefill and a first token each), then one decode step: two tokens each
    text = Exported(engine, "tiny").render().decode()
    assert 'vllm:num_requests_running{model_name="tiny"} 2.0' in text
    assert 'vllm:num_requests_waiting{model_name="tiny"} 1.0' in text
    # Blocks held: one of 16 positions each (4 and 3 positions filled), of a pool of 2 × 128 / 16 blocks.
    assert f'vllm:kv_cache_usage_perc{{model_name="tiny"}} {2 / 16}' in text
    assert 'vllm:prompt_tokens_total{model_name="tiny"} 5.0' in text
    assert 'vllm:generation_tokens_total{model_name="tiny"} 4.0' in text
    assert 'vllm:prefix_cache_queries_total{model_name="tiny"} 5.0' in text  # both prompts' tokens looked up
    assert 'vllm:prefix_cache_hits_total{model_name="tiny"} 0.0' in text
    assert 'vllm:num_preemptions_total{model_name="tiny"} 0.0' in text


def test_python_m_llmperf_serve_refuses_a_context_too_long_before_loading_the_model(capsys, monkeypatch):
    from llmperf import weights
    from llmperf.serve.__main__ import main

    monkeypatch.setattr(weights, "load_smollm2", lambda *a: pytest.fail("loaded the model before checking"))
    with pytest.raises(SystemExit):
        main(["--context", "100000"])
    assert "--max-model-len (--context) must lie in 2..8192" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--prefill-chunk", "0"])
    assert "--prefill-chunk >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    said = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert ("default: 512 on a CPU, as llama.cpp; on a GPU 2048, or 8192 on a CUDA GPU of 70 GiB or more other than "
            "an A100, as vLLM") in said


def test_work_in_a_passing_thread_returns_or_raises_as_if_called_here():
    import threading

    from llmperf.serve.worker import in_passing_thread

    assert in_passing_thread(lambda: threading.current_thread().name) == "llmperf-setup_0"
    with pytest.raises(ZeroDivisionError):
        in_passing_thread(lambda: 1 / 0)
    assert not any(t.name == "llmperf-setup_0" for t in threading.enumerate())  # it ended, its thread pool with it


def test_servers_of_one_model_share_its_fused_model_while_it_lives(smollm2):
    """A notebook starts several servers of one model: they fuse and pack it once (`fast.served`), and each
    serves the model it is given, as it is."""
    import gc

    from llmperf import fast

    _, tokenizer = smollm2
    model = small_model(tokenizer)
    first, second = (create_app(served(model), tokenizer, model_name=NAME, max_model_len=256) for _ in range(2))
    assert first.state.engine.model is second.state.engine.model is fast.served(model)
    assert first.state.config.fused and not create_app(model, tokenizer, max_model_len=256).state.config.fused
    kept = len(fast._SERVED)
    del model, first, second
    gc.collect()
    assert len(fast._SERVED) < kept  # the model gone, its fused model is not kept alive


def test_a_repeated_prompt_is_found_in_the_prefix_cache_and_metrics_say_so(smollm2):
    """The second of two identical prompts finds the first's full blocks (16 positions each) in the prefix
    cache: /metrics counts both prompts' tokens as queries and the found ones as hits, in tokens."""
    from tests.served import small_app

    _, tokenizer = smollm2
    prompt = list(range(100, 140))  # 40 tokens: two full blocks, the last token never taken from the cache
    with running(small_app(tokenizer, max_num_seqs=2, max_model_len=128)) as url:
        for _ in range(2):
            r = httpx.post(f"{url}/v1/completions", json={"model": NAME, "prompt": prompt, "max_tokens": 2,
                                                        "temperature": 0, "ignore_eos": True}, timeout=30)
            assert r.status_code == 200
        text = httpx.get(f"{url}/metrics").text
    assert f'vllm:prefix_cache_queries_total{{model_name="{NAME}"}} 80.0' in text
    assert f'vllm:prefix_cache_hits_total{{model_name="{NAME}"}} 32.0' in text
    assert f'vllm:num_preemptions_total{{model_name="{NAME}"}} 0.0' in text
