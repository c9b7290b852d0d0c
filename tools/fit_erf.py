"""Fits the polynomials of onyx's vectorized float32 erf (src/cpu/vec_math-inl.h, ErfFloat).

Below |x| = 1, erf(x) = x * P1(x^2); from 1 to 4, erf(x) = 1 - exp(-x^2) * P2(|x|) (above 4, erf
is 1 in float). Each polynomial is a least-squares fit in the Chebyshev basis to Python's
double-precision math.erf / math.erfc on a dense grid, turned into monomial coefficients for
Horner's rule. Prints the coefficients and the error of evaluating them in float32 (numpy), in
relative terms below 1 and absolute terms above.

    .venv/bin/python tools/fit_erf.py
"""
import math

import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.polynomial import polynomial as P


def monomial(cheb_coeffs, scale, shift):
    """Coefficients in x of sum c_k T_k(scale * x + shift)."""
    power = C.cheb2poly(cheb_coeffs)
    out = np.zeros(len(power))
    for k, a in enumerate(power):
        out[: k + 1] += a * P.polypow([shift, scale], k)[: k + 1]
    return out


def horner32(coeffs, x):
    acc = np.full_like(x, np.float32(coeffs[-1]))
    for a in coeffs[-2::-1]:
        acc = acc * x + np.float32(a)
    return acc


def main():
    # P1 in t = x^2 on [0, 1]: erf(x) / x.
    t = np.linspace(0, 1, 20001)
    x = np.sqrt(t)
    y = np.array([math.erf(v) / v if v > 0 else 2 / math.sqrt(math.pi) for v in x])
    p1 = monomial(C.chebfit(2 * t - 1, y, 5), 2.0, -1.0)
    xs = np.linspace(0, 1, 200001).astype(np.float32)[1:]
    got = (xs * horner32(p1, xs * xs)).astype(np.float64)
    ref = np.array([math.erf(float(v)) for v in xs])
    print("P1 =", ", ".join(f"{v:.10e}" for v in p1))
    print(f"  |x| < 1: largest relative error {np.max(np.abs(got - ref) / np.abs(ref)):.3e}")

    # P2 in x on [1, 4]: erfc(x) e^(x^2).
    x2 = np.linspace(1, 4, 30001)
    q = np.array([math.erfc(v) * math.exp(v * v) for v in x2])
    p2 = monomial(C.chebfit((2 * x2 - 5) / 3, q, 10), 2 / 3, -5 / 3)
    xs = np.linspace(1, 4, 200001).astype(np.float32)
    e = np.exp(-(xs.astype(np.float64) ** 2)).astype(np.float32)
    got = (np.float32(1) - e * horner32(p2, xs)).astype(np.float64)
    ref = np.array([math.erf(float(v)) for v in xs])
    print("P2 =", ", ".join(f"{v:.10e}" for v in p2))
    print(f"  1 <= |x| <= 4: largest absolute error {np.max(np.abs(got - ref)):.3e}")


if __name__ == "__main__":
    main()
