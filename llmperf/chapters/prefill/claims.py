"""Chapter 2, prefill cost: the sentences chosen from its measurements.

Each function takes numbers the chapter measured (or predicted) and returns the
clause they support, with the numbers in it (see `wording`). Pure Python: no torch.
"""

from __future__ import annotations

import math

from ...wording import SAME


def quadratic_part(c_ns: float, share_pct: float, s_max: int) -> str:
    """What the fitted c·S² term says, from its coefficient (ns per token²) and its share of TTFT at s_max."""
    if c_ns <= 0:
        return (f"came out at {c_ns:,.3f} ns per token², at or below zero: TTFT bent downward over the sweep, not "
                "upward. Two things do that, and either hides the attention term. Other work on the machine may "
                "have slowed runs at the shorter lengths; or the device grew more efficient as the prompt grew, "
                "which on a GPU is the rule: a short prompt leaves much of it idle, so TTFT rises more slowly than "
                "the FLOPs until the device is full. A quieter machine settles the first; longer prompts, past "
                "the point where the achieved rate stops rising, the second. Here the fit says nothing about "
                "the quadratic term")
    return f"is {share_pct:.0f} % of the fitted TTFT at {s_max:,} tokens"


def gap_text(meas_over_pred: float, S_max: int) -> str:
    """The lead of "Measured against predicted", from measured ÷ predicted TTFT at the longest prompt."""
    ratio = f"{meas_over_pred:.2f} times the prediction at {S_max:,} tokens"
    if abs(meas_over_pred - 1) <= SAME:
        return (f"Measured TTFT matched the prediction to within {100 * SAME:.0f} % ({ratio}). The prediction "
                "assumes every counted FLOP runs at the rate of the model's largest product, and that nothing "
                "else takes time; the effects below break both assumptions, and here they were small or offset "
                "each other")
    if meas_over_pred > 1:
        return (f"Measured TTFT sat above the prediction ({ratio}). The prediction assumes every counted FLOP "
                "runs at the rate of the model's largest product, and that nothing else takes time. Neither "
                "holds exactly")
    return (f"Measured TTFT came in below the prediction ({ratio}): the pass ran faster than its FLOPs at the "
            "probed rate allow, so the probe understated the rate. Its own run was slowed by other work, or a "
            "lone product was too short to reach the rate the pass's many products did. The effects below, each "
            "of which slows a pass, were outweighed")


def share_of_probe(achieved: float, probe: float, probe_name: str) -> str:
    """An achieved FLOP rate as a share of a probed one, honest when noise put it above 100 %."""
    pct = 100 * achieved / probe
    if pct <= 105:
        return f"{pct:.0f} % of the {probe / 1e9:,.1f} GFLOP/s that {probe_name} reached"
    return (f"{pct:.0f} % of the {probe / 1e9:,.1f} GFLOP/s that {probe_name} reached: more than the probe, "
            "which means the probe's own run was slowed by other work. Take the probe as a lower bound here")


RANDOM_WEIGHTS = ("with random weights of its shape, drawn normal at a trained model's scale, which time about like "
                  "real ones, not exactly: on a GPU a product's power draw, and so its clock, depends on the values "
                  "it multiplies, and on a CPU subnormal numbers run slowly")


def sweep_model_text(model: str, setup_model: bool) -> str:
    """The model the TTFT sweep timed: the setup's SmolLM2, or (on a GPU) a larger preset, and why."""
    if setup_model:
        return "SmolLM2 itself"
    return (f"{model} {RANDOM_WEIGHTS}. On a GPU, SmolLM2 is a poor model to time prefill with: each of its ops does "
            "so little arithmetic that the cost of dispatching and launching them (chapter 5) weighs on its passes "
            "up to far longer prompts than on a larger model's")


def batch_model_text(model: str, setup_model: bool) -> str:
    """The model the batch-1 against batch-B comparison timed."""
    return "SmolLM2 itself" if setup_model else f"{model} {RANDOM_WEIGHTS}"


def sdpa_count_text(attention: int, full: int, causal: int) -> str:
    """What FlopCounterMode counted for the model's own attention kernel (scaled_dot_product_attention with
    is_causal): `attention` is the counter's total less its weight products, against the cost model's full
    square (`full`) and causal pairs (`causal`) of the same pass, all in FLOPs."""
    if attention == 0:
        return ("counted the fused attention kernel as 0 FLOPs: this PyTorch has no FLOP formula for the kernel it "
                "ran on this device, so the counter saw the weight products and nothing else")
    if attention == full:
        return (f"counted {attention:,} FLOPs of attention, the full square, although the model passed is_causal: "
                "the counter's formula for the kernel charges every (query, key) pair, not the "
                f"{causal:,} that the causal pairs need")
    if attention == causal:
        return f"counted {attention:,} FLOPs of attention, the causal pairs only, as is_causal asks"
    return (f"counted {attention:,} FLOPs of attention, neither the full square ({full:,}) nor the causal pairs "
            f"({causal:,})")


PROPORTIONAL = 0.15  # TTFT "grows in proportion" to the prompt when log(TTFT ratio) ÷ log(length ratio) is 1 ± this


def growth_exponent(length_ratio: float, ttft_ratio: float) -> float:
    """k in TTFT ratio = length ratio ** k: 1 when TTFT grows in proportion to the prompt, 2 for a pure S² cost."""
    return math.log(ttft_ratio) / math.log(length_ratio)


def doubling_text(pairs) -> str:
    """The verdict on the rule of thumb "doubling the prompt roughly doubles TTFT", from the sweep's pairs of
    consecutive lengths: (shorter S, longer S, TTFT at the longer ÷ TTFT at the shorter), lengths rising.

    Each pair's exponent (`growth_exponent`) within `PROPORTIONAL` of 1 counts as in proportion; below, TTFT grew
    more slowly than the prompt; above, faster. Every pair off the rule is named by its lengths. "The short end"
    and "the long end" are said only when the slow pairs are the first ones of the sweep and the fast pairs the
    last ones, with the pairs that hold between them; any other pattern is counted: "fails at N of M pairs".
    """
    pairs = [(a, b, r) for a, b, r in pairs if b > a]
    if not pairs:
        return "The sweep has no two prompt lengths to compare, so it cannot test the rule"
    ks = [growth_exponent(b / a, r) for a, b, r in pairs]
    slow = [i for i, k in enumerate(ks) if k < 1 - PROPORTIONAL]
    fast = [i for i, k in enumerate(ks) if k > 1 + PROPORTIONAL]
    n = len(pairs)

    def steps(indices) -> str:
        parts = []
        for i in indices:
            a, b, r = pairs[i]
            parts.append(f"from {a:,} to {b:,} tokens ({b / a:.2f} times the prompt) TTFT grew {r:.2f}-fold")
        return "; ".join(parts)

    if not slow and not fast:
        return (f"The rule holds across this sweep: every pair's exponent k is within {PROPORTIONAL:.2f} of 1, "
                f"between {min(ks):.2f} and {max(ks):.2f}")
    at_start = slow == list(range(len(slow)))  # the slow pairs are the sweep's first ones (or there are none)
    at_end = fast == list(range(n - len(fast), n))  # the fast pairs are its last ones (or there are none)
    low = ("which is the mark of a cost that does not grow with the prompt: a fixed cost per pass weighs most "
           "on the shortest prompts")
    high = "which is the mark of a cost that grows faster than the prompt, such as attention's S² term"
    if at_start and at_end and len(slow) + len(fast) < n:
        if slow and fast:
            return (f"The rule fails at both ends of this sweep. At the short end, {steps(slow)}, less than in "
                    f"proportion, {low}. At the long end, {steps(fast)}, more than in proportion, {high}")
        if slow:
            return (f"The rule holds for the longer prompts, but not the shortest: {steps(slow)}, less than in "
                    f"proportion, {low}")
        return (f"The rule holds for the shorter prompts, but not the longest: {steps(fast)}, more than in "
                f"proportion, {high}")
    parts = [f"The rule fails at {len(slow) + len(fast)} of {n} pairs of this sweep"]
    if slow:
        parts.append(f"Less than in proportion: {steps(slow)}. TTFT grows more slowly than the prompt where part "
                     "of its cost does not grow with it (a fixed cost per pass), where the device gets more "
                     "efficient as the prompt grows, or where the shorter run of the pair was slowed by other work")
    if fast:
        parts.append(f"More than in proportion: {steps(fast)}. TTFT grows faster than the prompt where part of its "
                     "cost grows faster (attention's S² term), or where the longer run of the pair was slowed by "
                     "other work")
    return ". ".join(parts)


def intercept_text(a_ms: float, shortest_ms: float, shortest_S: int) -> str:
    """What the parabola's intercept a (ms) says about a fixed cost per pass, against the shortest prompt's TTFT."""
    if a_ms <= 0:
        return (f"The fit's intercept came out at a = {a_ms:,.2f} ms, at or below zero, which no fixed cost can be: "
                "three coefficients fitted to a few points trade off against each other, so here a says nothing "
                "about the fixed cost. The ratios of the shortest prompts in the table above are the better "
                "evidence")
    if a_ms >= shortest_ms:
        return (f"The fit's intercept came out at a = {a_ms:,.2f} ms, at or above the {shortest_ms:,.1f} ms TTFT "
                f"at {shortest_S:,} tokens, of which a fixed cost can only be a part: three coefficients fitted to "
                "a few points trade off against each other, so here a says nothing about the fixed cost. The "
                "ratios of the shortest prompts in the table above are the better evidence")
    return (f"The fit's intercept, a = {a_ms:,.2f} ms, estimates this fixed cost: "
            f"{100 * a_ms / shortest_ms:.0f} % of the {shortest_ms:,.1f} ms TTFT at {shortest_S:,} tokens")


CLOSE_TO_B = 0.15  # a TTFT growth within 15 % of B is "close to B-fold"


def batch_ttft_text(growth: float, B: int) -> str:
    """What batch B did to each request's TTFT (`growth`: the batched pass's time ÷ batch 1's), and to the
    throughput, which is B ÷ growth times batch 1's."""
    gain = B / growth
    grew = f"each request's TTFT grew {growth:.2f}-fold"
    if abs(growth / B - 1) <= CLOSE_TO_B:
        return (f"{grew}, close to {B}-fold, for {gain:.2f} times the tokens per second. For prefill, batching "
                "trades latency for little or no throughput")
    if growth > B:
        return (f"{grew}, more than {B}-fold: the batched pass was slower per prompt token than one prompt alone, "
                f"so batching cost throughput too ({gain:.2f} times batch 1's tokens per second)")
    if growth >= B / 2:
        return (f"{grew}, well short of {B}-fold, so batching bought {gain:.2f} times the tokens per second; each "
                f"request still waited {growth:.2f} times as long for its first token")
    if abs(growth - 1) <= SAME:
        return (f"each request's TTFT stayed about what it was at batch 1 ({growth:.2f}-fold), within the noise of "
                f"these runs, for {gain:.2f} times the tokens per second: here a single prefill left most of the "
                f"machine idle, and {B} prompts filled it at no cost in latency")
    if growth < 1:
        return (f"each request's TTFT shrank to {growth:.2f} times batch 1's: the batched pass ran faster than one "
                "prompt alone, which more work cannot do by itself. Other work on the machine slowed the batch-1 "
                "runs, or the library picked a slower kernel for the single prompt's shapes; either way this run "
                f"does not show what batching costs in latency, and its {gain:.2f} times the tokens per second "
                "overstates what it buys")
    return (f"each request's TTFT grew only {growth:.2f}-fold, less than half of {B}-fold, for {gain:.2f} times "
            "the tokens per second: here a single prefill left much of the machine idle, and batching filled it")


def batch_gain_text(gain: float, B: int) -> str:
    """Batch B's prefill throughput against batch 1's (`gain`: tokens/s at B ÷ tokens/s at 1), beside the B-fold
    gain that free batching would give."""
    if abs(gain - 1) <= SAME:
        return f"about the same throughput as batch 1 ({gain:.2f}×), against the {B}× that free batching would give"
    if gain < 1:
        return f"less throughput than batch 1 ({gain:.2f}×), against the {B}× that free batching would give"
    return f"a gain of {gain:.2f}×, against the {B}× that free batching would give"
