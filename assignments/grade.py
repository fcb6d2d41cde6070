"""Grade submissions with Otter's autograder, offline and without Docker: one `otter run` each.

    .venv/bin/python assignments/grade.py a1_decode_arithmetic submissions/*.ipynb

A submission is the student's notebook, or the zip its export cell wrote. Each is
run from the top in a fresh kernel against every test, public and hidden; the
score is read from the `results.json` that `otter run` writes (its exit status is
0 even at zero marks). Prints one line per submission and writes scores.csv
(and each submission's results.json) under --out. Build the autograder first
with `make assignments`.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from make_assignments import autograder_zip, masters

FAILED_CASE = re.compile(r"^\s*(\S+ - \d+) result:\s*\n\s*❌", re.MULTILINE)


@dataclass
class Graded:
    """One submission's grade, as read from Otter's results.json."""

    score: float
    max_score: float
    by_question: dict[str, tuple[float, float]]  # name -> (score, max)
    failed_cases: list[str]  # "q2 - 3": the third test case of q2 (hidden ones included)
    feedback: dict[str, str]  # name -> the output Otter shows for that question
    results: dict  # results.json as Otter wrote it


def read_results(path: Path) -> Graded:
    """The grade in an `otter run` results.json (Gradescope's format): one entry per question."""
    results = json.loads(Path(path).read_text())
    questions = [t for t in results["tests"] if "max_score" in t]
    by_question = {t["name"]: (float(t["score"]), float(t["max_score"])) for t in questions}
    failed = [case for t in questions for case in FAILED_CASE.findall(t.get("output", ""))]
    return Graded(score=sum(s for s, _ in by_question.values()), max_score=sum(m for _, m in by_question.values()),
                  by_question=by_question, failed_cases=failed,
                  feedback={t["name"]: t.get("output", "") for t in questions}, results=results)


def grade(autograder: Path, submission: Path, out: Path) -> Graded:
    """Run `otter run` on one submission (a notebook or an exported zip) and read its results.json."""
    submission = Path(submission)
    if submission.suffix not in (".ipynb", ".zip"):
        raise ValueError(f"{submission} is neither a notebook (.ipynb) nor an exported zip (.zip).")
    if not submission.is_file():
        raise FileNotFoundError(f"No submission at {submission}.")
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    results.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "otter", "run", "-a", str(autograder), "-o", str(out),
                           str(submission)], capture_output=True, text=True)
    (out / "otter_run.log").write_text(done.stdout + done.stderr)
    if not results.is_file():
        raise RuntimeError(f"otter run wrote no results.json for {submission} (exit status {done.returncode}); "
                           f"its output is in {out / 'otter_run.log'}:\n{(done.stdout + done.stderr)[-2000:]}")
    return read_results(results)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("assignment", help=f"one of: {', '.join(masters())}")
    p.add_argument("submissions", nargs="+", type=Path, help="notebooks (.ipynb) or exported zips")
    p.add_argument("--built", type=Path, default=Path("_build/assignments"), help="where make assignments wrote")
    p.add_argument("--out", type=Path, default=Path("_build/grades"), help="where to write the results")
    args = p.parse_args(argv)
    if args.assignment not in masters():
        p.error(f"no assignment named {args.assignment}; there are: {', '.join(masters())}")
    try:
        autograder = autograder_zip(args.built / args.assignment)
    except FileNotFoundError as e:
        p.error(f"{e} Run `make assignments` first.")
    missing = [str(s) for s in args.submissions if not s.is_file()]
    if missing:
        p.error(f"no such submission: {', '.join(missing)}")
    out = args.out / args.assignment
    rows, used = [], set()
    for submission in args.submissions:
        folder = submission.stem if submission.stem not in used else f"{submission.stem}_{len(used)}"
        used.add(folder)
        g = grade(autograder, submission, out / folder)
        print(f"{submission}: {g.score:g} / {g.max_score:g}"
              + (f"  (failed: {', '.join(g.failed_cases)})" if g.failed_cases else ""))
        rows.append({"submission": str(submission), "score": g.score, "max_score": g.max_score,
                     **{q: s for q, (s, _) in g.by_question.items()}})
    with open(out / "scores.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"scores: {out / 'scores.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
