"""One request to an OpenAI-compatible server, timed as it streams; and where that server's API is.

`send` makes one streaming request and returns its `metrics.RequestRecord`: when it was sent, when each chunk of
text arrived, the token counts from `usage`, or the error, never an exception. `api_base` takes a server's URL
as any of the peers do (AIPerf's `--url` and guidellm's `target` give the root, vLLM's `--base-url` too, the
`openai` client the /v1 base), and `discover_model` asks it for its model, saying plainly what answered when
what answered is not OpenAI's API.
"""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlsplit

import httpx

from ..metrics import RequestRecord


def api_base(url: str) -> str:
    """The API's base URL from a server's `url`: its root ("http://host:8000", as AIPerf, guidellm and vLLM's
    benchmark take it) gets "/v1"; a URL whose path ends in /v1, or any other path (a proxy's), stays as given."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http:// or https:// URL of a server, e.g. http://127.0.0.1:8000.")
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path if path else '/v1'}"


def discover_model(base: str, timeout: float = 10.0) -> str:
    """The first model that `base`/models lists; ValueError saying what answered if that is not the API."""
    where = f"{base}/models"
    try:
        r = httpx.get(where, timeout=timeout)
    except httpx.HTTPError as e:
        raise ValueError(f"Nothing answered at {where} ({type(e).__name__}: {e or 'no reply'}). Is the server "
                         "running, and is this its address?") from None
    answered = f"{where} answered HTTP {r.status_code} ({r.headers.get('content-type', 'no content type')}): " \
               f"{r.text[:120]!r}"
    try:
        models = r.json()["data"]
        return models[0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ValueError(f"{answered}. That is not OpenAI's API, which lists its models there; give the server's "
                         "root (http://host:port) or its API base (http://host:port/v1).") from None


async def send(client: httpx.AsyncClient, url: str, model: str, prompt, max_tokens: int, chat: bool = False,
               temperature: float = 0.0, ignore_eos: bool = True, text: list[str] | None = None,
               timeout: float | None = None) -> RequestRecord:
    """One streaming request; its record, never an exception (errors are recorded in it, "kind: detail").

    Its clock starts when the request's head starts to go out on its connection (httpcore's trace hook), and
    each token's when its line arrives, before it is parsed: so neither the client's own bookkeeping nor a TCP
    handshake is counted as the server's latency (tests/test_bench_accuracy.py checks the clock against a stub
    server that keeps its own).

    With `ignore_eos`
    (vLLM's extension, which SGLang and llama.cpp's server read too) every answer is `max_tokens` long, as a
    benchmark needs; without it, the server may stop at the model's end-of-sequence token.

    The whole request ends within `timeout` seconds (default: the client's read timeout), whatever the server
    does: httpx's timeouts bound each read, so a server that trickles a byte a second would hold a request
    forever without this deadline. A refusal's body is read up to `ERROR_BODY_LIMIT` bytes. A request fails as
    one of the `KINDS` (tests/test_bench_hostile.py meets each against a server that misbehaves on purpose)."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": ignore_eos}
    if chat:
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    endpoint = f"{url.rstrip('/')}/{'chat/completions' if chat else 'completions'}"
    request = client.build_request("POST", endpoint, json=body)  # encoded before the clock starts
    limit = client.timeout.read if timeout is None else timeout
    got = _Stream(chat, text)
    sent = time.perf_counter()
    started: list[float] = []

    async def trace(event: str, info) -> None:  # httpcore's hook: the moment the request's head starts to go out
        if event.endswith("send_request_headers.started"):
            started.append(time.perf_counter())

    request.extensions["trace"] = trace
    try:
        await asyncio.wait_for(got.read(client, request), limit)
    except asyncio.TimeoutError:
        got.failed = f"timeout: no whole answer within {limit:g} s" + (
            f" ({len(got.times)} chunks had come)" if got.times else "")
    except httpx.TimeoutException as e:
        got.failed = f"timeout: {type(e).__name__}: the server sent nothing for longer than the client waits"
    except httpx.HTTPError as e:
        got.failed = f"connection: {type(e).__name__}: {e}" if str(e) else f"connection: {type(e).__name__}"
    ended = got.ended or time.perf_counter()
    sent = started[0] if started else sent
    if got.failed is None and not got.done:
        got.failed = got.unfinished()
    if got.failed is not None:
        return RequestRecord(sent, got.times, error=got.failed, ended=ended)
    usage, times = got.usage, got.times
    if usage is None:
        return RequestRecord(sent, times, input_tokens=len(prompt) if isinstance(prompt, list) and not chat else 0,
                             ended=ended)
    return RequestRecord(sent, times, input_tokens=_count(usage, "prompt_tokens"),
                         output_tokens=max(_count(usage, "completion_tokens"), len(times)) if times else 0,
                         ended=ended)


ERROR_BODY_LIMIT = 4096  # bytes of a refusal read: any JSON error fits; a megabyte of HTML is not waited for
KINDS = ("HTTP <status>", "not a stream", "malformed", "stream error", "incomplete", "timeout", "connection")


class _Stream:
    """What one streamed answer has brought so far: chunk arrival times, usage, whether [DONE] came, and why it
    failed ("kind: detail", one of `KINDS`), kept here so that a deadline that cuts `read` short loses none of it."""

    def __init__(self, chat: bool, text: list[str] | None):
        self.chat, self.text = chat, text
        self.times: list[float] = []
        self.usage: dict | None = None
        self.done = False
        self.failed: str | None = None
        self.ended: float | None = None
        self.content_type = ""

    def unfinished(self) -> str:
        """Why an answer that ended without error and without [DONE] failed."""
        if not self.content_type.startswith("text/event-stream"):
            return (f"not a stream: HTTP 200 with Content-Type {self.content_type or 'none'!r}, not "
                    "'text/event-stream', and no 'data: [DONE]' (did the server ignore \"stream\": true?)")
        return "incomplete: the stream ended without 'data: [DONE]', so the answer may be cut short"

    async def read(self, client: httpx.AsyncClient, request: httpx.Request) -> None:
        r = await client.send(request, stream=True)
        try:
            self.content_type = r.headers.get("content-type", "")
            if r.status_code != 200:
                self.failed = f"HTTP {r.status_code}: {_error_message(await _head(r))}"
            else:  # read as events whatever its Content-Type says: what counts is whether [DONE] comes
                await self._events(r)
        finally:
            await r.aclose()

    async def _events(self, r: httpx.Response) -> None:
        async for line in r.aiter_lines():
            arrived = time.perf_counter()  # before the line is parsed
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                self.done, self.ended = True, arrived
                return
            try:
                event = json.loads(data)
            except ValueError:
                event = None
            if not isinstance(event, dict):
                self.failed = f"malformed: an event that is not a JSON object: {data[:120]!r}"
                return
            if event.get("error"):
                self.failed = f"stream error: {_error_message(json.dumps(event))}"
                return
            if isinstance(event.get("usage"), dict):
                self.usage = event["usage"]
            choices = event.get("choices")
            said = "".join(_text(c, self.chat) for c in choices if isinstance(c, dict)) if isinstance(
                choices, list) else ""
            if said:
                self.times.append(arrived)
                if self.text is not None:
                    self.text.append(said)


async def _head(r: httpx.Response) -> str:
    """The first `ERROR_BODY_LIMIT` bytes of `r`'s body, as text; the rest is never read."""
    head = b""
    async for chunk in r.aiter_bytes():
        head += chunk
        if len(head) >= ERROR_BODY_LIMIT:
            break
    return head[:ERROR_BODY_LIMIT].decode(errors="replace")


def _text(choice: dict, chat: bool) -> str:
    """A choice's text: a chat chunk's delta content, a completion chunk's text ("" if it holds none, or not as
    a string)."""
    holder = choice.get("delta") if chat else choice
    said = holder.get("content" if chat else "text") if isinstance(holder, dict) else None
    return said if isinstance(said, str) else ""


def _count(usage: dict, name: str) -> int:
    """A token count from `usage`, 0 if it is missing or not a whole number."""
    n = usage.get(name)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0


def _error_message(text: str) -> str:
    """The message of an OpenAI-shaped error body, or the body's first 200 characters on one line."""
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = None
    return message if isinstance(message, str) else " ".join(text.split())[:200]



