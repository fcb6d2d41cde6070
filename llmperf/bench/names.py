"""What each number llmperf.bench reports means, and what the other tools call it.

The same quantity goes by different names in different tools, and the same name means different quantities:
vLLM's TPOT is AIPerf's "inter token latency", and guidellm's TPOT counts the first token in. `NAMES` is the one
table of names per tool (chapter 6 shows it, `llmperf.chapters.serving.sources.names_view`); `OURS` says which of
its rows each of llmperf.bench's numbers follows, and `definitions` writes that into a run's JSON.

Pure data: no pandas, no torch.
"""

from __future__ import annotations

from typing import NamedTuple

NONE = "—"  # a tool that reports no such quantity


class Tool(NamedTuple):
    """One benchmarking tool: its column heading, its bib key(s), and where its names were read."""

    column: str
    cite: tuple[str, ...]
    read: str  # the documentation or source the names in its column come from


TOOLS: tuple[Tool, ...] = (
    Tool("vLLM", ("vllm_bench_serve",),
         "vllm/benchmarks/serve.py (`vllm bench serve`; formerly benchmarks/benchmark_serving.py): "
         "calculate_metrics and the printed summary"),
    Tool("GenAI-Perf / AIPerf", ("nvidia_genaiperf", "nvidia_aiperf"),
         "GenAI-Perf: llm_profile_data_parser.py and its goodput tutorial; AIPerf: the Metrics Reference and "
         "aiperf/metrics/types/*.py"),
    Tool("guidellm", ("guidellm",),
         "docs/guides/metrics.md, src/guidellm/schemas/request_stats.py, benchmark/outputs/console.py"),
    Tool("LLMPerf (Ray)", ("ray_llmperf",),
         "src/llmperf/common_metrics.py, ray_clients/openai_chat_completions_client.py, token_benchmark_ray.py"),
)
"""The tools compared in `names_table`, in its column order: vLLM's `vllm bench serve`, NVIDIA's GenAI-Perf
and its successor AIPerf (one column: they share their names, except where a cell says otherwise), guidellm,
and Anyscale's LLMPerf."""


class MetricNames(NamedTuple):
    """One quantity and each tool's own name for it (in `TOOLS`' order); NONE where the tool reports no such
    quantity. `cite` is the bib key that defines the quantity, where no tool in the table does."""

    definition: str
    names: tuple[str, str, str, str]
    cite: str = ""


NAMES: tuple[MetricNames, ...] = (
    MetricNames("TTFT: time from sending a request to its first token",
                ("TTFT", "Time to First Token (TTFT)", "TTFT", "ttft_s")),
    MetricNames("per request, (E2E − TTFT) ÷ (output tokens − 1)",
                ("TPOT", "Inter Token Latency (ITL)", "ITL", NONE)),
    MetricNames("every gap between successive streamed tokens, pooled over requests",
                ("ITL", "Inter Chunk Latency (ICL), AIPerf only; gaps between chunks", NONE, NONE)),
    MetricNames("per request, E2E ÷ output tokens, the first token included",
                (NONE, NONE, "TPOT", "inter_token_latency_s")),
    MetricNames("E2E latency: time from sending a request to its last token",
                ("E2EL", "Request Latency", "Request Latency", "end_to_end_latency_s")),
    MetricNames("goodput: requests meeting every latency objective ÷ the run's duration",
                ("Request goodput", "Request goodput (GenAI-Perf), Goodput (AIPerf)", NONE, NONE)),
    MetricNames("goodput: the highest request rate at which a target share of requests (e.g. 90 %) meets "
                "the objectives, found by a sweep (DistServe)",
                (NONE, NONE, NONE, NONE), "zhong2024distserve"),
)
"""The clash of metric names between tools: one row per quantity. The same word names different quantities
("ITL" is a per-request mean in GenAI-Perf, AIPerf and guidellm but vLLM's pooled gaps; "TPOT" excludes the
first token in vLLM and includes it in guidellm), and one quantity has different names."""


OURS = {"ttft": 0, "tpot": 1, "itl": 2, "e2e": 4, "goodput": 5, "sweep: highest load meeting objectives": 6}
"""llmperf.bench's numbers (the keys of its summary, and the sweep's reading), each the index of its row of
`NAMES`. llmperf.bench names them as vLLM's benchmark does."""

WHERE = "chapter 6's table of names per tool (llmperf.bench.names.NAMES)"


def definitions() -> dict[str, dict]:
    """For a run's JSON: each of llmperf.bench's numbers, its definition, and its name in each tool."""
    return {ours: {"definition": NAMES[i].definition, "names": dict(zip((t.column for t in TOOLS), NAMES[i].names))}
            for ours, i in OURS.items()}


def legend() -> str:
    """Two lines under a printed summary: what TPOT and ITL mean here, and where the other tools' names are."""
    return ("TPOT is per request, (E2E − TTFT) ÷ (tokens − 1), as vLLM's (AIPerf calls it ITL; guidellm's TPOT "
            "counts the first token in);\nITL pools every gap between chunks, as vLLM's. Other tools' names: "
            + WHERE + ".")
