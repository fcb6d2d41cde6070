"""OpenAI's API as this server reads it: a request body in, a checked `Parsed` request out, or an `APIError`
naming the field that is wrong. No HTTP here (that is `server`), no model and no torch: bytes and a tokenizer in,
plain objects out. The numbers are checked by `llmperf.request_checks`, as `generate` and the engine check them.

How each field is treated (`SUPPORTED`, `DEFAULT_ONLY`, `IGNORED`):

| field | completions | chat | treated |
|---|---|---|---|
| model | yes | yes | required; another name answers 404 |
| prompt | yes | | text, or one list of token ids |
| messages | | yes | roles system, developer (as system), user, assistant; content a string or a list of text parts |
| max_tokens, max_completion_tokens | yes | yes | the newer name wins; default 16 (completions), the rest of the context (chat) |
| temperature | yes | yes | 0 (greedy) to 2; default 1 |
| top_k | yes | yes | vLLM's extension; -1 or 0 mean every token |
| top_p | yes | yes | above 0, at most 1; default 1 (every token) |
| seed, stop, stream, stream_options | yes | yes | stop: up to 4 strings; stream_options: include_usage |
| ignore_eos | yes | yes | vLLM's extension: go on past the end-of-sequence token |
| n, best_of, echo, logprobs, top_logprobs, min_p, presence_penalty, frequency_penalty, repetition_penalty, logit_bias, suffix, response_format, tools, tool_choice, min_tokens | | | accepted only at the value that means "not used" (or null); any other value is refused with 400, since the answer would not be what was asked for |
| user, metadata, store, parallel_tool_calls, service_tier | | | accepted, no effect |

Any other field (another server's extension) is ignored, as vLLM ignores them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .. import request_checks

MAX_DEPTH = 16  # nesting of a body's values: messages[i].content[j].text is 4 deep
MAX_STOPS = 4  # OpenAI's limit on stop strings
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}

# Fields accepted only at the value that means "not used", as OpenAI defines each (null is always accepted).
DEFAULT_ONLY = {"n": 1, "best_of": 1, "echo": False, "logprobs": False, "top_logprobs": 0, "min_p": 0,
                "presence_penalty": 0, "frequency_penalty": 0, "repetition_penalty": 1, "logit_bias": {},
                "suffix": "", "response_format": {"type": "text"}, "tools": [], "tool_choice": "none",
                "min_tokens": 0}
IGNORED = ("user", "metadata", "store", "parallel_tool_calls", "service_tier")
SUPPORTED = ("model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_k", "top_p",
             "seed", "stop", "stream", "stream_options", "ignore_eos")


class APIError(Exception):
    """An error answered to the client as OpenAI does: an HTTP status and {"error": {...}} (`body`).

    Invariant: a message with a `param` starts with it, as the client spelled the field ("max_completion_tokens:
    ..."), since many clients show only the message. One that does not is given the prefix "param: " here; the
    messages below are written to read on from it, and `messages[2].content` already starts with "messages".
    """

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        if param is not None and not message.startswith((f"{param}:", f"{param}[", f"{param}.")):
            message = f"{param}: {message}"
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def refused(e: request_checks.InvalidParameter) -> APIError:
    """The shared validator's refusal as the client's 400: its explanation, after the field it names."""
    return APIError(400, str(e), param=e.param)


@dataclass(frozen=True)
class Parsed:
    """A request as the engine takes it, checked, with what the answer's formatting needs."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_k: int | None
    top_p: float
    seed: int | None
    stop_ids: tuple[int, ...]  # tokens that end the answer: the end-of-sequence token, unless ignore_eos
    stop: tuple[str, ...]  # stop strings
    stream: bool
    include_usage: bool
    chat: bool


def loads(raw: bytes) -> dict:
    """The JSON object in a request body, or APIError (400) saying why it is not one."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise APIError(400, "The request body nests JSON too deeply to read.") from None
    except ValueError as e:  # not JSON, not UTF-8, or an integer of more than 4300 digits
        raise APIError(400, f"The request body is not valid JSON: {e}.") from None
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object.")
    for name, value in body.items():
        if _depth(value) > MAX_DEPTH:
            raise APIError(400, f"nests values more than {MAX_DEPTH} deep; no field needs that.", param=name)
    return body


def _depth(value) -> int:
    """How deep lists and objects nest in `value` (0 for a number or a string), without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (list, dict)):
            if d + 1 > MAX_DEPTH:
                return d + 1
            deepest = max(deepest, d + 1)
            todo += [(x, d + 1) for x in (v.values() if isinstance(v, dict) else v)]
    return deepest


def _field(body: dict, name: str, kinds: tuple, default=None):
    """body[name] if it is one of `kinds` (bool only if bool is listed), `default` if absent or null."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join({int: "an integer", float: "a number", str: "a string", bool: "true or false",
                             list: "a list", dict: "an object"}[k] for k in kinds)
        raise APIError(400, f"must be {names}, got {request_checks.shown(value)}.", param=name)
    return value


def _same(value, default) -> bool:
    """value == default, but true is not 1 and 0 is not false."""
    if isinstance(value, bool) != isinstance(default, bool):
        return False
    return value == default


def _text(name: str, value: str) -> str:
    try:
        request_checks.check_text(value, name)
    except request_checks.InvalidParameter as e:
        raise refused(e) from None
    return value


def _messages(body: dict) -> list[dict]:
    """The chat's messages as the template takes them: [{"role", "content": str}], roles mapped."""
    messages = _field(body, "messages", (list,))
    if not messages:
        raise APIError(400, "missing, or empty: a chat needs a non-empty list of {\"role\", \"content\"}.",
                       param="messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise APIError(400, f"{where}: must be an object with a 'role' and a 'content'.", param="messages")
        if m["role"] not in ROLES:
            raise APIError(400, f"{where}: has the role {request_checks.shown(m['role'])}; this server takes "
                           f"{', '.join(ROLES)} (no tools).", param="messages")
        content = m.get("content")
        if content is None and m["role"] == "assistant":
            content = ""
        if isinstance(content, list):  # parts, as the official client's typed messages send them
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise APIError(400, f"{where}.content: must be a string or a list of "
                               "{\"type\": \"text\", \"text\": str} parts: this model reads text only.",
                               param="messages")
            content = "\n".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise APIError(400, f"{where}.content: must be a string or a list of text parts, got "
                           f"{request_checks.shown(content)}.", param="messages")
        out.append({"role": ROLES[m["role"]], "content": _text("messages", content)})
    return out


def parse(body: dict, chat: bool, tokenizer, model_name: str, capacity: int, vocab_size: int) -> Parsed:
    """The request in a completions (`chat` False) or chat body, checked against a context of `capacity`
    tokens; or APIError, whose `param` names the first field found wrong. Tokenizes the prompt: call it off
    the event loop."""
    model = _field(body, "model", (str,))
    if model is None:
        raise APIError(400, "missing: name the model to ask (GET /v1/models lists it).", param="model")
    if model != model_name:
        raise APIError(404, f"the model {request_checks.shown(model)} does not exist; this server serves "
                       f"'{model_name}'.", param="model", code="model_not_found")
    for name, default in DEFAULT_ONLY.items():
        if body.get(name) is not None and not _same(body[name], default):
            raise APIError(400, f"not supported by this server: leave it out, or send "
                           f"{json.dumps(default)}.", param=name)
    if chat:
        prompt_param = "messages"
        prompt_ids = tokenizer.encode(tokenizer.apply_chat_template(_messages(body)))
    else:
        prompt_param = "prompt"
        prompt = _field(body, "prompt", (str, list))
        if prompt is None:
            raise APIError(400, "missing: a completion needs a prompt, as text or as a list of token ids.",
                           param="prompt")
        if isinstance(prompt, str):
            prompt_ids = tokenizer.encode(_text("prompt", prompt))
        elif any(isinstance(t, list) for t in prompt):
            raise APIError(400, "must be a string or one list of token ids; send several prompts as "
                           "separate requests.", param="prompt")
        else:
            try:
                prompt_ids = request_checks.token_ids(prompt)
            except request_checks.InvalidParameter as e:
                raise refused(e) from None
    length_param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(length_param)
    if max_tokens is None:
        max_tokens = capacity - len(prompt_ids) if chat else 16
    temperature = body.get("temperature")
    top_p = body.get("top_p")
    top_k = body.get("top_k")
    if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k in (-1, 0):
        top_k = None  # vLLM's and SGLang's way of saying "every token"
    try:
        max_tokens, temperature, top_k, top_p, seed = request_checks.check(
            prompt_tokens=len(prompt_ids), lowest_id=min(prompt_ids, default=0), highest_id=max(prompt_ids, default=0),
            max_tokens=max_tokens, temperature=1.0 if temperature is None else temperature, top_k=top_k,
            top_p=1.0 if top_p is None else top_p, seed=body.get("seed"), context=capacity, vocab_size=vocab_size,
            prompt_param=prompt_param, length_param=length_param)
    except request_checks.InvalidParameter as e:
        raise refused(e) from None
    stop = _field(body, "stop", (str, list), [])
    stops = [stop] if isinstance(stop, str) else stop
    if len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
        raise APIError(400, f"must be a non-empty string or a list of at most {MAX_STOPS} of them.",
                       param="stop")
    for s in stops:
        _text("stop", s)
    stream = _field(body, "stream", (bool,), False)
    include_usage = _field(body, "stream_options", (dict,), {}).get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise APIError(400, "stream_options.include_usage: must be true or false.", param="stream_options")
    ignore_eos = _field(body, "ignore_eos", (bool,), False)
    return Parsed(list(prompt_ids), max_tokens, temperature, top_k, top_p, seed,
                  () if ignore_eos else (tokenizer.eos_id,), tuple(stops), stream, bool(include_usage), chat)
