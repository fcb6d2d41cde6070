"""The words every chapter shares: a ratio, a trend, a change of speed, a duration."""

import pytest

from llmperf import hardware
from llmperf import wording

H100 = hardware.ACCELERATORS["H100 SXM"]


@pytest.mark.parametrize("first, last, word", [(2.8, 2.5, "shrinks"), (1.5, 2.5, "grows"), (2.0, 2.1, "stays near")])
def test_trend(first, last, word):
    assert wording.trend(first, last, "at batch 1", "at batch 64").startswith(word)


def test_duration_picks_a_unit():
    assert wording.duration(0.0385) == "38.5 ms" and wording.duration(6.7e-5) == "67 µs"
    assert wording.duration(2.5) == "2.50 s" and wording.duration(3.2e-6) == "3.2 µs"
    # a time just under a unit's line, as a difference of two times gives it, is said in that unit
    assert wording.duration(30e-3 - 29e-3) == "1.0 ms" and wording.duration(0.99999) == "1.00 s"
    assert wording.duration(9.99e-6) == "10 µs" and wording.duration(999.4e-6) == "999 µs"
