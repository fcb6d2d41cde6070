"""A stub OpenAI-compatible server whose timings a test sets, and which records its own clock as the truth.

    python tests/stub_server.py --port 8123 --ttft 0.2 --gap 0.02

Each /v1/completions request streams `max_tokens` chunks of one token each: the first `ttft` seconds after the
request arrived, then one every `gap` seconds, each due at a fixed time (arrival + ttft + i·gap), so a late
wake-up does not push the rest back. With `--capacity N` it serves at most N requests at once, as a server
with N slots does: a request that finds them all busy waits for one, and its schedule starts when it gets one
(its truth still starts at its arrival, so the wait is part of its TTFT). Its capacity is then known:
N ÷ (ttft + (max_tokens − 1)·gap) requests/s. It records when each request arrived (its bytes were read) and when each
chunk was handed to the server to send, on time.perf_counter(), which on Linux is one clock for every process
(CLOCK_MONOTONIC): GET /truth returns them, keyed by the request's prompt. A load generator's measurements can
then be checked against what the server really did. It runs in a process of its own, so that the client under
test does not share its interpreter.

/v1/chat/completions streams the same way (its chunks as deltas); its `usage` counts the messages' words as the
prompt's tokens, a count of its own as a real server's tokenizer and template make theirs.

With `--hostile`, a request whose prompt is the name of one of `MISBEHAVIOURS` gets that misbehaviour instead of
an answer (tests/test_bench_hostile.py); every other prompt is served as above. Each misbehaviour gives up when
its client goes away, or after `HOSTILE_FOR` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


HOSTILE_FOR = 30.0  # seconds a misbehaviour goes on at most: longer than any test's timeout
MISBEHAVIOURS = {
    "drop": "a token, then the connection closes mid-stream",
    "malformed": "a token, then an event that is not JSON",
    "error500": "HTTP 500 with an OpenAI-shaped JSON error",
    "html502": "HTTP 502 with an HTML page, as a proxy sends it",
    "stall": "no byte at all, not even the status line",
    "headers": "status line and headers of a stream, then no byte of its body",
    "trickle": "a stream that never ends: an SSE comment line every 0.1 s, so no read ever times out",
    "nodone": "a whole answer and its usage, then the end of the body without 'data: [DONE]'",
    "json": "HTTP 200 with Content-Type application/json: a whole non-streamed completion",
    "huge": "HTTP 503 with a 64 MiB body",
}


class Misbehaving:
    """An ASGI response that misbehaves as `MISBEHAVIOURS[mode]` says, for as long as its client stays."""

    def __init__(self, mode: str):
        self.mode = mode

    async def __call__(self, scope, receive, send) -> None:
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.ensure_future(watch())
        try:
            await self.misbehave(send, gone)
        finally:
            watcher.cancel()

    async def misbehave(self, send, gone: asyncio.Event) -> None:
        mode, token = self.mode, b'data: {"choices": [{"index": 0, "text": "x", "finish_reason": null}]}\n\n'

        async def start(status: int, kind: bytes) -> None:
            await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", kind)]})

        async def body(data: bytes, more: bool = True) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": more})

        async def linger(seconds: float = HOSTILE_FOR) -> None:
            try:
                await asyncio.wait_for(gone.wait(), seconds)
            except asyncio.TimeoutError:
                pass

        sse = b"text/event-stream"
        if mode == "error500":
            await start(500, b"application/json")
            await body(b'{"error": {"message": "The stub failed on purpose.", "type": "server_error"}}', False)
        elif mode == "html502":
            await start(502, b"text/html")
            await body(b"<html>\n<head><title>502 Bad Gateway</title></head>\n<body>Bad Gateway</body>\n</html>\n",
                       False)
        elif mode == "huge":
            await start(503, b"text/plain")
            for _ in range(1024):
                if gone.is_set():
                    return
                await body(b"overloaded " * 6000)
            await body(b"", False)
        elif mode == "json":
            await start(200, b"application/json")
            await body(b'{"choices": [{"index": 0, "text": "xx", "finish_reason": "length"}]}', False)
        elif mode in ("drop", "malformed", "nodone"):
            await start(200, sse)
            await body(token)
            if mode == "malformed":
                await body(b"data: {\"choices\": [{\"text\": \n\n", False)
            elif mode == "nodone":
                usage = b'{"prompt_tokens": 1, "completion_tokens": 1}'
                await body(b'data: {"choices": [], "usage": ' + usage + b'}\n\n', False)
            # drop: return with the body unfinished; uvicorn closes the connection mid-stream
        elif mode == "stall":
            await linger()
        elif mode == "headers":
            await start(200, sse)
            await linger()
        elif mode == "trickle":
            await start(200, sse)
            for _ in range(int(HOSTILE_FOR / 0.1)):
                if gone.is_set():
                    return
                await body(b": still here\n")
                await asyncio.sleep(0.1)


def create_app(ttft: float, gap: float, capacity: int | None = None, hostile: bool = False) -> Starlette:
    truth: dict[str, dict] = {}
    slots = asyncio.Semaphore(capacity) if capacity else None

    async def completions(request: Request):
        arrived = request.scope.get("arrived", time.perf_counter())
        body = await request.json()
        if hostile and isinstance(body.get("prompt"), str) and body["prompt"] in MISBEHAVIOURS:
            return Misbehaving(body["prompt"])
        chat = "messages" in body  # /v1/chat/completions: the same stream, as deltas
        n, key = int(body["max_tokens"]), json.dumps(body["messages"] if chat else body["prompt"])
        piece = {"delta": {"content": "x"}} if chat else {"text": "x"}

        async def stream():
            if slots is not None:
                await slots.acquire()
            try:
                start, sent = max(arrived, time.perf_counter()) if slots is not None else arrived, []
                for i in range(n):
                    await asyncio.sleep(max(0.0, start + ttft + i * gap - time.perf_counter()))
                    sent.append(time.perf_counter())
                    yield "data: " + json.dumps({"choices": [{"index": 0, **piece, "finish_reason": None}]}) + "\n\n"
            finally:
                if slots is not None:
                    slots.release()
            said = sum(len(m["content"].split()) for m in body["messages"]) if chat else 1  # chat: words, as tokens
            usage = {"prompt_tokens": said, "completion_tokens": n, "total_tokens": n + said}
            yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\ndata: [DONE]\n\n"
            truth[key] = {"arrived": arrived, "tokens": sent}

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def models(_):
        return JSONResponse({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def health(_):
        return JSONResponse({"status": "ok"})

    async def get_truth(_):
        return JSONResponse(truth)

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]),
                             Route("/v1/chat/completions", completions, methods=["POST"]), Route("/v1/models", models),
                             Route("/health", health), Route("/truth", get_truth)])


def protocol():
    """uvicorn's HTTP protocol, noting when each request's bytes were read (scope["arrived"]): the truth starts
    there, not when the handler gets its turn in the event loop."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Timed(H11Protocol):
        def data_received(self, data: bytes) -> None:
            now, before = time.perf_counter(), self.scope
            super().data_received(data)
            if self.scope is not before and self.scope is not None:  # a new request's head: its task waits to run
                self.scope["arrived"] = now

    return Timed


@contextmanager
def started(port: int, ttft: float, gap: float, capacity: int | None = None, hostile: bool = False):
    """The stub in a process of its own on 127.0.0.1:`port` for the length of a `with` block; yields its URL."""
    command = [sys.executable, __file__, "--port", str(port), "--ttft", str(ttft), "--gap", str(gap)]
    command += ["--hostile"] if hostile else []
    proc = subprocess.Popen(command + (["--capacity", str(capacity)] if capacity else []), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None and time.time() < deadline, "the stub server did not start"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ttft", type=float, default=0.2)
    p.add_argument("--gap", type=float, default=0.02)
    p.add_argument("--capacity", type=int, default=None, help="requests served at once (default: any number)")
    p.add_argument("--hostile", action="store_true", help="a prompt naming a misbehaviour gets it: "
                   + "; ".join(f"{k}: {v}" for k, v in MISBEHAVIOURS.items()))
    args = p.parse_args()
    uvicorn.run(create_app(args.ttft, args.gap, args.capacity, args.hostile), host="127.0.0.1", port=args.port,
                log_level="warning" if not args.hostile else "critical", http=protocol())
