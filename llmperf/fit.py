"""Fitting measurements to the shapes the cost model predicts (lines and parabolas), with R²."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Fit:
    """y ≈ Σ coeffs[i]·x**i (coeffs[0] is the intercept), and how much of y's variance it explains."""

    coeffs: tuple[float, ...]
    r2: float

    def __call__(self, x):
        return np.polynomial.polynomial.polyval(np.asarray(x, dtype=float), self.coeffs)

    @property
    def intercept(self) -> float:
        return self.coeffs[0]

    @property
    def slope(self) -> float:
        return self.coeffs[1]


def poly_fit(x, y, degree: int = 1) -> Fit:
    """Least-squares polynomial of `degree` through the points (x, y)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D and of equal length, got shapes {x.shape} and {y.shape}.")
    if len(x) < degree + 2:
        raise ValueError(f"A degree-{degree} fit with an R² needs at least {degree + 2} points, got {len(x)}.")
    coeffs = np.polynomial.polynomial.polyfit(x, y, degree)
    residual = y - np.polynomial.polynomial.polyval(x, coeffs)
    r2 = 1.0 - float(residual @ residual) / float(((y - y.mean()) ** 2).sum())
    return Fit(tuple(float(c) for c in coeffs), r2)


def linear_fit(x, y) -> Fit:
    """y ≈ intercept + slope·x."""
    return poly_fit(x, y, 1)
