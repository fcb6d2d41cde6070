"""Two cited tables chapter 6 shows and later work points to: MLPerf Inference's latency limits, and what each
benchmarking tool calls each serving metric. Data only, no measurement; pure Python and pandas."""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

# The table of names per tool lives with the load generator, whose JSON points to it.
from ...bench.names import NAMES, NONE, TOOLS, MetricNames, Tool  # noqa: F401



class Limit(NamedTuple):
    """One MLPerf Inference latency limit: the 99th percentile of TTFT and the 99th percentile of TPOT, each
    taken over the requests of a run (one value per request), must both be at or below these, in seconds."""

    model: str
    scenario: str  # "server" or "interactive"
    ttft_p99: float  # s
    tpot_p99: float  # s
    cite: str  # bib key


MLPERF_LIMITS: tuple[Limit, ...] = (
    Limit("Llama-2-70B", "server", 2.0, 0.200, "mlperf2025rules"),
    Limit("Llama-3.1-8B", "server", 2.0, 0.100, "mlperf2025rules"),
    Limit("Llama-3.1-405B", "server", 6.0, 0.175, "mlperf2025rules"),
    Limit("Llama-2-70B", "interactive", 0.450, 0.040, "mlperf2025rules"),
    Limit("Llama-3.1-8B", "interactive", 0.500, 0.030, "mlperf2025rules"),
)
"""MLPerf Inference's latency limits for its LLM benchmarks, as the MLPerf Inference rules' table of
benchmarks states them (mlperf2025rules; the Llama-3.1-8B benchmark is introduced in mlcommons2025smallllm).

What is limited: each request of a run has one TTFT (its first token's arrival − its issue) and one TPOT
((E2E − TTFT) ÷ (output tokens − 1), the mean gap after the first token); the 99th percentile of the TTFTs
and the 99th percentile of the TPOTs (MLPerf takes percentiles by nearest rank) must each be at or below
the limit. The server scenario sends requests as a Poisson process; the interactive scenario does the same
under the tighter limits. Neither limits a mean, so a run whose 1 ÷ mean TPOT clears the TPOT limit can
still fail it at the 99th percentile."""


def limit(model: str, scenario: str) -> Limit:
    """The MLPerf limit for `model` in `scenario`; ValueError naming the known pairs for any other."""
    for row in MLPERF_LIMITS:
        if row.model == model and row.scenario == scenario:
            return row
    known = ", ".join(f"{r.model}/{r.scenario}" for r in MLPERF_LIMITS)
    raise ValueError(f"no MLPerf limit for model {model!r} in scenario {scenario!r}; known: {known}")


SOURCE_NAMES = {"mlperf2025rules": "MLPerf Inference rules (MLCommons, 2025)",
                "mlcommons2025smallllm": "MLPerf Inference 5.1: small LLMs (MLCommons, 2025)"}
"""A reader's name for each bib key a limit may cite, shown in `limits_view` (the prose cites the key itself)."""


def limits_table() -> pd.DataFrame:
    """One row per limit: model, scenario, the p99 TTFT limit in s, the p99 TPOT limit in ms, its source (the bib
    key)."""
    return pd.DataFrame([{"model": r.model, "scenario": r.scenario, "TTFT p99 limit (s)": r.ttft_p99,
                          "TPOT p99 limit (ms)": round(r.tpot_p99 * 1e3, 3), "source": r.cite}
                         for r in MLPERF_LIMITS])


def limits_view():
    """`limits_table` as the chapter shows it: each source by its name in `SOURCE_NAMES`, not its bib key, and
    no index (a Styler, which also shows long cells whole)."""
    table = limits_table().assign(source=lambda t: t["source"].map(SOURCE_NAMES))
    return table.style.format({"TTFT p99 limit (s)": "{:g}", "TPOT p99 limit (ms)": "{:g}"}).hide(axis="index")


def names_table() -> pd.DataFrame:
    """`NAMES` as a table: the definition, then one column per tool of `TOOLS`."""
    return pd.DataFrame([{"definition": row.definition, **{t.column: n for t, n in zip(TOOLS, row.names)}}
                         for row in NAMES])


def names_view():
    """`names_table` as the chapter shows it: every cell whole (a Styler does not cut long text, as a plain
    DataFrame's display does) and no index."""
    return names_table().style.hide(axis="index")


def cites() -> tuple[str, ...]:
    """Every bib key these tables rest on, each once, in order of first use."""
    keys = [r.cite for r in MLPERF_LIMITS] + [k for t in TOOLS for k in t.cite] + [r.cite for r in NAMES if r.cite]
    return tuple(dict.fromkeys(keys))
