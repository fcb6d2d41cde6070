"""python -m llmperf.reference --out references/NAME.json [--chapters chain prefill ...]

Runs every chapter's experiments (or those named) on this machine and writes them,
with the environment and the probes, to one reference file; an existing file of the
same device keeps the chapters this run leaves out. The file is `llmperf.references.fileformat`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..references import fileformat


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llmperf.reference", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="the reference file to write (merged into, if it exists)")
    p.add_argument("--chapters", nargs="+", choices=fileformat.CHAPTERS, default=list(fileformat.CHAPTERS),
                   metavar="CHAPTER", help=f"chapters to run (default: all of {', '.join(fileformat.CHAPTERS)})")
    p.add_argument("--device", help="cpu, cuda, cuda:1, mps (default: the best one here)")
    p.add_argument("--weights", choices=("auto", "real", "random"), default="auto",
                   help="SmolLM2's real weights, or random ones of its shape (default: real where the GGUF is)")
    p.add_argument("--tokenizer", type=Path, help="a tokenizer file from --save-tokenizer (where there is no GGUF)")
    p.add_argument("--cut", nargs="+", default=[], metavar="SIZE=VALUE",
                   help="override sweep sizes to fit a time budget, e.g. serve_requests=32 "
                        "(recorded in the reference as cut)")
    p.add_argument("--preset", choices=("tiny",), help="the tiny preset at test sizes (for tests: seconds)")
    p.add_argument("--save-tokenizer", type=Path, metavar="FILE",
                   help="write SmolLM2's tokenizer from the GGUF to FILE (a few MB) and stop")
    return p


def parse_cut(items) -> dict:
    """["serve_requests=32", "decode_batches=1,8,64"] -> {"serve_requests": 32, "decode_batches": (1, 8, 64)}."""
    cut = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"--cut takes SIZE=VALUE, got {item!r}.")
        try:
            parts = [int(v) for v in value.split(",")]
        except ValueError:
            cut[name] = value  # a model name
            continue
        cut[name] = tuple(parts) if "," in value else parts[0]
    return cut


def check_out(path: Path) -> None:
    """Refuse, before minutes of measuring, a file that could not be written or would never be shown."""
    if path.suffix != ".json":
        raise ValueError(f"--out {path}: a reference is a .json file (the chapters read references/*.json).")
    folder = path.parent if str(path.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {path}: cannot create its folder ({err.strerror or err}).") from None
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"--out {path}: not writable here.")


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        cut = parse_cut(args.cut)
        if args.save_tokenizer:
            from .runner import _gguf_tokenizer

            _gguf_tokenizer()[1].save(args.save_tokenizer)
            print(f"wrote {args.save_tokenizer} ({args.save_tokenizer.stat().st_size / 1e6:.1f} MB)")
            return 0
        if args.out is None:
            raise ValueError("--out FILE is needed: where to write the reference (e.g. references/my-laptop.json).")
        check_out(args.out)
        old = fileformat.load(args.out) if args.out.exists() else None  # a malformed file fails before any run
        from ..device import device_name, pick_device

        try:
            device = pick_device(args.device)
        except RuntimeError as err:  # asked for CUDA or MPS where there is none
            raise ValueError(str(err)) from None
        if old is not None:  # refuse a merge now, not after minutes of measuring
            fileformat.merge(old, fileformat.empty(device.type, device_name(device)), args.out)
        from tqdm import tqdm

        from .runner import make_setup, run

        s, weights = make_setup(device, args.weights, args.tokenizer, args.preset, cut)
        from ..device import describe

        print(f"{describe(s.device, s.dtype)}\n      weights: {weights}" + (f"\n          cut: {cut}" if cut else ""))
        steps = ["probes", *args.chapters]
        started = time.perf_counter()
        with tqdm(total=len(steps), desc="reference", unit="part", file=sys.stderr) as bar:
            def step(name):
                if name != "probes":
                    bar.update(1)
                bar.set_postfix_str(name)
            ref = run(s, weights, args.chapters, cut, progress=step)
            bar.update(1)
        if old is not None:
            ref = fileformat.merge(old, ref, args.out)
        fileformat.save(ref, args.out)
    except (ValueError, FileNotFoundError, ImportError, MemoryError) as err:  # ImportError: no GGUF wheel
        print(f"error: {err}", file=sys.stderr)
        return 2
    took = time.perf_counter() - started
    print(f"wrote {args.out}: {', '.join(args.chapters)} on {ref['device']['name']} in {took / 60:.1f} min")
    for name in args.chapters:
        print(f"  {name:<10} {ref['chapters'][name]['seconds']:6.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
