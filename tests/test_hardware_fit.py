"""The accelerator table, rooflines, the probe of this machine, and the fitting helpers."""

import numpy as np
import pytest

from llmperf import hardware
from llmperf.fit import linear_fit, poly_fit

# facts.md: ridge points in FLOP/byte
RIDGES = {"H100 SXM": 295, "H100 PCIe": 378, "H200 SXM": 206, "A100 SXM 80GB": 153, "A100 40GB": 201,
          "L4": 403, "L40S": 419, "RTX 4090": 164, "MI300X": 247, "B200": 281}


@pytest.mark.parametrize("name", RIDGES)
def test_ridge_points_match_facts(name):
    assert round(hardware.ACCELERATORS[name].ridge) == RIDGES[name]


def test_roofline_time_takes_the_binding_limit():
    h100 = hardware.ACCELERATORS["H100 SXM"]
    assert hardware.roofline_time(989e12, 1.0, h100) == pytest.approx(1.0)  # compute-bound
    assert hardware.roofline_time(1.0, 3.35e12, h100) == pytest.approx(1.0)  # bandwidth-bound


def test_probe_measures_this_machine():
    hw = hardware.probe("cpu")
    assert hw.name.startswith("this machine")
    assert set(hw.measured) == {"read_bandwidth", "copy_bandwidth", "matmul_float32", "matmul_bfloat16"}
    assert all(v > 0 for v in hw.measured.values())
    assert hw.flops == hw.measured["matmul_float32"] and hw.bandwidth == hw.measured["read_bandwidth"]


def test_fits_recover_exact_polynomials():
    x = np.arange(1, 9)
    line = linear_fit(x, 3.0 + 2.0 * x)
    assert line.slope == pytest.approx(2.0) and line.intercept == pytest.approx(3.0) and line.r2 == pytest.approx(1.0)
    quad = poly_fit(x, 1.0 + 0.5 * x + 0.25 * x**2, 2)
    assert quad.coeffs == pytest.approx((1.0, 0.5, 0.25)) and quad(10) == pytest.approx(31.0)
    noisy = linear_fit(x, [1, 5, 2, 6, 3, 7, 4, 8])
    assert 0 < noisy.r2 < 1


def test_fit_needs_enough_points():
    with pytest.raises(ValueError, match="needs at least 4 points"):
        poly_fit([1, 2, 3], [1, 4, 9], 2)
