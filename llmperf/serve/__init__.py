"""An OpenAI-compatible HTTP server over `llmperf.engine`: what chapter 6 measures.

    python -m llmperf.serve [--port 8000] [--max-num-seqs 8] [--block-size 16] [--policy continuous]

Endpoints, as OpenAI's API defines them, so that the official `openai` client
and standard benchmark clients work unchanged:

- POST /v1/completions: {"model", "prompt" (text or token ids), "max_tokens"
  (or "max_completion_tokens"), "temperature", "top_k", "seed", "stop",
  "stream", "stream_options", "ignore_eos"};
- POST /v1/chat/completions: the same with "messages" instead of "prompt"
  (content a string or a list of text parts), rendered with the model's chat
  template;
- GET /v1/models, GET /health ({"status", "active", "waiting"});
- GET /metrics: the engine's counts in Prometheus's format, under vLLM's metric
  names (`exported` has the table).

Every other OpenAI field is served, refused or ignored as the table in
`protocol` says. An answer ends at the model's end-of-sequence token unless
"ignore_eos" is true, and special tokens never appear in its text.

With "stream": true the answer comes as server-sent events, one chunk per
token, then `data: [DONE]`; with "stream_options": {"include_usage": true} a
last chunk carries the token counts. Each chunk is sent as soon as its token
exists, so a client's clock sees the engine's TTFT and inter-token gaps.

Bad input gets a 4xx answer with an OpenAI-style error body, naming the field,
before any work, and the server keeps serving. A request that fails inside the
engine fails alone. A full queue answers 503 at once. A client that
disconnects, streaming or not, has its request cancelled, which frees its slot
at the next step. Limits on bodies and connections are in `server`.

The engine runs in its own thread; the web framework (Starlette, on uvicorn)
runs the event loop. Tokens cross from one to the other through a per-request
asyncio queue.

The package's modules: `protocol` (OpenAI's fields, parsed and checked, with no
HTTP and no model), `answer` (token ids to text, stop strings, the answer's
chunks and bodies), `worker` (the engine's thread and its per-request queues),
`exported` (/metrics), `config` (every setting, resolved once: `resolve`),
`server` (the Starlette application, its limits,
`serve`, `background`) and
`__main__` (the command).
"""

from __future__ import annotations

from .answer import Answer  # noqa: F401
from .protocol import APIError, Parsed, parse  # noqa: F401
from .config import ServingConfig, resolve  # noqa: F401
from .server import Served, background, create_app, serve  # noqa: F401
from .worker import EngineThread  # noqa: F401
