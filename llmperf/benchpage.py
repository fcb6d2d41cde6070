"""The benchmarks page: the committed result files (`benchresults`) as tables, and the sentences they support.

For each benchmark the page shows its newest run on each machine: a table of
its rows (units in the headers; "—" where a run did not record a value) and a
sentence chosen from its numbers. No verdict is typed: "ahead of", "level
with", "near the memory roof" come from the numbers here, each branch tested.
No torch.
"""

from __future__ import annotations

import statistics

from .benchresults import committed, latest, steal_said
from .ceilingpage import ceiling_sentence, ceiling_table
from .wording import SAME, speed_change, times
from .cost import KIND_LABELS

NONE = "—"
ROOF = 0.8  # a step moving its bytes at 80 % of the probed bandwidth or more is called near the memory roof


def features(flags) -> str:
    """The processor's widest vector or matrix unit, as a reader names it: "AMX", "AVX-512", "AVX2", "NEON"."""
    flags = set(flags or ())
    if flags & {"amx_tile", "amx_bf16"}:
        return "AMX"
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    return "NEON" if "asimd" in flags else ""


def machine_label(machine: dict) -> str:
    """"NVIDIA H200", or for a processor "AMD EPYC, 2 cores, AVX-512"."""
    if machine["device"].startswith("cpu"):
        parts = [machine.get("cpu_name") or machine["device_name"]]
        parts += [f"{machine['cpu_count']} cores"] if machine.get("cpu_count") else []
        parts += [features(machine.get("cpu_flags"))]
        return ", ".join(p for p in parts if p)
    return machine["device_name"]


def provenance(data: dict) -> str:
    """Where a file's figures come from: the run's own output, or a page's table at a commit."""
    copied = data.get("transcribed")
    if copied:
        return f"transcribed from {copied['from']} at commit {copied['commit']}"
    return f"written by the run at commit {data['commit']}" if data.get("commit") else "written by the run"


def overview(where=None):
    """A DataFrame, one row per committed result file: benchmark, machine, date, commit and source."""
    import pandas as pd

    rows = [{"file": f"benchmarks/results/{path.name}", "benchmark": data["benchmark"],
             "machine": machine_label(data["machine"]), "date": data["date"][:10],
             "source": provenance(data)} for path, data in committed(where)]
    return pd.DataFrame(rows, columns=["file", "benchmark", "machine", "date", "source"])


def number(value, digits: int | None = None) -> str:
    """A table cell: `value` with `digits` decimals (by default 0 from 100 up, 1 from 10, else 2) and thousands
    separators, or "—" where it is missing."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return NONE
    if digits is None:
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:,.{digits}f}"


def _frame(rows: list[dict]):
    """A DataFrame of `rows` indexed by their first column, leaving out the columns no row has a value in."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    frame = frame[[c for c in frame.columns if (frame[c] != NONE).any()]]
    return frame.set_index(frame.columns[0])


def _relation(ratio: float) -> str:
    if ratio > 1 + SAME:
        return "ahead of"
    return "behind" if ratio < 1 - SAME else "level with"


def summary(results: dict, key: str) -> dict | None:
    """{"pairs", "median", "min", "max"} of the ratios listed under `key` (or given as `key`_summary)."""
    found = results.get(key)
    if isinstance(found, list) and found:
        return {"pairs": len(found), "median": statistics.median(found), "min": min(found), "max": max(found)}
    return results.get(f"{key}_summary") or None


def ratios(results: dict) -> dict[int, dict]:
    """By concurrency, the summary of continuous batching's tokens/s over llama-server's, rounds by rounds."""
    given = results.get("continuous_over_llama_server_summary") or {}
    listed = results.get("continuous_over_llama_server") or {}
    found = {int(c): summary({"rounds": listed.get(c), "rounds_summary": given.get(c)}, "rounds")
             for c in {*given, *listed}}
    return {c: s for c, s in sorted(found.items()) if s}


# --- decode ----------------------------------------------------------------------------------------------------

def decode_table(results: dict):
    rows = []
    for r in results["rows"]:
        ms = r.get("ms_per_token")
        tokens = r.get("tokens_per_s", 1e3 / ms if ms else None)
        fraction = r.get("fraction_of_probe_bw")
        rows.append({"implementation": r.get("variant", NONE), "model": r.get("model", NONE),
                     "dtype": r.get("dtype", NONE), "ms/token": number(ms, 2),
                     "tokens/s": number(tokens, 1), "GB/s": number(r.get("achieved_GBps")),
                     "probe": r.get("probe", NONE), "probe (GB/s)": number(r.get("probe_GBps"), 0),
                     "of probe (%)": number(None if fraction is None else 100 * fraction, 0)})
    return _frame(rows)


def decode_sentence(results: dict) -> str:
    by = {r.get("variant"): r for r in results["rows"]}
    said = []
    pairs = summary(results, "fused_over_llama_cpp_pairs")
    if pairs:
        spread = pairs["min"] < 1 < pairs["max"]
        said.append(f"In {pairs['pairs']} back-to-back pairs the fused step made {pairs['median']:.2f} times "
                    f"llama.cpp F32's tokens/s (median; {pairs['min']:.2f} to {pairs['max']:.2f} times): "
                    f"{_relation(pairs['median'])} llama.cpp there"
                    + (", though single pairs fell on both sides of level." if spread else "."))
    if "llmperf fused" in by and "llmperf plain" in by:
        plain, fused = by["llmperf plain"]["ms_per_token"], by["llmperf fused"]["ms_per_token"]
        said.append(f"The fused step was {speed_change(plain, fused, 'the plain one')}.")
    kernel = kernel_choice(results)
    if kernel:
        said.append(kernel)
    if "eager" in by and "CUDA Graph" in by:
        eager, graph = by["eager"]["ms_per_token"], by["CUDA Graph"]["ms_per_token"]
        said.append(f"Replayed from a CUDA Graph the step was {speed_change(eager, graph, 'eager')}.")
    fractions = [r["fraction_of_probe_bw"] for r in results["rows"] if r.get("fraction_of_probe_bw")]
    if fractions:
        best = max(fractions)
        said.append(f"The row nearest the roof moved its bytes at {100 * best:.0f} % of the probed bandwidth: "
                    + ("near the memory roof." if best >= ROOF else
                       "below the memory roof, so something besides memory traffic set its pace."))
    return " ".join(said) or "These rows hold nothing to compare with one another."


def kernel_choice(results: dict) -> str | None:
    """Where the fused step ran in this run, from its saved measurement ("numpy_step_layouts": the largest model's
    "batch-1 step: ..." entry, `fast.tuning`; a run before the step was compiled whole saved "kernel: ...", where
    only the products were), as a sentence; None if the run recorded none."""
    measured = [(name, m) for name, m in (results.get("numpy_step_layouts") or {}).items()
                if name.startswith(("kernel: ", "batch-1 step: "))
                and set(m.get("step seconds", {})) == {"BLAS", "compiled"}]
    if not measured:
        return None
    name, chosen = max(measured, key=lambda m: m[1]["step seconds"]["BLAS"])
    blas, compiled = chosen["step seconds"]["BLAS"] * 1e3, chosen["step seconds"]["compiled"] * 1e3
    whole = name.startswith("batch-1 step: ")
    what = "step" if whole else "step's products"
    where = ("NumPy's BLAS" if compiled >= blas else "the loops Numba compiles (`llmperf.fast.compiled_step`)"
             if whole else "the loop Numba compiles (`llmperf.fast.kernel`)")
    said = (f"The fused {what} ran in {where}, measured in whole steps on this machine: {compiled:.2f} ms "
            f"a step compiled against {blas:.2f} ms in the BLAS.")
    rows = whole and results["numpy_step_layouts"].get(name.replace("batch-1 step: ", "kernel's rows at once: "))
    if rows and compiled < blas:  # `fast.choices.measured_at_once`, for the same model's products
        said += (f" Its products took {rows['chosen'].replace('row', 'weight row')} per pass, measured the same "
                 "way: " + ", ".join(f"{1e3 * t:.2f} ms with {n}" for n, t in rows["step seconds"].items()) + ".")
    return said


# --- step anatomy ----------------------------------------------------------------------------------------------

def anatomy_table(results: dict):
    return _frame([{"kind": KIND_LABELS.get(r.get("kind"), r.get("kind", NONE)), "ops": number(r.get("ops"), 0),
                    "kernels": number(r.get("kernels"), 0), "time (ms)": number(r.get("ms"), 3),
                    "bytes (MB)": number(r["bytes"] / 1e6 if r.get("bytes") else None, 2),
                    "GB/s": number(r.get("GBps"))} for r in results["rows"]])


def steps_table(results: dict):
    """The unprofiled step, eager and (on CUDA) from a CUDA Graph and compiled; None if the run kept none."""
    if not results.get("steps"):
        return None
    return _frame([{"step": s["variant"], "time (ms)": number(s.get("ms"), 3),
                    "bytes ÷ bandwidth (ms)": number(s.get("bandwidth_ms"), 3),
                    "read probe (GB/s)": number(s.get("read_GBps")),
                    "× bytes ÷ bandwidth": number(s.get("times_bandwidth_time"), 2)} for s in results["steps"]])


def anatomy_sentence(results: dict) -> str:
    said = []
    steps = results.get("steps") or []
    probe = results.get("read_GBps") or (steps[0].get("read_GBps") if steps else None)
    products = next((r.get("GBps") for r in results["rows"] if r.get("kind") == "projections"), None)
    if results.get("kernels"):
        said.append(f"One step launched {results['kernels']:,.0f} kernels.")
    if products and probe:
        share = products / probe
        said.append(f"The weight products streamed at {products:,.0f} GB/s against a read probe of {probe:,.0f} "
                    f"GB/s: " + ("near the memory roof." if share >= ROOF else "below the memory roof."))
    eager = next((s["ms"] for s in steps if s["variant"] == "eager"), None)
    if results.get("ops") and results.get("op_overhead_us") and eager:
        fixed = results["ops"] * results["op_overhead_us"] / 1e3
        said.append(f"At {results['op_overhead_us']:.2f} µs each, its {results['ops']:,.0f} ops cost "
                    f"{fixed:.3f} ms of fixed cost alone, "
                    + ("most of the eager step's " if fixed >= eager / 2 else "under half the eager step's ")
                    + f"{eager:.3f} ms.")
    return " ".join(said) or "This run kept no count or rate to read a verdict from."


# --- serving ---------------------------------------------------------------------------------------------------

def _server(policy: str, slots) -> str:
    if policy == "llama-server":
        return f"llama-server -np {slots}" if slots else "llama-server"
    return f"llmperf.serve ({policy})" if policy in ("continuous", "static") else policy


def serving_table(results: dict):
    by = ratios(results)
    return _frame([{"server": _server(r["policy"], results.get("llama_server_slots")),
                    "clients": r["concurrency"], "output tokens/s": number(r.get("output_tokens_per_s")),
                    "per user tokens/s": number(r.get("per_user_tokens_per_s")),
                    "TTFT p50 (ms)": number(r.get("ttft_p50_ms"), 0), "TTFT p99 (ms)": number(r.get("ttft_p99_ms"), 0),
                    "TPOT p50 (ms)": number(r.get("tpot_p50_ms")), "TPOT p99 (ms)": number(r.get("tpot_p99_ms")),
                    "stall (ms)": number(r.get("longest_gap_ms"), 0),
                    "× llama-server (median of rounds)": number(by[r["concurrency"]]["median"], 2)
                    if r["policy"] == "continuous" and r["concurrency"] in by else NONE}
                   for r in results["rows"]])


def serving_sentence(results: dict) -> str:
    said = []
    by = ratios(results)
    if by:
        said.append("; ".join(
            (f"At {c} client{'s' if c > 1 else ''} llmperf.serve made {s['median']:.2f} times llama-server's "
             "output tokens/s" if i == 0 else f"at {c} client{'s' if c > 1 else ''}, {s['median']:.2f} times")
            + f" ({_relation(s['median'])} it)" for i, (c, s) in enumerate(by.items())) + ".")
    rows = {(r["policy"], r["concurrency"]): r for r in results["rows"]}
    levels = sorted(c for p, c in rows if p == "continuous")
    if len(levels) > 1:
        growth = rows["continuous", levels[-1]]["output_tokens_per_s"] / rows["continuous", levels[0]][
            "output_tokens_per_s"]
        verb = ("stayed about the same" if abs(growth - 1) <= SAME else
                f"grew {times(growth)}" if growth > 1 else f"fell to {growth:.2f} times")
        said.append(f"From {levels[0]} to {levels[-1]} clients continuous batching's output tokens/s {verb}.")
    top = max(levels, default=None)
    static, continuous = rows.get(("static", top)), rows.get(("continuous", top))
    if static and continuous and static.get("ttft_p99_ms") and continuous.get("ttft_p99_ms"):
        said.append(f"At {top} clients static batching's p99 TTFT was "
                    f"{times(static['ttft_p99_ms'] / continuous['ttft_p99_ms'])} continuous batching's, for "
                    f"{times(static['output_tokens_per_s'] / continuous['output_tokens_per_s'])} its "
                    "output tokens/s.")
    return " ".join(said) or "One server at one concurrency: nothing to compare."


# --- chunked prefill -------------------------------------------------------------------------------------------

def chunked_table(results: dict):
    return _frame([{"prefill chunk (positions)": number(r["prefill_chunk"], 0), "pieces": r["pieces"],
                    "longest gap (ms)": number(r.get("longest gap (ms)"), 0),
                    "median gap (ms)": number(r.get("median gap (ms)")),
                    "long prompt's TTFT (ms)": number(r.get("long TTFT (ms)"), 0)} for r in results["rows"]])


def chunked_sentence(results: dict) -> str:
    whole = next((r for r in results["rows"] if r["pieces"] == 1), None)
    split = max(results["rows"], key=lambda r: r["pieces"])
    if whole is None or split["pieces"] == 1:
        return "No two rows prefilled the prompt at once and in pieces, so there is nothing to compare."
    gap = split["longest gap (ms)"] / whole["longest gap (ms)"]
    ttft = split["long TTFT (ms)"] / whole["long TTFT (ms)"]
    waited = (f"cut the decoding requests' longest wait to {100 * gap:.0f} % of the wait at once"
              if gap < 1 - SAME else
              f"left the decoding requests' longest wait at {100 * gap:.0f} % of the wait at once")
    cost = (f"while the long prompt's own TTFT rose {100 * (ttft - 1):.0f} %" if ttft > 1 + SAME else
            "and the long prompt's own TTFT stayed about the same")
    prompt = f"the {results['long_prompt']:,}-token prompt" if results.get("long_prompt") else "the long prompt"
    return (f"Prefilled in {split['pieces']} pieces of {split['prefill_chunk']:,} positions, {prompt} {waited}, "
            f"{cost}.")


TABLES = {"decode": decode_table, "step_anatomy": anatomy_table, "serving": serving_table,
          "chunked_prefill": chunked_table, "client_ceiling": ceiling_table}
SENTENCES = {"decode": decode_sentence, "step_anatomy": anatomy_sentence, "serving": serving_sentence,
             "chunked_prefill": chunked_sentence, "client_ceiling": ceiling_sentence}


def runs(benchmark: str, where=None) -> list[tuple[str, list, str]]:
    """(heading, tables, sentence) for the newest run of `benchmark` on each machine."""
    found = []
    for _, data in latest(committed(where), benchmark):
        tables = [TABLES[benchmark](data["results"])]
        if benchmark == "step_anatomy" and steps_table(data["results"]) is not None:
            tables.append(steps_table(data["results"]))
        heading = f"{machine_label(data['machine'])}, {data['date'][:10]} ({provenance(data)})"
        if "steal" in data:  # recorded since the runs could be told apart by it
            heading += f"; {steal_said(data['steal'])}"
        found.append((heading, tables, SENTENCES[benchmark](data["results"])))
    return found


def show(benchmark: str, where=None) -> None:
    """Display, in a notebook, each machine's newest run of `benchmark`: a heading, its tables, its sentence."""
    from IPython.display import Markdown, display

    found = runs(benchmark, where)
    if not found:
        display(Markdown(f"No result of `benchmarks/{benchmark}.py` is committed."))
    for heading, tables, sentence in found:
        display(Markdown(f"**{heading}**"))
        for table in tables:
            display(table)
        display(Markdown(sentence))
