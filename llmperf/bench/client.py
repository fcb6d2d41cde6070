"""One request to an OpenAI-compatible server, timed as it streams; and where that server's API is.

`send` makes one streaming request and returns its `metrics.RequestRecord`: when it was sent, when each chunk of
text arrived, the token counts from `usage`, or the error, never an exception. `api_base` takes a server's URL
as any of the peers do (AIPerf's `--url` and guidellm's `target` give the root, vLLM's `--base-url` too, the
`openai` client the /v1 base), and `discover_model` asks it for its model, saying plainly what answered when
what answered is not OpenAI's API.
"""

from __future__ import annotations

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
               temperature: float = 0.0, ignore_eos: bool = True, text: list[str] | None = None) -> RequestRecord:
    """One streaming request; its record, never an exception (errors are recorded in it).

    Its clock starts when the request's head starts to go out on its connection (httpcore's trace hook), and
    each token's when its line arrives, before it is parsed: so neither the client's own bookkeeping nor a TCP
    handshake is counted as the server's latency (tests/test_bench_accuracy.py checks the clock against a stub
    server that keeps its own).

    With `ignore_eos`
    (vLLM's extension, which SGLang and llama.cpp's server read too) every answer is `max_tokens` long, as a
    benchmark needs; without it, the server may stop at the model's end-of-sequence token."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": ignore_eos}
    if chat:
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    endpoint = f"{url.rstrip('/')}/{'chat/completions' if chat else 'completions'}"
    request = client.build_request("POST", endpoint, json=body)  # encoded before the clock starts
    times: list[float] = []
    usage = None
    sent = time.perf_counter()
    started: list[float] = []

    async def trace(event: str, info) -> None:  # httpcore's hook: the moment the request's head starts to go out
        if event.endswith("send_request_headers.started"):
            started.append(time.perf_counter())

    request.extensions["trace"] = trace
    try:
        r = await client.send(request, stream=True)
        sent = started[0] if started else sent
        try:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                return RequestRecord(sent, error=f"HTTP {r.status_code}: {_error_message(text)}")
            async for line in r.aiter_lines():
                arrived = time.perf_counter()  # before the line is parsed
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if event.get("error"):
                    return RequestRecord(sent, times, error=f"stream error: {_error_message(json.dumps(event))}")
                if event.get("usage"):
                    usage = event["usage"]
                said = "".join(_text(c, chat) for c in event.get("choices") or ())
                if said:
                    times.append(arrived)
                    if text is not None:
                        text.append(said)
        finally:
            await r.aclose()
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        return RequestRecord(sent, times, error=f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
    if usage is None:
        return RequestRecord(sent, times, input_tokens=len(prompt) if isinstance(prompt, list) and not chat else 0)
    return RequestRecord(sent, times, input_tokens=usage.get("prompt_tokens", 0),
                         output_tokens=max(usage.get("completion_tokens", 0), len(times)) if times else 0)


def _text(choice: dict, chat: bool) -> str:
    return (choice.get("delta") or {}).get("content") or "" if chat else choice.get("text") or ""


def _error_message(text: str) -> str:
    try:
        return json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return text[:200]



