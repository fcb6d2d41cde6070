"""Where the package stands beside its anchors, machine by machine: one table from the committed result files.

An anchor is the software a reader would otherwise run on the same machine: llama.cpp's `llama-bench` for a
batch-1 decode, `llama-server` for serving, `transformers` for the plain PyTorch model. Each row puts one of
the package's figures beside its anchor's, from the newest run of its benchmark on that machine
(`benchresults.latest`), with the ratio the run measured. The two figures are the run's rows; the ratio comes
from its pairs or rounds where it kept them, which alternate the two and so see the same drift of the machine,
and may differ from the rows' own ratio:

    decode, llama.cpp F32     the fused step's ms/token beside llama-bench's; the ratio of tokens/s is the median
                              of the run's back-to-back pairs (its rows alone where it kept no pairs)
    decode, transformers      the fused step's ms/token beside transformers' `generate`, in one run's rows
    serving, N clients        llmperf.serve's output tokens/s beside llama-server's; the median of the rounds'
                              ratios

A ratio above 1 is the package ahead. Whether a row says "ahead of", "level with" or "behind" comes from its
median (`wording.SAME`); one that is ahead or behind also says where single pairs or rounds fell on both sides
of 1. No torch.
"""

from __future__ import annotations

from .benchpage import NONE, _relation, machine_label, number, ratios, summary
from .benchresults import committed, latest


def _row(machine: str, figure: str, ours: str, theirs: str, ratio: dict | None, runs: str) -> dict:
    several = ratio and ratio.get("pairs", 1) > 1
    verdict = _relation(ratio["median"]) if ratio else NONE
    if several and ratio["min"] < 1 < ratio["max"] and verdict != "level with":
        verdict += ", single " + runs + " on both sides of level"
    return {"machine": machine, "figure": figure, "llmperf": ours, "anchor": theirs,
            "ratio (median)": number(ratio["median"], 2) if ratio else NONE,
            "range": f"{ratio['min']:.2f}–{ratio['max']:.2f} ({ratio['pairs']} {runs})" if several else NONE,
            "verdict": verdict}


def decode_rows(data: dict) -> list[dict]:
    """A decode run's rows beside llama.cpp F32 and transformers (where the run has them)."""
    by = {r.get("variant"): r for r in data["results"]["rows"] if r.get("model") == "smollm2-135m"}
    fused, machine = by.get("llmperf fused"), machine_label(data["machine"])
    if not fused or not fused.get("ms_per_token"):
        return []
    found, ms = [], f"{fused['ms_per_token']:.2f} ms/token"
    for variant, figure in (("llama.cpp F32", "decode tokens/s ÷ llama.cpp F32's"),
                            ("transformers", "decode tokens/s ÷ transformers'")):
        other = by.get(variant)
        if not other or not other.get("ms_per_token"):
            continue
        ratio = summary(data["results"], "fused_over_llama_cpp_pairs") if variant == "llama.cpp F32" else None
        ratio = ratio or {"median": other["ms_per_token"] / fused["ms_per_token"], "pairs": 1}
        found.append(_row(machine, figure, ms, f"{other['ms_per_token']:.2f} ms/token", ratio, "pairs"))
    return found


def serving_rows(data: dict) -> list[dict]:
    """A serving run's rows beside llama-server, one per concurrency both servers ran at."""
    rows = {(r["policy"], r["concurrency"]): r for r in data["results"]["rows"]}
    found, machine = [], machine_label(data["machine"])
    for clients, ratio in ratios(data["results"]).items():
        ours, theirs = rows.get(("continuous", clients)), rows.get(("llama-server", clients))
        if ours and theirs:
            found.append(_row(machine, f"output tokens/s at {clients} client{'s' if clients > 1 else ''} ÷ "
                              "llama-server's", f"{ours['output_tokens_per_s']:.1f} tokens/s",
                              f"{theirs['output_tokens_per_s']:.1f} tokens/s", ratio, "rounds"))
    return found


def standing(where=None):
    """A DataFrame, one row per figure beside its anchor on each machine (see the module's docstring), indexed by
    machine; empty where no committed run has an anchor."""
    import pandas as pd

    files = committed(where)
    rows = [row for _, data in latest(files, "decode") for row in decode_rows(data)]
    rows += [row for _, data in latest(files, "serving") for row in serving_rows(data)]
    rows.sort(key=lambda r: r["machine"])  # each machine's decode rows, then its serving rows
    columns = ["machine", "figure", "llmperf", "anchor", "ratio (median)", "range", "verdict"]
    return pd.DataFrame(rows, columns=columns).set_index("machine")


def standing_sentence(table) -> str:
    """How many of `table`'s figures (`standing`'s) are level with or ahead of their anchors, and, machine by
    machine, which are behind."""
    if table.empty:
        return "No committed run measured the package beside an anchor."
    behind = table[table["verdict"].str.startswith("behind")]
    level = len(table) - len(behind)
    said = (f"Of {len(table)} figures, {level} " +
            ("is level with or ahead of its anchor" if level == 1 else "are level with or ahead of their anchors"))
    if behind.empty:
        return said + "."
    return said + ". Behind: " + "; ".join(
        f"on the {machine}, " + ", ".join(f"{row['figure']} ({row['ratio (median)']})" for _, row in rows.iterrows())
        for machine, rows in behind.groupby(level=0, sort=False)) + "."
