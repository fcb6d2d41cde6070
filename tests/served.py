"""What the server's tests share: a small model with SmolLM2's vocabulary, a server on a free loopback port,
and a few ways of talking to one."""

import json
import socket
import time
from contextlib import contextmanager

import httpx

from llmperf import build_model
from llmperf.config import get_config
from llmperf.fast import served
from llmperf.serve import background, create_app

NAME = "smollm2-135m-instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def small_model(tokenizer, max_seq_len: int = 512):
    """A random-weight model of the tiny preset with SmolLM2's vocabulary: fast, and its ids decode."""
    return build_model(get_config("tiny").with_(vocab_size=tokenizer.vocab_size, max_seq_len=max_seq_len), "cpu",
                       seed=0)


def small_app(tokenizer, **settings):
    """`create_app` over `small_model`, fused as a server decodes with it (`fast.served`), with `settings` for
    the app (max_model_len, max_num_seqs, ...)."""
    context = settings.setdefault("max_model_len", 256)
    return create_app(served(small_model(tokenizer, max(context, 512))), tokenizer, model_name=NAME, **settings)


@contextmanager
def running(app):
    """Serve `app` on a free loopback port in a background thread; yields its base URL."""
    with background(app) as served:
        yield served.base


def events(text: str) -> list[dict]:
    """The JSON events of a server-sent event stream, [DONE] left out."""
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


def streamed_text(evs: list[dict], chat: bool) -> str:
    key = (lambda c: (c.get("delta") or {}).get("content") or "") if chat else (lambda c: c.get("text") or "")
    return "".join(key(c) for e in evs for c in e.get("choices") or ())


def wait_idle(engine, seconds: float = 10.0) -> float:
    """Wait until `engine` has nothing running or waiting; how long that took (AssertionError past `seconds`)."""
    start = time.perf_counter()
    while not engine.idle:
        assert time.perf_counter() - start < seconds, (engine.active, engine.waiting)
        time.sleep(0.005)
    return time.perf_counter() - start


@contextmanager
def raw(base: str, timeout: float = 10.0):
    """A plain TCP connection to the server at `base`, for what no HTTP client will send."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        yield s


def response(s: socket.socket) -> tuple[int, bytes]:
    """Read one HTTP response's status and body off `s` (until the server closes it, or the body is whole)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), None)
    while length is not None and len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, body


def health_latencies(base: str, until, period: float = 0.02) -> list[float]:
    """Seconds each GET /health took, polled every `period` s until `until()` is true (from another thread)."""
    out = []
    with httpx.Client(timeout=30) as client:
        while not until():
            start = time.perf_counter()
            assert client.get(f"{base}/health").status_code == 200
            out.append(time.perf_counter() - start)
            time.sleep(period)
    return out


__all__ = ["NAME", "create_app", "events", "free_port", "health_latencies", "raw", "response", "running",
           "small_app", "small_model", "streamed_text", "wait_idle"]
