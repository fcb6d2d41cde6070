"""A load generator for any OpenAI-compatible server: `llmperf.serve`, vLLM, SGLang, TGI, llama.cpp's.

    python -m llmperf.bench --url http://127.0.0.1:8000 --rate 4 --concurrency 8 --warmups 4 --num-requests 100

It sends streaming requests and records, for each, when it was sent, when each
chunk of text arrived, the token counts the server reports in `usage`, and any
error (`metrics.RequestRecord`); then it prints `metrics.summarize`'s table.

`--sweep rate` (or `concurrency`) runs a series of loads instead and reports the server's capacity, the knee of
its throughput-latency curve, and the heaviest load that met the objectives (`sweep`'s docstring).

How it loads a server, open loop at a rate, closed loop at a concurrency, or a rate with a cap, and with
warm-up requests first, is `load`'s docstring. `--url` takes the server's root, as AIPerf, guidellm and vLLM's
benchmark do, or its /v1 base, as the `openai` client does (`client.api_base`).

Token timing: each streamed chunk that carries text is one arrival time. A
server that packs several tokens into one chunk gives fewer arrivals than
tokens; TPOT stays right (it divides by the token count from `usage`), but the
inter-token gaps are then gaps between chunks. Without `usage` in the stream
(a server that ignores `stream_options`), one token per chunk is assumed.

Errors (HTTP status, timeouts, dropped connections, broken streams) are
recorded with the request and never stop the run: each request ends within
`--timeout`, a deadline on the whole answer (`client.send`), and the summary
counts the failures by kind and divides by the run's wall time.

The modules: `client` (one request, timed; the API's address), `load` (arrivals, concurrency, warm-up),
`workloads` (prompt and output lengths, shared prefixes), `conversations` (multi-turn: each request carries
the history), `sweep` (a series of loads: capacity, knee, the heaviest load meeting objectives), `names` (what
each number means, and its name in other tools), `watch` (llmperf.serve's count in flight, from /health),
`scrape` (any server's /metrics, beside the client's numbers), `report` (the summary as text, the figures),
`scale` (one schedule sent by several processes, `--workers`, or machines, `--shard`), `merge` (the shards'
files made one run: `python -m llmperf.bench merge`), `cli` (the command). Requests beyond random ids and a prompts file: `inputs` (synthetic text, datasets and traces:
the options), `text` (text of a length in tokens, from the package's corpus), `datasets` (ShareGPT, JSON Lines and
Mooncake trace files, read and checked).
"""

from .cli import main  # noqa: F401
from .files import load_prompts, write_csv  # noqa: F401
from .client import api_base, discover_model, send  # noqa: F401
from .load import achieved_rate, arrival_gaps, run, synthetic_prompts, warm_up  # noqa: F401
from .scrape import ServerView, scrape_metrics  # noqa: F401
from .sweep import Point, Sweep, sweep  # noqa: F401
from . import conversations, workloads  # noqa: F401
from .watch import watch_in_flight  # noqa: F401
