"""An OpenAI-compatible HTTP server over `llmperf.engine`: what chapter 6 measures.

    python -m llmperf.serve [--port 8000] [--max-batch 8] [--policy continuous]

Endpoints, as OpenAI's API defines them, so that the official `openai` client
and standard benchmark clients work unchanged:

- POST /v1/completions: {"model", "prompt" (text or token ids), "max_tokens",
  "temperature", "top_k", "seed", "stop", "stream", "stream_options"};
- POST /v1/chat/completions: the same with "messages" instead of "prompt",
  rendered with the model's chat template;
- GET /v1/models, GET /health.

With "stream": true the answer comes as server-sent events, one chunk per
token, then `data: [DONE]`; with "stream_options": {"include_usage": true} a
last chunk carries the token counts. Each chunk is sent as soon as its token
exists, so a client's clock sees the engine's TTFT and inter-token gaps.

Bad input gets a 4xx answer with an OpenAI-style error body and the server
keeps serving. A full queue answers 503 at once. A client that disconnects
mid-stream has its request cancelled, which frees its slot at the next step.

The engine runs in its own thread; the web framework (Starlette, on uvicorn)
runs the event loop. Tokens cross from one to the other through a per-request
asyncio queue.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from .engine import POLICIES, Engine, Request


class APIError(Exception):
    """An error answered to the client as OpenAI does: an HTTP status and {"error": {...}}."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status)


class EngineThread:
    """Runs `engine.step()` in a background thread while there is work, and hands each token to the asyncio
    queue of the request it belongs to."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.queues: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue, Request]] = {}
        self._queues_lock = threading.Lock()  # the event loop adds entries while the engine thread reads them
        self._work = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="llmperf-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._work.set()
        self._thread.join()

    def submit(self, request: Request) -> asyncio.Queue:
        """Queue `request`; its tokens arrive on the returned queue as (token, time), then None when it ends."""
        queue: asyncio.Queue = asyncio.Queue()
        with self._queues_lock:
            self.queues[request.id] = (asyncio.get_running_loop(), queue, request)
        self.engine.submit(request)
        self._work.set()
        return queue

    def cancel(self, request: Request) -> None:
        self.engine.cancel(request)
        self._work.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.engine.idle:
                self._work.wait(timeout=0.1)
                self._work.clear()
                continue
            try:
                emitted = self.engine.step()
            except Exception as e:  # a failed step must not leave clients waiting forever
                self._fail_all(e)
                continue
            for request, token, t in emitted:
                self._send(request, (token, t))
            with self._queues_lock:
                ended = [self.queues.pop(i) for i, (_, _, r) in list(self.queues.items()) if r.done]
            for loop, queue, _ in ended:
                loop.call_soon_threadsafe(queue.put_nowait, None)

    def _send(self, request: Request, item) -> None:
        with self._queues_lock:
            loop, queue, _ = self.queues[request.id]
        loop.call_soon_threadsafe(queue.put_nowait, item)

    def _fail_all(self, error: Exception) -> None:
        for i, slot in enumerate(self.engine.slots):
            if slot is not None:
                slot.request.finish_reason = "error"
                self.engine.slots[i] = None
        with self._queues_lock:
            ended, self.queues = list(self.queues.values()), {}
        for loop, queue, _ in ended:
            loop.call_soon_threadsafe(queue.put_nowait, error)


def create_app(model, tokenizer, model_name: str = "smollm2-135m-instruct", max_batch: int = 8,
               capacity: int = 2048, policy: str = "continuous", max_queue: int = 256) -> Starlette:
    """The Starlette application serving `model` under the name `model_name`."""
    engine = Engine(model, max_batch=max_batch, capacity=capacity, policy=policy)
    worker = EngineThread(engine)
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app):
        worker.start()
        yield
        worker.stop()

    async def health(_: HTTPRequest):
        return JSONResponse({"status": "ok", "active": engine.active, "waiting": engine.waiting})

    async def models(_: HTTPRequest):
        return JSONResponse({"object": "list", "data": [
            {"id": model_name, "object": "model", "created": created, "owned_by": "llmperf"}]})

    async def completions(http: HTTPRequest):
        return await _complete(http, chat=False)

    async def chat_completions(http: HTTPRequest):
        return await _complete(http, chat=True)

    async def _complete(http: HTTPRequest, chat: bool):
        try:
            body = await _json_body(http)
            prompt_ids, request, options = _parse(body, chat, tokenizer, model_name, capacity)
            engine.check(request)
            if engine.waiting >= max_queue:
                raise APIError(503, f"The server's queue is full ({max_queue} requests waiting). Retry later.",
                               code="overloaded", kind="server_error")
        except APIError as e:
            return e.response()
        except ValueError as e:  # the engine's own checks: context length, token ids
            return APIError(400, str(e)).response()
        queue = worker.submit(request)
        response = _Response(request, tokenizer, model_name, chat, options, len(prompt_ids))
        if options["stream"]:
            return StreamingResponse(_stream(queue, request, response), media_type="text/event-stream")
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, Exception):
                    return APIError(500, f"The model failed: {item}", kind="server_error").response()
                response.add(*item)
                if response.stopped:
                    break
            response.flush()
        finally:  # a stop string, or the client went away: free the slot
            if not request.done:
                worker.cancel(request)
        return JSONResponse(response.whole())

    async def _stream(queue: asyncio.Queue, request: Request, response: "_Response"):
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, Exception):
                    yield _sse({"error": {"message": f"The model failed: {item}", "type": "server_error"}})
                    return
                delta = response.add(*item)
                if delta:
                    yield _sse(response.chunk(delta, None))
                if response.stopped:
                    break
            rest = response.flush()
            if rest:
                yield _sse(response.chunk(rest, None))
            yield _sse(response.chunk("", response.finish_reason()))
            if response.options["include_usage"]:
                yield _sse(response.usage_chunk())
            yield "data: [DONE]\n\n"
        finally:  # also when the client went away: Starlette cancels this generator
            if not request.done:
                worker.cancel(request)

    routes = [Route("/health", health), Route("/v1/models", models),
              Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/chat/completions", chat_completions, methods=["POST"])]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.engine = engine
    return app


@dataclass(frozen=True)
class Served:
    """A server running in this process (`background`): where to reach it, and its application."""

    base: str  # "http://127.0.0.1:PORT": /health is here
    app: Starlette

    @property
    def url(self) -> str:
        """The API's base URL, as OpenAI clients and `llmperf.bench` take it: base + "/v1"."""
        return f"{self.base}/v1"

    @property
    def engine(self) -> Engine:
        return self.app.state.engine


@contextmanager
def background(app: Starlette, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0) -> Iterator[Served]:
    """Serve `app` with uvicorn in a background thread for the duration of the `with` block.

    Port 0 (the default) lets the system pick a free port; the yielded `Served` says which. This is how a
    notebook, a test or a benchmark measures the server from the same process: the clients run in the main
    thread, the web server and the engine in their own.

        with background(create_app(model, tokenizer, max_batch=8)) as server:
            records = asyncio.run(bench.run(server.url, "smollm2-135m-instruct", prompts, 16, rate=2.0))
    """
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="llmperf-http", daemon=True)
    thread.start()
    deadline = time.perf_counter() + timeout
    while not server.started:
        if not thread.is_alive() or time.perf_counter() > deadline:
            server.should_exit = True
            raise RuntimeError(f"The server did not start on {host}:{port} within {timeout:.0f} s "
                               "(is the port taken?).")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Served(f"http://{host}:{bound}", app)
    finally:
        server.should_exit = True
        thread.join(timeout=timeout)


def _sse(obj) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def _json_body(http: HTTPRequest) -> dict:
    try:
        body = json.loads(await http.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(400, f"The request body is not valid JSON: {e}.") from None
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object.")
    return body


def _field(body: dict, name: str, kinds, default=None, required: bool = False):
    if name not in body or body[name] is None:
        if required:
            raise APIError(400, f"Missing required field '{name}'.", param=name)
        return default
    value = body[name]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _as_tuple(kinds)):
        names = " or ".join(k.__name__ for k in _as_tuple(kinds))
        raise APIError(400, f"'{name}' must be {names}, got {type(value).__name__}.", param=name)
    return value


def _as_tuple(kinds) -> tuple:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _parse(body: dict, chat: bool, tokenizer, model_name: str, capacity: int):
    """(prompt ids, engine Request, options) from a request body, or APIError saying what is wrong."""
    model = _field(body, "model", str, required=True)
    if model != model_name:
        raise APIError(404, f"The model '{model}' does not exist; this server serves '{model_name}'.",
                       param="model", code="model_not_found")
    if chat:
        messages = _field(body, "messages", list, required=True)
        if not messages or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                   and isinstance(m.get("content"), str) for m in messages):
            raise APIError(400, "'messages' must be a non-empty list of {\"role\": str, \"content\": str}.",
                           param="messages")
        prompt_ids = tokenizer.encode(tokenizer.apply_chat_template(messages))
    else:
        prompt = _field(body, "prompt", (str, list), required=True)
        if isinstance(prompt, list):
            if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
                raise APIError(400, "A list 'prompt' must be a non-empty list of token ids (integers); "
                               "send several prompts as separate requests.", param="prompt")
            prompt_ids = prompt
        else:
            prompt_ids = tokenizer.encode(prompt)
    if _field(body, "n", int, 1) != 1:
        raise APIError(400, "Only n = 1 is supported: send one request per completion.", param="n")
    default_max = 16 if not chat else capacity - len(prompt_ids)
    max_tokens = _field(body, "max_completion_tokens", int, None) or _field(body, "max_tokens", int, default_max)
    temperature = float(_field(body, "temperature", (int, float), 1.0))
    top_k = _field(body, "top_k", int, None)
    seed = _field(body, "seed", int, None)
    stop = _field(body, "stop", (str, list), None)
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if not all(isinstance(s, str) and s for s in stops):
        raise APIError(400, "'stop' must be a non-empty string or a list of them.", param="stop")
    stream = _field(body, "stream", bool, False)
    stream_options = _field(body, "stream_options", dict, {}) or {}
    request = Request(prompt_ids, max_tokens, temperature=temperature, top_k=top_k, seed=seed,
                      stop_ids=(tokenizer.eos_id,) if chat else ())
    if max_tokens < 1:
        raise APIError(400, f"'max_tokens' must be at least 1, got {max_tokens}.", param="max_tokens")
    if temperature < 0:
        raise APIError(400, f"'temperature' must be >= 0, got {temperature}.", param="temperature")
    options = {"stream": stream, "include_usage": bool(stream_options.get("include_usage")), "stop": stops}
    return prompt_ids, request, options


class _Response:
    """What has been generated for one request, as text, and the OpenAI-shaped objects that carry it."""

    def __init__(self, request: Request, tokenizer, model_name: str, chat: bool, options: dict, prompt_tokens: int):
        self.request, self.tokenizer, self.model_name, self.chat = request, tokenizer, model_name, chat
        self.options, self.prompt_tokens = options, prompt_tokens
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.ids: list[int] = []  # the answer's tokens, as text is made of them
        self.n_tokens = 0  # tokens generated for this answer (an end-of-turn token included)
        self.sent_text = ""  # text already handed to the client
        self.stopped = False  # a stop string or the end of the turn was reached

    def add(self, token: int, t: float) -> str:
        """Take one token; return the new text it completes (may be "" while a character is incomplete)."""
        self.n_tokens += 1
        if self.chat and token == self.tokenizer.eos_id:  # the end of the assistant's turn
            self.stopped = True
            return ""
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        for s in self.options["stop"]:
            at = text.find(s, max(0, len(self.sent_text) - len(s) + 1))
            if at != -1:  # a stop string: cut the text there and end the request
                text, self.stopped = text[:at], True
        if not self.stopped and text.endswith("\ufffd"):
            return ""  # half of a multi-byte character: wait for the rest
        delta, self.sent_text = text[len(self.sent_text):], text
        return delta

    def flush(self) -> str:
        """At the end of the answer, the text still held back (a character whose bytes never completed: it
        goes out as U+FFFD, as a decoder shows it), so that no generated text is swallowed."""
        if self.stopped:
            return ""
        text = self.tokenizer.decode(self.ids)
        delta, self.sent_text = text[len(self.sent_text):], text
        return delta

    def finish_reason(self) -> str:
        return "stop" if self.stopped else "length"

    def usage(self) -> dict:
        n = self.n_tokens
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": n, "total_tokens": self.prompt_tokens + n}

    def chunk(self, delta: str, finish_reason: str | None) -> dict:
        if self.chat:
            choice = {"index": 0, "delta": {"role": "assistant", "content": delta} if delta else {},
                      "finish_reason": finish_reason, "logprobs": None}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": delta, "finish_reason": finish_reason, "logprobs": None}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_name,
                "choices": [choice]}

    def usage_chunk(self) -> dict:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_name, "choices": [],
                "usage": self.usage()}

    def whole(self) -> dict:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": self.sent_text},
                      "finish_reason": self.finish_reason(), "logprobs": None}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": self.sent_text, "finish_reason": self.finish_reason(), "logprobs": None}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_name,
                "choices": [choice], "usage": self.usage()}


def main(argv=None) -> int:
    import uvicorn

    from .device import DTYPES, describe, pick_device
    from .weights import load_smollm2

    p = argparse.ArgumentParser(prog="python -m llmperf.serve", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-batch", type=int, default=8, help="sequences decoded together")
    p.add_argument("--context", type=int, default=2048, help="most tokens (prompt + answer) per request")
    p.add_argument("--policy", choices=POLICIES, default="continuous")
    p.add_argument("--max-queue", type=int, default=256, help="waiting requests before answering 503")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    args = p.parse_args(argv)
    if args.max_batch < 1 or args.max_queue < 1 or not 0 < args.port < 65536:
        p.error("need --max-batch >= 1, --max-queue >= 1 and a port in 1..65535")
    try:
        device = pick_device(args.device)
    except (RuntimeError, ValueError) as e:
        p.error(str(e))
    model, tokenizer = load_smollm2(device, DTYPES[args.dtype])
    if not 1 < args.context <= model.cfg.max_seq_len:
        p.error(f"--context must lie in 2..{model.cfg.max_seq_len}")
    app = create_app(model, tokenizer, max_batch=args.max_batch, capacity=args.context, policy=args.policy,
                     max_queue=args.max_queue)
    print(describe(device, DTYPES[args.dtype]))
    print(f"Serving smollm2-135m-instruct at http://{args.host}:{args.port}/v1 "
          f"({args.policy} batching, up to {args.max_batch} at once). Ctrl-C stops.", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
