"""The engine in its own thread, and the queues that carry each request's tokens to the event loop.

The web server's event loop must never wait on the model, and the model must never wait on a client, so the
engine steps in a thread of its own (`EngineThread`). Each request has an asyncio queue: the thread puts its
tokens there as (token, time), then None when it ends, or an `APIError` when it failed.

Failures stay where they belong:

- a request the engine fails on (its prefill, or sampling its token) fails alone, and the engine says why
  (`Request.error`); the rest of its batch goes on;
- a step that fails in a way no one request can be blamed for ends the requests decoding in it, not the
  waiting ones, and the loop goes on;
- if the thread itself stops (told to, or by an error it cannot go on from), every request in flight gets an
  error at once, `dead` says why, the server's /health answers 503 and new requests are refused.

The engine's PyTorch work (a newcomer's prefill, a batch's products) is parallel work, run by OpenMP (GNU's
libgomp, in PyTorch's Linux wheels), which keeps a pool of threads for each thread that starts such work. Once
a process has more of those threads than cores, libgomp stops letting them spin between two pieces of work:
each one must then be woken, every time. A model loaded in the main thread leaves a pool there, and the engine
thread builds a second: on a host with few cores that is more threads than cores, and every prefill and batch
step of the engine's then waits for its threads to wake. So `python -m llmperf.serve` loads and prepares the
model in a thread that ends when it is done (`in_passing_thread`), and its pool ends with it. A server started
from a notebook or a test, whose main thread has already run PyTorch, pays the difference.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .. import request_checks
from ..engine import Engine, Request
from .protocol import APIError, refused

log = logging.getLogger("llmperf.serve")


class EngineThread:
    """Runs `engine.step()` in a background thread while there is work, and hands each token to the asyncio
    queue of the request it belongs to."""

    def __init__(self, engine: Engine, on_end: Callable[[Request], None] | None = None):
        self.engine, self.on_end = engine, on_end  # on_end(request): told of every request that ends (/metrics)
        self.queues: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue, Request]] = {}
        self._queues_lock = threading.Lock()  # the event loop adds entries while the engine thread reads them
        self._work = threading.Event()
        self._stopping: str | None = None  # why the thread was told to stop
        self.dead: str | None = None  # why the thread stopped, once it has
        self._thread = threading.Thread(target=self._run, name="llmperf-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the thread is stepping and will take new requests."""
        return self._thread.is_alive() and self._stopping is None

    def stop_soon(self, reason: str = "The server is shutting down.") -> None:
        """Tell the thread to stop after the step it is in; every request in flight then fails with `reason`.
        Returns at once (an event loop may call it)."""
        self._stopping = self._stopping or reason
        self._work.set()

    def stop(self, reason: str = "The server is shutting down.", timeout: float = 10.0) -> None:
        """`stop_soon`, then wait up to `timeout` s for the thread to end."""
        self.stop_soon(reason)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def submit(self, request: Request) -> asyncio.Queue:
        """Queue `request` (already checked); its tokens arrive on the returned queue as (token, time), then None
        when it ends or an APIError if it failed. Raises APIError (503) if the engine has stopped."""
        if self.dead or self._stopping:
            raise self._gone()
        queue: asyncio.Queue = asyncio.Queue()
        with self._queues_lock:  # before the engine has it, so that no token can come before its queue exists
            self.queues[request.id] = (asyncio.get_running_loop(), queue, request)
        try:
            self.engine.add(request)  # checked once already, by the protocol (`protocol.parse`)
        except Exception as e:  # refused: nothing of it may stay behind
            with self._queues_lock:
                self.queues.pop(request.id, None)
            if isinstance(e, request_checks.InvalidParameter):
                raise refused(e) from None
            raise
        self._work.set()
        if self.dead:  # the thread ended meanwhile: if its last sweep missed this request, refuse it here
            with self._queues_lock:
                if self.queues.pop(request.id, None) is not None:
                    raise self._gone()
        return queue

    def cancel(self, request: Request) -> None:
        """The client went away: the engine drops `request` at its next step."""
        self.engine.cancel(request)
        self._work.set()

    def _gone(self) -> APIError:
        return APIError(503, self.dead or self._stopping, code="unavailable", kind="server_error")

    def _run(self) -> None:
        reason = "The engine stopped."
        try:
            while self._stopping is None:
                if self.engine.idle:
                    self._work.wait(timeout=0.1)
                    self._work.clear()
                    continue
                try:  # each token handed over as soon as it exists: a first token before the decode pass
                    self.engine.step(deliver=self._deliver)
                except Exception as e:  # no one request to blame: end the batch's, keep the waiting ones
                    log.exception("A decode step failed")
                    self.engine.fail_all(f"The engine failed on this request's batch: {type(e).__name__}: {e}",
                                         waiting=False)
                self._end_finished()
            reason = self._stopping
        except BaseException as e:  # the thread itself is going down: say so to everyone waiting
            log.exception("The engine thread stopped")
            reason = f"The engine stopped: {type(e).__name__}: {e}"
            raise
        finally:
            self.dead = reason
            try:
                self.engine.fail_all(reason)
            finally:
                self._end_finished(everyone=True)

    def _deliver(self, tokens) -> None:
        for request, token, t in tokens:
            self._send(request, (token, t))

    def _send(self, request: Request, item) -> None:
        with self._queues_lock:
            entry = self.queues.get(request.id)
        if entry is not None:
            _put(entry[0], entry[1], item)

    def _end_finished(self, everyone: bool = False) -> None:
        """Close the queue of every request that has ended (of every one, with `everyone`): None, or the error."""
        with self._queues_lock:
            ended = [i for i, (_, _, r) in self.queues.items() if everyone or r.done]
            ended = [self.queues.pop(i) for i in ended]
        for loop, queue, request in ended:
            if self.on_end is not None and request.done:
                try:
                    self.on_end(request)
                except Exception:  # a failed observation must not fail the request
                    log.exception("Observing a finished request failed")
            item = None
            if request.finish_reason == "error" or not request.done:
                status = 503 if self._stopping or self.dead else 500
                item = APIError(status, request.error or self.dead or "The engine stopped.", kind="server_error")
            _put(loop, queue, item)


def in_passing_thread(work: Callable[[], object]) -> object:
    """Run `work()` in a thread of its own and return what it returns (or raise what it raised). The thread ends
    with it, and so does the OpenMP thread pool its PyTorch work built, which would otherwise slow the engine
    thread's (this module's docstring)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmperf-setup") as one:
        return one.submit(work).result()  # leaving the block ends the thread


def _put(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, item) -> None:
    """Hand `item` to `queue`, which belongs to `loop`'s thread."""
    try:
        loop.call_soon_threadsafe(queue.put_nowait, item)
    except RuntimeError:  # that event loop has closed: nobody is waiting
        pass
