"""Make every assignment's student and autograder versions with Otter Assign (`make assignments`).

Each assignment is one master notebook, assignments/<name>/<name>.ipynb, holding
the statement, the reference solution and the tests, public and hidden (Otter's
notebook format: https://otter-grader.readthedocs.io). For each master,
`otter assign` writes

    <out>/<name>/student/      the notebook to hand out: solutions replaced by `...`,
                               public tests only, in tests/
    <out>/<name>/autograder/   the solution notebook, every test, and the zip that
                               `otter run` grades a submission with

and this script zips each student folder into <out>/downloads/<name>.zip, the
file the course's website offers.

    .venv/bin/python assignments/make_assignments.py [--out _build/assignments] [--no-run-tests]

By default `otter assign` also runs every test, hidden ones included, against the
solution notebook and fails if one does not pass.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent


def masters() -> dict[str, Path]:
    """Every assignment's master notebook, by assignment name (its folder's name)."""
    found = {d.name: d / f"{d.name}.ipynb" for d in sorted(HERE.iterdir()) if (d / f"{d.name}.ipynb").is_file()}
    if not found:
        raise FileNotFoundError(f"No master notebooks under {HERE}: expected <name>/<name>.ipynb.")
    return found


def assign(name: str, out: Path, run_tests: bool = True) -> Path:
    """Run `otter assign` on one master into out/<name>; return that folder."""
    master = masters()[name]
    result = out / name
    shutil.rmtree(result, ignore_errors=True)
    flags = ["--no-pdfs"] + ([] if run_tests else ["--no-run-tests"])
    command = [sys.executable, "-m", "otter", "assign", *flags, str(master), str(result)]
    done = subprocess.run(command, cwd=master.parent, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"otter assign failed on {master.name}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    (result / STAMP).write_text(source_digest(name))
    return result


STAMP = "source.sha256"
"""The file in an assignment's output folder that names what `assign` made it from (`source_digest`)."""


def source_digest(name: str) -> str:
    """SHA-256 of what `otter assign` makes an assignment from: every file in its master's folder (names and
    bytes), and Otter's version."""
    digest = hashlib.sha256(f"otter-grader {metadata.version('otter-grader')}\n".encode())
    folder = masters()[name].parent
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"{path.relative_to(folder)}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def built(name: str, out: Path) -> Path | None:
    """out/<name> where `assign` made it from the master folder as it is now (its stamp says so), else None: an
    earlier build the tests can grade with instead of making their own."""
    stamp = Path(out) / name / STAMP
    return stamp.parent if stamp.is_file() and stamp.read_text() == source_digest(name) else None


def autograder_zip(result: Path) -> Path:
    """The zip `otter run -a` grades with, in an assignment's output folder."""
    zips = sorted((result / "autograder").glob("*-autograder_*.zip"))
    if len(zips) != 1:
        raise FileNotFoundError(f"Expected one autograder zip in {result / 'autograder'}, found {len(zips)}.")
    return zips[0]


def pack(student: Path, zip_stem: Path) -> Path:
    """Zip a student folder as <zip_stem>.zip, its files under one folder named like the assignment."""
    with tempfile.TemporaryDirectory() as staging:
        shutil.copytree(student, Path(staging) / zip_stem.name)
        return Path(shutil.make_archive(str(zip_stem), "zip", root_dir=staging, base_dir=zip_stem.name))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="_build/assignments", help="where to write (default: _build/assignments)")
    p.add_argument("--no-run-tests", action="store_true", help="skip running the tests on the solutions")
    p.add_argument("names", nargs="*", help="assignments to build (default: all)")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    names = args.names or list(masters())
    unknown = sorted(set(names) - set(masters()))
    if unknown:
        p.error(f"no assignment named {', '.join(unknown)}; there are: {', '.join(masters())}")
    downloads = out / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    # Without the tests, `otter assign` is mostly Python starting and importing: the assignments are made side by
    # side, one per core. With them, one at a time, so that no solution's timed cells share the cores.
    workers = (os.cpu_count() or 1) if args.no_run_tests else 1
    print(f"otter assign{'' if args.no_run_tests else ' (and the tests on the solutions)'}: {', '.join(names)} ...",
          flush=True)
    with ThreadPoolExecutor(workers) as pool:
        for name, result in zip(names, pool.map(lambda name: assign(name, out, run_tests=not args.no_run_tests),
                                                names)):  # each reported as it is made, in order
            pack(result / "student", downloads / name)
            print(f"{name}:\n  student:    {result / 'student'}\n  autograder: {autograder_zip(result)}\n"
                  f"  download:   {downloads / name}.zip", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
