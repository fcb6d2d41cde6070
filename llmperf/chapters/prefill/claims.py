"""Chapter 2, prefill cost: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations


def quadratic_part(c_ns: float, share_pct: float, s_max: int) -> str:
    """What the fitted c·S² term says, from its coefficient (ns per token²) and its share of TTFT at s_max."""
    if c_ns <= 0:
        return (f"came out at {c_ns:,.3f} ns per token², at or below zero, which no real cost can be: a run in "
                "the sweep was slowed by other work, and this fit says nothing about the quadratic term. Run the "
                "notebook again on a quieter machine")
    return f"is {share_pct:.0f} % of the fitted TTFT at {s_max:,} tokens"


def share_of_probe(achieved: float, probe: float, probe_name: str) -> str:
    """An achieved FLOP rate as a share of a probed one, honest when noise put it above 100 %."""
    pct = 100 * achieved / probe
    if pct <= 105:
        return f"{pct:.0f} % of the {probe / 1e9:,.1f} GFLOP/s that {probe_name} reached"
    return (f"{pct:.0f} % of the {probe / 1e9:,.1f} GFLOP/s that {probe_name} reached: more than the probe, "
            "which means the probe's own run was slowed by other work. Take the probe as a lower bound here")


def sweep_model_text(model: str, setup_model: bool) -> str:
    """The model the TTFT sweep timed: the setup's SmolLM2, or (on a GPU) a larger preset, and why."""
    if setup_model:
        return "SmolLM2 itself"
    return (f"{model} with random weights (which time exactly like real ones). On a GPU, SmolLM2 is too "
            "small to time prefill with: even its longest prompts do so little arithmetic per op that a pass costs "
            "about what dispatching and launching its ops does (chapter 5), whatever its length")


def batch_model_text(model: str, setup_model: bool) -> str:
    """The model the batch-1 against batch-B comparison timed."""
    return "SmolLM2 itself" if setup_model else f"{model} with random weights, which time exactly like real ones"
