"""The HTTP server: Starlette on uvicorn in front of an `EngineThread`. `create_app` builds the application,
`serve` runs it until SIGTERM or Ctrl-C, `background` runs one on a free port for a test, a benchmark or a
chapter.

Every request is treated as hostile, and bounded:

- its body is read with a size limit (413 as soon as it is passed, or at once from Content-Length) and a
  time limit (408); parsing and tokenizing happen in a worker thread, so /health answers meanwhile;
- every error is JSON in OpenAI's shape, unknown paths and wrong methods included; anything unexpected is a
  JSON 500 with a message, and is logged;
- a client that goes away, streaming or not, has its request cancelled: its slot is free at the next step;
- a connection that has not sent a whole request head within `idle_timeout` s (5) of opening, or of its last
  answer, is closed: one that sends nothing, or trickles its headers, holds nothing for long;
- on SIGTERM or Ctrl-C every request in flight fails at once with a stated error (503), and the server ends
  within a few seconds whatever state it is in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..engine import Engine, Request
from .answer import Answer
from .exported import CONTENT_TYPE, Exported
from .protocol import APIError, loads, parse
from .config import ServingConfig, engine as serving_engine, resolve
from .worker import EngineThread

log = logging.getLogger("llmperf.serve")
MAX_BODY = 1 << 20  # bytes: a 2,048-token context is a few KB of text, or of token ids
BODY_TIMEOUT = 30.0  # seconds for a body to arrive
IDLE_TIMEOUT = 5.0  # seconds for a request's head to arrive, on a new connection or after an answer
ROUTES = "POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health and GET /metrics"


class JSON(JSONResponse):
    """A JSON response in plain ASCII: text that is not valid Unicode (a lone surrogate) still encodes."""

    def render(self, content) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def error(e: APIError) -> JSON:
    return JSON(e.body(), status_code=e.status)


def sse(obj) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def read_body(http: HTTPRequest, limit: int, timeout: float) -> bytes:
    """The request's body, refused (APIError 413) as soon as it is longer than `limit` bytes, or (408) if it has
    not all arrived within `timeout` seconds."""
    declared = http.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"The request body is {int(declared):,} bytes; this server reads at most {limit:,}.",
                       code="request_too_large")
    loop, body = asyncio.get_running_loop(), bytearray()
    deadline = loop.time() + timeout
    chunks = http.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(chunks.__anext__(), max(deadline - loop.time(), 0.0))
        except StopAsyncIteration:
            return bytes(body)
        except asyncio.TimeoutError:
            raise APIError(408, f"The request body did not arrive within {timeout:g} s.", code="timeout") from None
        body += chunk
        if len(body) > limit:
            raise APIError(413, f"The request body is longer than {limit:,} bytes, the most this server reads.",
                           code="request_too_large")


async def until_disconnected(http: HTTPRequest) -> None:
    """Return when the client has gone away (its body has been read, so the next message is the disconnect)."""
    while (await http.receive())["type"] != "http.disconnect":
        pass


def create_app(model, tokenizer, config: ServingConfig | None = None, model_name: str = "smollm2-135m-instruct",
               max_body: int = MAX_BODY, body_timeout: float = BODY_TIMEOUT, idle_timeout: float = IDLE_TIMEOUT,
               **settings) -> Starlette:
    """The Starlette application serving `model`, as it is, under the name `model_name`, with the settings of
    `config` (`config.resolve`, which the caller calls once); without one, `settings` are resolve's keywords
    (max_num_seqs, max_model_len, block_size, ...). A server decodes fastest with `fast.served(model)`: the fused
    model, packed, whose float32 CPU decode steps run in NumPy. A body must arrive within `body_timeout` s and be
    at most `max_body` bytes; a connection that has not sent a whole request head within `idle_timeout` s of
    opening (or of its last answer) is closed."""
    config = config or resolve(model, **settings)
    engine = serving_engine(model, config)
    capacity, max_queue = config.max_model_len, config.max_queue
    exported = Exported(engine, model_name)
    worker = EngineThread(engine, on_end=exported.ended)
    created = int(time.time())
    vocab = model.cfg.vocab_size

    @asynccontextmanager
    async def lifespan(app):
        worker.start()
        yield
        worker.stop()

    async def health(_: HTTPRequest):
        if worker.dead or not worker.alive:
            return JSON({"status": "unavailable", "message": worker.dead or "The engine is not running."},
                        status_code=503)
        return JSON({"status": "ok", "active": engine.active, "waiting": engine.waiting})

    async def metrics(_: HTTPRequest):
        return Response(exported.render(), media_type=CONTENT_TYPE)

    async def models(_: HTTPRequest):
        return JSON({"object": "list", "data": [
            {"id": model_name, "object": "model", "created": created, "owned_by": "llmperf"}]})

    async def completions(http: HTTPRequest):
        return await _complete(http, chat=False)

    async def chat_completions(http: HTTPRequest):
        return await _complete(http, chat=True)

    def _prepare(raw: bytes, chat: bool):  # in a worker thread: JSON, the chat template, the tokenizer
        return parse(loads(raw), chat, tokenizer, model_name, capacity, vocab)

    async def _complete(http: HTTPRequest, chat: bool):
        try:
            parsed = await run_in_threadpool(_prepare, await read_body(http, max_body, body_timeout), chat)
            if engine.waiting >= max_queue:
                raise APIError(503, f"The server's queue is full ({max_queue} requests waiting). Retry later.",
                               code="overloaded", kind="server_error")
            request = Request(parsed.prompt_ids, parsed.max_tokens, temperature=parsed.temperature,
                              top_k=parsed.top_k, top_p=parsed.top_p, seed=parsed.seed, stop_ids=parsed.stop_ids)
            queue = worker.submit(request)
        except APIError as e:
            return error(e)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is there to read it
        answer = Answer(parsed, tokenizer, model_name)
        if parsed.stream:
            return StreamingResponse(_stream(queue, request, answer), media_type="text/event-stream")
        watcher = asyncio.ensure_future(until_disconnected(http))
        watcher.add_done_callback(lambda w: w.cancelled() or queue.put_nowait(ClientDisconnect()))
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, APIError):
                    return error(item)
                if isinstance(item, ClientDisconnect):
                    return Response(status_code=400)  # nobody is there to read it
                answer.add(item[0])
                if answer.stopped:
                    break
            answer.flush()
        finally:  # a stop string, or the client went away: free the slot
            watcher.cancel()
            if not request.done:
                worker.cancel(request)
        return JSON(answer.whole())

    async def _stream(queue: asyncio.Queue, request: Request, answer: Answer):
        try:
            failed = None
            while (item := await queue.get()) is not None:
                if isinstance(item, APIError):
                    failed = item
                    break
                delta = answer.add(item[0])
                if delta:
                    yield sse(answer.chunk(delta, None))
                if answer.stopped:
                    break
            if failed is not None:  # the error, then [DONE], as vLLM ends a stream that failed
                yield sse(failed.body())
            else:
                rest = answer.flush()
                if rest:
                    yield sse(answer.chunk(rest, None))
                yield sse(answer.chunk("", answer.finish_reason()))
                if answer.parsed.include_usage:
                    yield sse(answer.usage_chunk())
            yield "data: [DONE]\n\n"
        finally:  # also when the client went away: Starlette cancels this generator
            if not request.done:
                worker.cancel(request)

    async def http_error(http: HTTPRequest, e: HTTPException):
        if e.status_code == 404:
            message = f"There is nothing at {http.method} {http.url.path}. This server answers {ROUTES}."
        elif e.status_code == 405:
            message = f"{http.url.path} does not take {http.method}. This server answers {ROUTES}."
        else:
            message = e.detail
        response = error(APIError(e.status_code, message))
        response.headers.update(e.headers or {})
        return response

    async def unexpected(http: HTTPRequest, e: Exception):
        log.error("%s %s failed", http.method, http.url.path, exc_info=e)
        return error(APIError(500, f"The server failed on this request: {type(e).__name__}: {e}",
                              kind="server_error"))

    routes = [Route("/health", health), Route("/metrics", metrics), Route("/v1/models", models),
              Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/chat/completions", chat_completions, methods=["POST"])]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: unexpected})
    app.state.engine, app.state.worker, app.state.idle_timeout = engine, worker, idle_timeout
    app.state.config = config
    return app


def _server(app: Starlette, host: str, port: int):
    """A uvicorn server for `app` that, as it begins to shut down, fails every request in flight with a stated
    error (so that their connections close and it can end), and closes connections that send nothing."""
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(H11Protocol):
        """uvicorn arms its keep-alive timer only after a response, and disarms it at the first byte that
        arrives. Here it is armed as a connection opens too, and disarmed only once a whole request head has
        arrived (uvicorn does that as it parses one): a client that connects and sends nothing, or trickles a
        header a byte at a time, is closed after `timeout_keep_alive` seconds instead of held forever."""

        def connection_made(self, transport):
            super().connection_made(transport)
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self.timeout_keep_alive_handler)

        def data_received(self, data: bytes) -> None:
            self.conn.receive_data(data)
            self.handle_events()

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None):
            app.state.worker.stop_soon("The server is shutting down.")
            await super().shutdown(sockets)

    return Server(uvicorn.Config(app, host=host, port=port, log_level="warning", http=Protocol,
                                 timeout_keep_alive=app.state.idle_timeout, timeout_graceful_shutdown=3))


def serve(app: Starlette, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve `app` in this (main) thread until SIGTERM or Ctrl-C, then return: what `python -m llmperf.serve`
    runs. uvicorn handles either signal by shutting down, then raises it again; here both arrive as
    KeyboardInterrupt, which ends the call."""
    import signal

    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        _server(app, host, port).run()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, before)


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

        with background(create_app(model, tokenizer, max_num_seqs=8)) as server:
            records = asyncio.run(bench.run(server.url, "smollm2-135m-instruct", prompts, 16, rate=2.0))
    """
    server = _server(app, host, port)
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
