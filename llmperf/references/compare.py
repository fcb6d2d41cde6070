"""The committed references beside this machine: a chapter's comparison table, figure series and sentences.

`references(chapter)` finds the files in the repository's `references/` folder
(or the folder LLMPERF_REFERENCES names) that hold `chapter`, GPUs first.
`Comparison(chapter)` holds them for one chapter: its figures draw their series,
and `table(here)` and `text(here)` set them beside this machine's results
(`here`, from `results.RESULTS[chapter]`). A result a reference lacks, because it was
written by an older llmperf, is shown as "not in this reference"; a result
that does not apply to a device (a CUDA Graph on a CPU) as "—". No torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from . import fileformat
from .results import ROWS, SERIES

FOLDER = Path(__file__).resolve().parents[2] / "references"  # the repository's committed references
NOT_IN = "not in this reference"
NOT_APPLICABLE = "—"


class ChapterReference(NamedTuple):
    """One reference's entry for one chapter, and what to call it."""

    label: str  # "reference run: NVIDIA H200, 2026-12-02"
    device_type: str  # "cuda", "cpu", "mps"
    weights: str
    results: dict
    path: str

    @property
    def gpu(self) -> bool:
        return self.device_type == "cuda"


def folder() -> Path:
    return Path(os.environ.get("LLMPERF_REFERENCES") or FOLDER)


def committed(where=None, problems: list | None = None) -> list[tuple[Path, dict]]:
    """Every reference file in `where` (default `folder()`), loaded and checked, by file name.

    A file that fails its check raises ReferenceFileError, naming it; given a `problems` list, the file is
    left out and its error appended there instead (what a chapter does: one bad file must not stop a book)."""
    where = Path(where) if where is not None else folder()
    found = []
    for path in sorted(where.glob("*.json")) if where.is_dir() else []:
        try:
            found.append((path, fileformat.load(path)))
        except fileformat.ReferenceFileError as err:
            if problems is None:
                raise
            problems.append(str(err))
    return found


def label(ref: dict, entry: dict) -> str:
    """What a reference is: its device and the date its chapter ran (and a CPU's core count)."""
    name, env = ref["device"]["name"], entry.get("environment")
    if ref["device"]["type"] == "cpu" and isinstance(env, dict) and env.get("cpu_count"):
        name = f"{name}, {env['cpu_count']} cores"
    return f"reference run: {name}, {entry['date'][:10]}"


def references(chapter: str, where=None, problems: list | None = None) -> list[ChapterReference]:
    """The committed references that hold `chapter`: GPUs first, then by date, newest first (`problems`: as
    in `committed`)."""
    found = [ChapterReference(label(ref, ref["chapters"][chapter]), ref["device"]["type"],
                              ref["chapters"][chapter]["weights"], ref["chapters"][chapter]["results"], str(path))
             for path, ref in committed(where, problems) if chapter in ref["chapters"]]
    found.sort(key=lambda r: r.label.rsplit(", ", 1)[-1], reverse=True)
    return sorted(found, key=lambda r: not r.gpu)


class Probes(NamedTuple):
    """One reference's probes: what its device measured before the chapters ran."""

    label: str  # "reference run: NVIDIA H200, 2026-11-29"
    device_name: str
    values: dict  # {"read_bandwidth": B/s, "copy_bandwidth": B/s, "matmul_float32": FLOP/s, ...}


def gpu_probes(where=None) -> list[Probes]:
    """The probes of every committed GPU reference, newest first."""
    found = [Probes(label(ref, ref["probes"]), ref["device"]["name"], ref["probes"]["values"])
             for _, ref in committed(where) if ref["device"]["type"] == "cuda" and ref.get("probes")]
    return sorted(found, key=lambda p: p.label.rsplit(", ", 1)[-1], reverse=True)


def picked(row, results: dict):
    """The row's value in `results`: for a list, its first or last element (`row.pick`); None where there is
    none."""
    value = results.get(row.key)
    if isinstance(value, list):
        value = (value[0] if row.pick == "first" else value[-1]) if value else None
    return value


def show(row, results: dict) -> str:
    """One cell of a comparison table: the row's value in `results`, formatted, or why there is none."""
    if row.key not in results:
        return NOT_IN
    value = picked(row, results)
    if value is None:
        return NOT_APPLICABLE
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = value * row.scale
    try:
        return row.fmt.format(value)
    except (TypeError, ValueError):  # an older file's value of another kind: it lacks this one
        return NOT_IN


def short_label(label: str) -> str:
    """A reference's label without its "reference run: " prefix: a column heading, a figure's tick."""
    return label.removeprefix("reference run: ")


def speed_ratio(row, theirs: dict, here: dict) -> str:
    """How many times as fast as this machine a reference was on `row` ("24.2×"), or "—" where the row
    compares no speeds or either side lacks a positive number."""
    if row.speed is None:
        return NOT_APPLICABLE
    values = [picked(row, theirs), picked(row, here)]
    if not all(positive(v) for v in values):
        return NOT_APPLICABLE
    ratio = values[0] / values[1] if row.speed == "rate" else values[1] / values[0]
    return f"{ratio:,.3g}×"


def positive(value) -> bool:
    """A number above zero (not a bool): what a figure can draw, on a log axis too."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _numbers(value) -> bool:
    return isinstance(value, list) and len(value) > 0 and all(positive(v) for v in value)


class Comparison:
    """The committed references that hold one chapter, to set beside this machine's results: a chapter makes
    one at its start (its figures draw the references' series) and shows `table(here)` and `sentences(here)`
    at its end, `here` being its results (`results.RESULTS[chapter]` of its records)."""

    def __init__(self, chapter: str, refs: list[ChapterReference] | None = None, where=None):
        if chapter not in ROWS:
            raise ValueError(f"No chapter named {chapter!r}; the chapters are {', '.join(ROWS)}.")
        self.chapter, self.problems = chapter, []  # problems: the files left out, and why
        self.refs = references(chapter, where, self.problems) if refs is None else refs

    def table(self, here: dict | None = None):
        """A DataFrame: one row per key result (with its unit), a column for this machine (unless `here` is None)
        and one per reference."""
        import pandas as pd

        rows = ROWS[self.chapter]
        index = [row.heading for row in rows]
        columns = {} if here is None else {"this machine": [show(row, here) for row in rows]}
        for ref in self.refs:
            columns[ref.label] = [show(row, ref.results) for row in rows]
        return pd.DataFrame(columns, index=pd.Index(index, name="result"))

    def series(self, figure: str) -> list[tuple[str, list, list]]:
        """(label, xs, ys) of each reference for one of the chapter's figures (`results.SERIES`), leaving out a
        reference that lacks either list."""
        x, y, *named = SERIES[self.chapter][figure]
        return [(", ".join([r.label, *(str(r.results[k]) for k in named if k in r.results)]), r.results[x],
                 r.results[y]) for r in self.refs
                if _numbers(r.results.get(x)) and _numbers(r.results.get(y))
                and len(r.results[x]) == len(r.results[y])]

    def values(self, key: str) -> list[tuple[str, object]]:
        """(label, value) of `key` in each reference that has it."""
        return [(r.label, r.results[key]) for r in self.refs if key in r.results]

    def text(self, here: dict) -> str:
        """Markdown: a sentence per reference, chosen from its numbers (`sentences`), and the files left out
        (where no GPU reference holds this chapter, `box_text` says so)."""
        from .sentences import sentence

        lines = [sentence(self.chapter, ref, here) for ref in self.refs]
        lines += [f"Left out: {problem}" for problem in self.problems]
        return "\n\n".join(lines)

    def box(self, here: dict):
        """`box_text(here)` as rendered Markdown in a notebook (IPython's Markdown display)."""
        from IPython.display import Markdown

        return Markdown(self.box_text(here))

    def box_text(self, here: dict) -> str:
        """Markdown: an admonition with the chapter's headline results (`Row.box`) on this machine and on each
        GPU reference, and for each reference its speed ÷ this machine's where both measured the same work
        (`Row.speed`); where no GPU reference holds the chapter, one line saying so."""
        from .sentences import no_gpu_line

        gpus = [r for r in self.refs if r.gpu]
        title = "This machine beside the GPU references"
        if not gpus:
            return f":::{{admonition}} {title}\n:class: tip\n{no_gpu_line()}\n:::"
        rows = [row for row in ROWS[self.chapter] if row.box]
        head = ["result", "this machine"]
        for ref in gpus:
            head += [short_label(ref.label), "its speed ÷ this machine's"]
        lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        for row in rows:
            cells = [row.heading, show(row, here)]
            for ref in gpus:
                cells += [show(row, ref.results), speed_ratio(row, ref.results, here)]
            lines.append("| " + " | ".join(cells) + " |")
        note = ("Each machine ran the chapter at its own sizes and in its own dtype (float32 on a processor, "
                "bfloat16 on a GPU). The speed ratio divides a reference's speed by this machine's for a result that "
                "means the same on both, such as a probed rate, one step or tokens/s; it is \"—\" for counts and "
                "shares, and where either lacks the result.")
        return f":::{{admonition}} {title}\n:class: tip\n" + "\n".join(lines) + f"\n\n{note}\n:::"

    def sentences(self, here: dict):
        """`text(here)` as rendered Markdown in a notebook (IPython's Markdown display)."""
        from IPython.display import Markdown

        return Markdown(self.text(here))


def overview(where=None):
    """A table (a pandas Styler), one column per committed reference file: its device, software, weights,
    chapters, what was cut, and its probes."""
    import pandas as pd

    rows = []
    for path, ref in committed(where):
        entries = list(ref["chapters"].values()) or ([ref["probes"]] if ref.get("probes") else [])
        env = entries[-1].get("environment", {}) if entries else {}
        env = env if isinstance(env, dict) else {}
        dates = sorted(e["date"][:10] for e in entries)
        probes = (ref.get("probes") or {}).get("values", {})

        def rate(key, unit):
            if key not in probes:
                return NOT_IN
            value = probes[key] / unit
            return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"

        rows.append({
            "file": f"references/{path.name}", "device": ref["device"]["name"], "kind": ref["device"]["type"],
            "run": dates[0] if dates and dates[0] == dates[-1] else (f"{dates[0]} to {dates[-1]}" if dates else "—"),
            "torch": env.get("torch", NOT_IN), "chapters": ", ".join(ref["chapters"]) or "none (probes only)",
            "weights": "; ".join(sorted({e["weights"] for e in ref["chapters"].values()})) or "—",
            "sizes cut": "; ".join(sorted({f"{k}={v}" for e in ref["chapters"].values()
                                          for k, v in (e.get("cut") or {}).items()})) or "none",
            "read (GB/s)": rate("read_bandwidth", 1e9), "copy (GB/s)": rate("copy_bandwidth", 1e9),
            "float32 matmul (TFLOP/s)": rate("matmul_float32", 1e12),
            "bfloat16 matmul (TFLOP/s)": rate("matmul_bfloat16", 1e12),
            "one tiny op (µs)": rate("op_overhead", 1e-6)})
    frame = pd.DataFrame(rows).set_index("file").T if rows else pd.DataFrame({"no reference files": []})
    return frame.style  # a Styler: long cells (the weights) shown whole, not cut at 50 characters
