"""OpenAI's API as this server speaks it: parsing a request body, and formatting errors, answers and the
streamed chunks. No HTTP serving here (that is `server`), no model: just requests in, objects out.

- `APIError`: an error as OpenAI answers it, an HTTP status and {"error": {...}};
- `parse`: (prompt ids, engine Request, options) from a completions or chat body, or an APIError saying
  exactly which field is wrong;
- `Response`: what has been generated for one request, as text (stop strings cut, multi-byte characters
  held back until complete), and the OpenAI-shaped objects that carry it: a chunk, the usage chunk, the whole
  answer.
"""

from __future__ import annotations

import json
import time
import uuid

from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse

from ..engine import Request


class APIError(Exception):
    """An error answered to the client as OpenAI does: an HTTP status and {"error": {...}}."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status)


def sse(obj) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def json_body(http: HTTPRequest) -> dict:
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


def parse(body: dict, chat: bool, tokenizer, model_name: str, capacity: int):
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


class Response:
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
