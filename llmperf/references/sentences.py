"""The sentences a chapter writes about each reference, chosen from the reference's numbers.

Exactly as for this machine's results, no verdict is typed: "faster", "grew",
"flat" come from the numbers through `llmperf.wording`. A reference written
before a result existed gets a sentence saying which results it lacks. No torch.
"""

from __future__ import annotations

from ..wording import SAME, duration, speed_change, times


def _missing(ref, keys) -> str | None:
    lacking = [k for k in keys if k not in ref.results]
    return f"{ref.label}: {', '.join(lacking)} not in this reference." if lacking else None


def _than_here(ref_s: float, here_s: float | None, what: str) -> str:
    """"12 times faster than this machine's" for the same `what`, or nothing when this machine has none."""
    if here_s is None:
        return ""
    return f", {speed_change(here_s, ref_s, f'this machine’s {what}')}"


def _change(ratio: float, what: str) -> str:
    """"tokens/s grew 16.0 times", "... fell to 0.52 times", "... stayed about the same" (ratio: new ÷ old)."""
    if abs(ratio - 1) <= SAME:
        return f"{what} stayed about the same"
    return f"{what} grew {times(ratio)}" if ratio > 1 else f"{what} fell to {ratio:.2f} times"


def chain(ref, here) -> str:
    r = ref.results
    gap = r["slope_ms"] / r["step_ms"]
    fit = ("matches the step to 10 %: there too, each token costs one step" if abs(gap - 1) <= 0.1 else
           f"is {times(gap)} the step: there, each generated token cost {'more' if gap > 1 else 'less'} than a "
           "bare step")
    return (f"**{ref.label}**: one decode step took {duration(r['step_ms'] / 1e3)}"
            f"{_than_here(r['step_ms'], here.get('step_ms'), 'step')}, and the fitted slope of end-to-end time "
            f"against N ({duration(r['slope_ms'] / 1e3)} per token) {fit}.")


def flop_rate(tflops: float) -> str:
    """A rate given in TFLOP/s as text, in GFLOP/s below 1 TFLOP/s: 0.0855 -> "85.5 GFLOP/s", 700 -> "700 TFLOP/s"."""
    value, unit = (tflops, "TFLOP/s") if tflops >= 1 else (tflops * 1e3, "GFLOP/s")
    digits = 0 if value >= 100 else 1 if value >= 10 else 2
    return f"{value:,.{digits}f} {unit}"


def prefill(ref, here) -> str:
    r = ref.results
    S = r["ttft_lengths"][-1]
    share = r["achieved_longest_pct"]
    verdict = ("at least half the rate of a large product alone, as a compute-bound pass should be" if share >= 50
               else "under half of that rate: something besides the large products, such as the ops' fixed costs or "
               "attention, may have held the pass back there")
    achieved = share / 100 * r["matmul_tflops"]  # the longest prompt's FLOPs ÷ its TTFT
    return (f"**{ref.label}**: {r['ttft_model']} took {duration(r['ttft_longest_ms'] / 1e3)} to prefill "
            f"{S:,} tokens: {flop_rate(achieved)}, {share:.0f} % of the {flop_rate(r['matmul_tflops'])} its matmul "
            f"probe reached, {verdict}.")


def intensity(ref, here) -> str:
    r = ref.results
    B = r["batches"][-1]
    return (f"**{ref.label}**: from batch 1 to {B}, {_change(r['step_growth'], 'the step')} while "
            f"{_change(r['tok_per_s_gain'], 'tokens/s')}; "
            f"{r['context_ratio']:.0f} times the context cost {times(r['context_growth'])} the TPOT at batch 1.")


def caching(ref, here) -> str:
    r = ref.results
    return (f"**{ref.label}**: over {r['generation']}, the naive loop took {duration(r['naive_s'])} and the "
            f"cached one {duration(r['cached_s'])}: the cached loop was "
            f"{speed_change(r['naive_s'], r['cached_s'], 'the naive one')}.")


def anatomy(ref, here) -> str:
    r = ref.results
    if r.get("graph_ms") is None:
        return (f"**{ref.label}** (no CUDA, so no graph): a plain step of {r['ops_per_step']:,.0f} ops took "
                f"{duration(r['plain_step_ms'] / 1e3)}, of which the ops' fixed cost, {r['op_us']:.1f} µs each, "
                f"is about {r['fixed_share_pct']:.0f} %.")
    eager, graph, kernels = r["eager_ms"], r["graph_ms"], r.get("kernels_per_step")
    launched = f"one step launched {kernels:,.0f} kernels" if kernels else "the profiler counted no kernels"
    text = (f"**{ref.label}**: {launched}; eager the step took {duration(eager / 1e3)}, replayed from a CUDA "
            f"Graph {duration(graph / 1e3)}, {speed_change(eager, graph, 'eager')}")
    if r["launch_removed_pct"] > 100 * SAME:
        text += f": replaying removed {r['launch_removed_pct']:.0f} % of the eager step's time"
    if r.get("compiled_ms") is not None:
        text += f". torch.compile's reduce-overhead mode took {duration(r['compiled_ms'] / 1e3)}"
    return text + "."


def serving(ref, here) -> str:
    r = ref.results
    B, users = r["serve_batches"][-1], r["serve_per_user"]
    user = (f"each user's speed stayed about the same ({users[0]:,.1f} and {users[-1]:,.1f} tokens/s)"
            if abs(users[-1] / users[0] - 1) <= SAME else
            f"each user's speed went from {users[0]:,.1f} to {users[-1]:,.1f} tokens/s")
    return (f"**{ref.label}**: from a max batch of 1 to {B}, {_change(r['serve_gain'], 'the server’s output')} "
            f"({r['serve_tok_per_s'][0]:,.1f} and {r['serve_tok_per_s'][-1]:,.1f} tokens/s), while {user}.")


SENTENCES = {"chain": chain, "prefill": prefill, "intensity": intensity, "caching": caching, "anatomy": anatomy,
             "serving": serving}
NEEDS = {  # the results each sentence reads
    "chain": ("step_ms", "slope_ms"), "prefill": ("ttft_model", "ttft_lengths", "ttft_longest_ms",
                                                  "achieved_longest_pct", "matmul_tflops"),
    "intensity": ("batches", "step_growth", "tok_per_s_gain", "context_ratio", "context_growth"),
    "caching": ("generation", "naive_s", "cached_s"),
    "anatomy": ("ops_per_step", "plain_step_ms", "op_us", "fixed_share_pct"),
    "serving": ("serve_batches", "serve_per_user", "serve_gain", "serve_tok_per_s"),
}
# A CUDA reference's chapter 5 sentence is about its graph instead (the kernels and compiled step are optional).
GRAPH_NEEDS = ("eager_ms", "graph_ms", "launch_removed_pct")


def needs(chapter: str, ref) -> tuple[str, ...]:
    """The results `chapter`'s sentence about `ref` reads: for chapter 5, a CUDA run's graph or a processor's
    fixed costs."""
    if chapter == "anatomy" and ref.results.get("graph_ms") is not None:
        return GRAPH_NEEDS
    return NEEDS[chapter]


def sentence(chapter: str, ref, here: dict) -> str:
    """The sentence about `ref` (a compare.ChapterReference) for `chapter`, or which of its results are missing."""
    missing = _missing(ref, needs(chapter, ref))
    if missing:
        return missing
    try:
        return SENTENCES[chapter](ref, here)
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError):  # an older file's other kinds
        return (f"{ref.label}: its results for this chapter are not in the form this llmperf reads "
                f"(not in this reference); rerun `python -m llmperf.reference` on that machine.")


def no_gpu_line() -> str:
    """The one line a chapter shows where no GPU reference holds it."""
    return ("No GPU's run of this chapter is in the course yet, so this machine's results stand alone here; "
            "the reference-runs page lists the machines that have run which chapters.")
