"""The server's /metrics: what the engine counts, in Prometheus's text format, under vLLM's names.

vLLM, SGLang and TGI publish their state at /metrics for Prometheus to scrape, and load generators (AIPerf,
guidellm, `llmperf.bench`) read it beside their own clocks. Where a number here means what vLLM's does, it has
vLLM's name, so a dashboard or a scraper made for vLLM reads this server unchanged. Every metric carries the
label model_name.

Read from the engine at each scrape (gauges and counters):

| name | kind | what |
|---|---|---|
| vllm:num_requests_running | gauge | requests admitted (being prefilled or decoded) |
| vllm:num_requests_waiting | gauge | requests queued for admission (preempted ones included) |
| vllm:kv_cache_usage_perc | gauge | fraction (0 to 1) of the KV pool's blocks that requests hold |
| vllm:prefix_cache_queries_total | counter | prompt tokens looked up in the prefix cache, at each admission |
| vllm:prefix_cache_hits_total | counter | of those, tokens found cached (whose prefill was skipped) |
| vllm:num_preemptions_total | counter | requests preempted (blocks given back, to be prefilled again) |
| vllm:prompt_tokens_total | counter | positions prefilled (recomputed ones included; cached ones not) |
| vllm:generation_tokens_total | counter | tokens generated, whatever became of their request |
| vllm:request_success_total | counter | requests ended, by finished_reason: stop, length, abort (the client left), error |

Observed as each request that was served whole ends (finished_reason stop or length), in seconds from the
moment the engine was handed it, after its body was parsed and its prompt tokenized (histograms):

| name | what |
|---|---|
| vllm:time_to_first_token_seconds | its first token's time |
| vllm:inter_token_latency_seconds | each gap between two of its tokens |
| vllm:request_time_per_output_token_seconds | its TPOT: (last − first token) ÷ (tokens − 1), if it had two or more |
| vllm:e2e_request_latency_seconds | its last token's time |
| vllm:request_queue_time_seconds | its wait for admission |
| vllm:request_prompt_tokens, vllm:request_generation_tokens | its token counts |

A client's clock adds the network and the parsing to each of these: `llmperf.bench` reports both views.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..engine import Engine, Request

SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0,
           5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
FINISHED = {"stop": "stop", "length": "length", "cancelled": "abort", "error": "error"}  # engine's: vLLM's
CONTENT_TYPE = CONTENT_TYPE_LATEST


class _EngineState:
    """A Prometheus collector that reads the engine's gauges and counters at each scrape."""

    def __init__(self, engine: Engine, model_name: str):
        self.engine, self.model_name = engine, model_name

    def collect(self):
        e, label = self.engine, [self.model_name]

        def gauge(name, text, value):
            g = GaugeMetricFamily(name, text, labels=["model_name"])
            g.add_metric(label, value)
            return g

        def counter(name, text, value):
            c = CounterMetricFamily(name, text, labels=["model_name"])
            c.add_metric(label, value)
            return c

        scheduler = e.scheduler
        yield gauge("vllm:num_requests_running", "Requests admitted: being prefilled or decoded.", e.active)
        yield gauge("vllm:num_requests_waiting", "Requests queued for admission.", e.waiting)
        yield gauge("vllm:kv_cache_usage_perc", "Fraction of the KV pool's blocks in use (1 = all).", e.cache_usage)
        yield counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
                      scheduler.blocks.queries)
        yield counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", scheduler.blocks.hits)
        yield counter("vllm:num_preemptions", "Requests preempted (to be prefilled again).", scheduler.preemptions)
        yield counter("vllm:prompt_tokens", "Positions prefilled.", e.prompt_tokens)
        yield counter("vllm:generation_tokens", "Tokens generated.", e.generated_tokens)
        ended = CounterMetricFamily("vllm:request_success", "Requests ended, by finish reason.",
                                    labels=["model_name", "finished_reason"])
        finished = dict(e.finished)
        for ours, theirs in FINISHED.items():
            ended.add_metric([self.model_name, theirs], finished.get(ours, 0))
        yield ended


class Exported:
    """The metrics of one server (a registry of its own, so several servers can live in one process)."""

    def __init__(self, engine: Engine, model_name: str):
        self.registry = CollectorRegistry()
        self.registry.register(_EngineState(engine, model_name))

        def histogram(name, text, buckets):
            return Histogram(name, text, ["model_name"], buckets=buckets, registry=self.registry).labels(model_name)

        self.ttft = histogram("vllm:time_to_first_token_seconds", "Time to the first token (s).", SECONDS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Gap between two tokens of a request (s).", SECONDS)
        self.tpot = histogram("vllm:request_time_per_output_token_seconds", "A request's time per output token "
                              "after the first (s).", SECONDS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Time to a request's last token (s).", SECONDS)
        self.queue = histogram("vllm:request_queue_time_seconds", "A request's wait for a slot (s).", SECONDS)
        self.prompt = histogram("vllm:request_prompt_tokens", "A request's prompt tokens.", TOKENS)
        self.generated = histogram("vllm:request_generation_tokens", "A request's generated tokens.", TOKENS)

    def ended(self, request: Request) -> None:
        """Observe `request`, which has just ended (only if it was served whole: stop or length)."""
        if request.finish_reason not in ("stop", "length") or not request.token_times:
            return
        times, n = request.token_times, len(request.token_times)
        self.ttft.observe(times[0] - request.sent)
        for a, b in zip(times, times[1:]):
            self.itl.observe(b - a)
        if n > 1:
            self.tpot.observe((times[-1] - times[0]) / (n - 1))
        self.e2e.observe(times[-1] - request.sent)
        self.queue.observe(max(request.admitted - request.sent, 0.0))
        self.prompt.observe(len(request.prompt))
        self.generated.observe(n)

    def render(self) -> bytes:
        """The metrics in Prometheus's text exposition format."""
        return generate_latest(self.registry)
