"""Run every chapter's experiments on this machine, at this device's sizes, and return a reference.

What runs is what each chapter's notebook runs for the results it shows beside
the references (`results.RESULTS`), in the notebook's order, on the chapter's
own setup: the device, its dtype, `setup.sizes_for` and SmolLM2. Where the
GGUF cannot be had (a GPU machine: 98 MB does not travel to it), SmolLM2 is
built with random weights of its shape and its tokenizer read from an extract
(`--tokenizer`); the reference records which (`weights`). Timing does not
depend on weight values, so every time and rate is the real model's; only the
generated text differs.

Imports nothing a bare GPU machine lacks: no Jupyter, no myst_nb.
"""

from __future__ import annotations

import dataclasses
import datetime
import platform
import shutil
import subprocess
import time

import torch

from .. import __version__, hardware
from ..config import get_config
from ..device import cpu_flags, device_name, environment, pick_device, total_memory_bytes
from ..host import CPU_FLAGS
from ..references import fileformat, results
from ..weights import build_model, load_smollm2

REAL = "SmolLM2-135M-Instruct, real weights (the bundled GGUF)"
RANDOM = "random weights of SmolLM2-135M's shape (seed 0); the real tokenizer"
TINY = "random weights of the tiny preset (a test run)"


def run_environment(device: torch.device, dtype: torch.dtype) -> dict:
    """What a reader needs to interpret a reference's numbers: the device, its memory, the software, the CPU."""
    env = environment(device, dtype)
    flags = cpu_flags()
    env.update(date=_now(), llmperf=__version__, platform=platform.platform(), memory_bytes=total_memory_bytes(device),
               cpu_name=device_name(torch.device("cpu")), cpu_flags=[flag for flag in CPU_FLAGS if flag in flags],
               cuda=torch.version.cuda, driver=_driver_version() if device.type == "cuda" else None)
    return env


def _driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def tiny_sizes(device_type: str = "cpu"):
    """Sizes small enough for a unit test (seconds in all), for `--preset tiny`."""
    from ..chapters.setup import sizes_for_type

    return dataclasses.replace(
        sizes_for_type(device_type), repeat=1, chain_prompt=8, chain_new_tokens=(2, 3, 4), chain_batch=2,
        chain_multi_token=2, prefill_lengths=(8, 16, 24, 32), prefill_model="tiny", prefill_batch_len=16,
        prefill_batch_model="tiny", decode_batches=(1, 2, 4), decode_context=8, decode_contexts=(8, 32, 128),
        naive_prompt=8, naive_new_tokens=3, naive_positions=(8, 16, 32, 64), serve_batch=2, serve_requests=4,
        serve_batches=(1, 2), serve_prompt=4, serve_new_tokens=4, serve_long_prompt=32)


def make_setup(device=None, weights: str = "auto", tokenizer_path=None, preset: str | None = None,
               cut: dict | None = None):
    """The chapters' Setup for a reference run, and the words for its weights.

    `weights`: "real" (the GGUF), "random" (SmolLM2's shape, random values) or "auto" (real if the GGUF is
    installed). `preset="tiny"`: the tiny model at `tiny_sizes`, for tests. `cut`: sizes to override (a
    GPU run that must fit its time), recorded in the reference."""
    from ..chapters.setup import Setup, default_dtype, fastest_thread_count, sizes_for
    from ..tokenizer import Tokenizer

    device = pick_device(device)
    dtype = default_dtype(device)
    if weights not in ("auto", "real", "random"):
        raise ValueError(f'weights must be "auto", "real" or "random", got {weights!r}.')
    check_cut(cut or {}, device.type)  # before the model loads
    if weights == "auto":
        weights = "real" if tokenizer_path is None and _gguf_installed() else "random"
    tokenizer = Tokenizer.load(tokenizer_path) if tokenizer_path else None
    if preset is None and weights == "real":
        model, tokenizer = load_smollm2(device, dtype)
        words = REAL
    else:
        if tokenizer is None:
            _, tokenizer = _gguf_tokenizer()
        cfg = get_config(preset or "smollm2-135m")
        if preset is not None:
            cfg = cfg.with_(vocab_size=tokenizer.vocab_size, max_seq_len=512)
        model = build_model(cfg, device, dtype, seed=0)
        words = TINY if preset else RANDOM
    if device.type == "cpu":
        torch.set_num_threads(fastest_thread_count(model))
    sizes = tiny_sizes(device.type) if preset else sizes_for(device)
    if cut:
        sizes = dataclasses.replace(sizes, **cut)
    return Setup(device, dtype, sizes, model, tokenizer), words


def check_cut(cut: dict, device_type: str) -> None:
    """Refuse, before any work, a cut that names no size or gives one a value of the wrong kind: a list of
    numbers for a sweep (decode_batches=1,8,64), a whole number for a count, a preset for a model."""
    from ..chapters.setup import sizes_for_type
    from ..config import PRESETS

    sizes = sizes_for_type(device_type)
    names = {f.name for f in dataclasses.fields(sizes)} - {"device"}
    unknown = sorted(set(cut) - names)
    if unknown:
        raise ValueError(f"--cut names no size: {unknown}; the sizes are {', '.join(sorted(names))} "
                         "(llmperf.chapters.setup.Sizes).")
    for name, value in cut.items():
        default = getattr(sizes, name)
        if isinstance(default, tuple) and not (isinstance(value, tuple) and len(value) >= 2):
            raise ValueError(f"--cut {name} is a sweep: give two or more numbers, e.g. {name}="
                             f"{','.join(map(str, default[:3]))}; got {value!r}.")
        if isinstance(default, int) and not (isinstance(value, int) and value >= 1):
            raise ValueError(f"--cut {name} takes a whole number of 1 or more, got {value!r}.")
        if isinstance(default, str) and value not in PRESETS:
            raise ValueError(f"--cut {name} takes a model preset ({', '.join(sorted(PRESETS))}), got {value!r}.")


def _gguf_installed() -> bool:
    from ..weights import smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except (FileNotFoundError, RuntimeError, ImportError):
        return False
    return True


def _gguf_tokenizer():
    from ..weights import read_gguf

    if not _gguf_installed():
        raise FileNotFoundError("Random weights still need SmolLM2's tokenizer, and the GGUF is not installed "
                                "here: extract it where it is (python -m llmperf.reference --save-tokenizer "
                                "tokenizer.json) and pass --tokenizer tokenizer.json.")
    cfg, _tensors, tokenizer = read_gguf()
    return cfg, tokenizer


# --- the chapters: what each runs, in its notebook's order --------------------------------------------------

def run_chain(s) -> dict:
    from ..chapters import chain

    ingredients = chain.measure_ingredients(s)
    return {"ingredients": ingredients, "line": chain.measure_latency_line(s, ingredients)}


def run_prefill(s) -> dict:
    from ..chapters import prefill

    return {"sweep": prefill.ttft_sweep(s)}


def run_intensity(s) -> dict:
    from ..chapters import intensity

    roofs = intensity.roofline(s, intensity.llama_counts())
    return {"roofs": roofs, "sweep": intensity.batch_sweep(s, roofs.here),
            "by_context": intensity.context_sweep(s, roofs.here)}


def run_caching(s) -> dict:
    from ..chapters import caching

    return {"sweep": caching.time_steps(s), "generation": caching.whole_generation(s)}


def run_anatomy(s) -> dict:
    from ..chapters import anatomy
    from ..fast import fuse

    profile = anatomy.profile_step(s, anatomy.predict(s))
    fixed = anatomy.measure_fixed_cost(s, fuse(s.model), profile)
    return {"profile": profile, "fixed": fixed, "replay": anatomy.replay_step(s, fixed)}


def run_serving(s) -> dict:
    from ..chapters import serving

    return {"sweep": serving.batch_sweep(s)}


RUNS = {"chain": run_chain, "prefill": run_prefill, "intensity": run_intensity, "caching": run_caching,
        "anatomy": run_anatomy, "serving": run_serving}
assert tuple(RUNS) == fileformat.CHAPTERS == tuple(results.RESULTS)


def probes(s) -> dict:
    """The probes every chapter leans on: read and copy bandwidth, float32 and bfloat16 matmul rates, one op."""
    measured = hardware.probe(s.device, s.dtype).measured
    return {"date": _now(), "environment": run_environment(s.device, s.dtype),
            "values": {**measured, "op_overhead": hardware.measure_op_overhead(s.device)}}


def run_chapter(name: str, s, weights: str, cut: dict | None = None) -> dict:
    """One chapter's entry of a reference: run its experiments and keep their records and key results."""
    start = time.perf_counter()
    records = RUNS[name](s)
    return entry(name, s, weights, records, time.perf_counter() - start, cut)


def entry(name: str, s, weights: str, records: dict, seconds: float, cut: dict | None = None) -> dict:
    """A chapter's entry from its live `records` ({name: record}, as `RUNS[name]` returns them)."""
    return {"date": _now(), "environment": run_environment(s.device, s.dtype), "weights": weights,
            "sizes": _plain(dataclasses.asdict(s.sizes)), "cut": _plain(dict(cut or {})), "seconds": seconds,
            "results": _plain(results.RESULTS[name](**records)),
            "records": {key: _plain(dataclasses.asdict(rec)) for key, rec in records.items()}}


def _plain(value):
    """JSON's own types throughout (tuples become lists, NaN and infinities become null)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return _plain(value.item())
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)  # a dtype, a device: its name


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run(s, weights: str, chapters=fileformat.CHAPTERS, cut: dict | None = None, progress=None) -> dict:
    """A reference of `chapters` on setup `s`: probes first, then each chapter; `progress(name)` is called as
    each one starts (the command line's bar)."""
    unknown = [c for c in chapters if c not in RUNS]
    if unknown:
        raise ValueError(f"No chapter named {unknown}; the chapters are {', '.join(fileformat.CHAPTERS)}.")
    name = device_name(s.device)
    ref = fileformat.empty(s.device.type, name)
    if progress:
        progress("probes")
    ref["probes"] = probes(s)
    for chapter in chapters:
        if progress:
            progress(chapter)
        ref["chapters"][chapter] = run_chapter(chapter, s, weights, cut)
    return ref

