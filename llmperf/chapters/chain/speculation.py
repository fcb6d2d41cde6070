"""Chapter 1's third way out, measured: prompt-lookup speculative decoding on a task that copies its prompt,
against plain cached greedy decoding of the same tokens, and against the i.i.d. model of acceptance."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ...generation import generate
from ...speculative import Speculation, expected_tokens_per_pass, speculative_generate
from ...timing import time_in_turns
from ..setup import Setup, float32_model
from .claims import formula_fit, speculation_speed
from .loop import timed_greedy

# An editing task: the answer copies most of the prompt. SmolLM2-135M-Instruct, greedy, copies it almost word
# for word (it fixes one spelling and keeps the rest), then ends its turn.
COPY_TASK = ("Correct the spelling in this text: The quick brwon fox jumpd over the lazy dog. It was a sunny "
             "day and the birds were singing in the trees. The fox ran into the forrest to find its frends.")
SPEC_TOKENS = 40  # the answer and its end-of-turn token
SPEC_K = 8  # tokens drafted per pass, at most
SPEC_NGRAM = 3  # the longest n-gram looked up
SPEC_ROUNDS = 3  # timed runs of each loop, in turns


@dataclass
class SpeculationRun:
    """Prompt lookup against plain greedy decoding on one request: `n_new` tokens after a `prompt_len`-token
    chat prompt.

    `spec` is the speculative run of the fastest round (every verify pass's drafted and accepted tokens and
    seconds); `plain_steps` the decode passes' seconds of the plain run of the fastest round. `t_plain`,
    `t_spec`: each round's whole call (prefill included), seconds. `reference`: `generate`'s tokens; `plain`:
    the plain timed loop's.
    """

    task: str
    prompt_len: int
    n_new: int
    spec: Speculation
    plain_steps: list[float]
    t_plain: list[float]
    t_spec: list[float]
    reference: list[int]
    plain: list[int]

    @property
    def speedup(self) -> float:
        """The fastest plain run ÷ the fastest speculative run."""
        return min(self.t_plain) / min(self.t_spec)

    @property
    def pass_cost(self) -> float:
        """A verify pass's mean seconds (drafting included) ÷ a plain decode step's mean seconds."""
        return statistics.mean(p.seconds for p in self.spec.passes) / statistics.mean(self.plain_steps)

    @property
    def draft_cost(self) -> float:
        """c: drafting's seconds per drafted token ÷ a plain decode step's (0 if nothing was drafted)."""
        drafted = self.spec.drafted
        if not drafted:
            return 0.0
        return sum(p.draft_seconds for p in self.spec.passes) / drafted / statistics.mean(self.plain_steps)

    @property
    def drafted_passes(self) -> list:
        return [p for p in self.spec.passes if p.drafted]

    @property
    def whole_share(self) -> float:
        """Share of the drafted passes whose whole draft was accepted."""
        passes = self.drafted_passes
        return sum(p.accepted == p.drafted for p in passes) / len(passes) if passes else 0.0

    @property
    def whole_share_iid(self) -> float:
        """The share the i.i.d. model expects: the mean of alpha_iid^m over the drafted passes."""
        passes = self.drafted_passes
        return sum(self.spec.alpha_iid ** p.drafted for p in passes) / len(passes) if passes else 0.0

    def table(self):
        import pandas as pd

        rows = [{"pass": i, "drafted": p.drafted, "accepted": p.accepted, "tokens": p.emitted,
                 "time (ms)": p.seconds * 1e3} for i, p in enumerate(self.spec.passes, 1)]
        return pd.DataFrame(rows).style.format({"time (ms)": "{:.1f}"}).hide(axis="index")

    def numbers(self) -> dict:
        spec = self.spec
        return {"spec_prompt": self.prompt_len, "spec_n": self.n_new, "spec_k": spec.k, "spec_ngram": spec.ngram,
                "spec_passes": len(spec.passes), "spec_plain_passes": self.n_new - 1,
                "spec_nodraft": len(spec.passes) - len(self.drafted_passes), "spec_drafted": spec.drafted,
                "spec_accepted": spec.accepted, "spec_alpha": spec.alpha, "spec_tpp": spec.tokens_per_pass,
                "spec_rejections": spec.rejections, "spec_alpha_iid": spec.alpha_iid,
                "spec_E_k": expected_tokens_per_pass(spec.alpha_iid, spec.k), "spec_E_own": spec.expected_per_pass(),
                "spec_fit_text": formula_fit(spec.tokens_per_pass, spec.expected_per_pass(), self.whole_share,
                                             self.whole_share_iid),
                "spec_pass_cost": self.pass_cost, "spec_decode_speedup": spec.tokens_per_pass / self.pass_cost,
                "spec_draft_cost_pct": 100 * self.draft_cost,
                "spec_rounds": len(self.t_spec), "spec_speedup": self.speedup,
                "spec_speed_text": speculation_speed(min(self.t_plain), min(self.t_spec), spec.tokens_per_pass,
                                                     self.pass_cost)}

    def check(self) -> None:
        assert self.spec.tokens == self.reference, "speculative decoding changed the tokens of greedy decoding"
        assert self.plain == self.reference, "the timed plain loop's tokens differ from generate()'s"
        emitted = sum(p.emitted for p in self.spec.passes)
        assert emitted == self.n_new - 1, f"the passes emitted {emitted} tokens after the first, not {self.n_new - 1}"
        assert all(0 <= p.accepted <= p.drafted <= self.spec.k for p in self.spec.passes), "accepted > drafted"

    def check_shown(self, tokens: list[int], passes: list[tuple[int, int]]) -> None:
        """The page's own draft-and-verify loop against this run: the same tokens, and the same (drafted,
        accepted) in every pass."""
        assert tokens == self.reference, "the shown verify loop's tokens differ from greedy decoding's"
        ours = [(p.drafted, p.accepted) for p in self.spec.passes]
        assert passes == ours, f"the shown loop's passes {passes} differ from llmperf.speculative's {ours}"


def measure_speculation(s: Setup, task: str = COPY_TASK, n_new: int = SPEC_TOKENS, k: int = SPEC_K,
                        ngram: int = SPEC_NGRAM, rounds: int = SPEC_ROUNDS) -> SpeculationRun:
    """Time prompt-lookup decoding and plain greedy decoding of `n_new` tokens of the answer to `task` (as a
    one-turn chat), in turns for `rounds` rounds, and keep the fastest round's passes of each. Runs in float32
    (a float32 copy where `s.dtype` is a 2-byte format, as on a GPU): a verify pass adds a position's numbers in
    another order than a one-token step does, and in bf16 that rounding can tip a near-tie between two tokens."""
    ids, model = s.tokenizer.encode_chat(task), float32_model(s.model)
    reference = generate(model, ids, n_new).tolist()
    plains, specs = [], []
    fns = {"plain": lambda: plains.append(timed_greedy(model, ids, n_new)),
           "speculative": lambda: specs.append(speculative_generate(model, ids, n_new, k=k, ngram=ngram))}
    runs = time_in_turns(fns, rounds=rounds, warmup=0, device=s.device)
    t_plain, t_spec = list(runs["plain"].samples), list(runs["speculative"].samples)
    plain_tokens, plain_steps = plains[t_plain.index(min(t_plain))]
    return SpeculationRun(task, len(ids), n_new, specs[t_spec.index(min(t_spec))], plain_steps, t_plain, t_spec,
                          reference, plain_tokens)
