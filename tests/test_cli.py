"""`python -m llmperf` answers the chat prompt and reports its timings."""

import subprocess
import sys


def test_cli_answers_and_reports_timings():
    out = subprocess.run([sys.executable, "-m", "llmperf", "--max-new-tokens", "16", "--device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout
    assert "time to first token:" in out.stdout and "tokens/s" in out.stdout
    assert "torch threads" in out.stdout


def test_cli_rejects_an_empty_prompt():
    out = subprocess.run([sys.executable, "-m", "llmperf", "   "], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "the prompt is empty" in out.stderr
