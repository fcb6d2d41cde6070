"""The HTTP server: the engine in its own thread, Starlette on uvicorn in front, one asyncio queue per request
between them. `create_app` builds the application; `background` runs one on a free port for a test, a
benchmark or a chapter.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from ..engine import Engine, Request
from .protocol import APIError, Response, json_body, parse, sse


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
            body = await json_body(http)
            prompt_ids, request, options = parse(body, chat, tokenizer, model_name, capacity)
            engine.check(request)
            if engine.waiting >= max_queue:
                raise APIError(503, f"The server's queue is full ({max_queue} requests waiting). Retry later.",
                               code="overloaded", kind="server_error")
        except APIError as e:
            return e.response()
        except ValueError as e:  # the engine's own checks: context length, token ids
            return APIError(400, str(e)).response()
        queue = worker.submit(request)
        response = Response(request, tokenizer, model_name, chat, options, len(prompt_ids))
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

    async def _stream(queue: asyncio.Queue, request: Request, response: "Response"):
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, Exception):
                    yield sse({"error": {"message": f"The model failed: {item}", "type": "server_error"}})
                    return
                delta = response.add(*item)
                if delta:
                    yield sse(response.chunk(delta, None))
                if response.stopped:
                    break
            rest = response.flush()
            if rest:
                yield sse(response.chunk(rest, None))
            yield sse(response.chunk("", response.finish_reason()))
            if response.options["include_usage"]:
                yield sse(response.usage_chunk())
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
