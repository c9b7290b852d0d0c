"""Structural comparison of results: nested dicts/lists/tuples of numpy arrays and scalars."""

from __future__ import annotations

import math

import numpy as np

# (rtol, atol) by dtype kind/size; integers, bools and strings compare exactly.
FLOAT_TOLERANCE = {
    np.dtype(np.float16): (1e-3, 1e-3),
    np.dtype(np.float32): (1e-5, 1e-6),
    np.dtype(np.float64): (1e-5, 1e-6),
}


def _is_string_array(a: np.ndarray) -> bool:
    return a.dtype.kind in "US" or (a.dtype == object and all(isinstance(v, str) for v in a.flat))


def diff_arrays(ref: np.ndarray, got, path: str) -> list[str]:
    if not isinstance(got, np.ndarray):
        return [f"{path}: expected numpy.ndarray, got {type(got).__name__}"]
    if ref.shape != got.shape:
        return [f"{path}: shape {got.shape} != expected {ref.shape}"]
    if _is_string_array(ref):
        # onnxruntime returns object arrays of str; an array of numpy str_ reads the same.
        if not (got.dtype == object or got.dtype.kind == "U"):
            return [f"{path}: string tensor came back as dtype {got.dtype}"]
        if ref.tolist() != got.tolist():
            return [f"{path}: strings differ: {got.tolist()!r} != expected {ref.tolist()!r}"]
        return []
    if ref.dtype != got.dtype:
        return [f"{path}: dtype {got.dtype} != expected {ref.dtype}"]
    if ref.dtype in FLOAT_TOLERANCE:
        rtol, atol = FLOAT_TOLERANCE[ref.dtype]
        if not np.allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True):
            err = np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))
            return [f"{path}: values differ (max abs err {err:.3g}, rtol {rtol}, atol {atol})"]
        return []
    if not np.array_equal(got, ref):
        bad = int(np.count_nonzero(got != ref))
        return [f"{path}: {bad} of {ref.size} values differ (exact comparison for {ref.dtype})"]
    return []


def diff(ref, got, path: str = "result") -> list[str]:
    """Every difference between `got` and the reference `ref`, as readable lines."""
    if isinstance(ref, np.ndarray):
        return diff_arrays(ref, got, path)
    if isinstance(ref, dict):
        if not isinstance(got, dict):
            return [f"{path}: expected dict, got {type(got).__name__}: {got!r}"]
        out = []
        missing, extra = sorted(set(ref) - set(got), key=str), sorted(set(got) - set(ref), key=str)
        if missing or extra:
            out.append(f"{path}: keys differ (missing {missing}, unexpected {extra})")
        for key in ref:
            if key in got:
                out += diff(ref[key], got[key], f"{path}[{key!r}]")
        return out
    if isinstance(ref, (list, tuple)):
        if type(got) is not type(ref):
            return [f"{path}: expected {type(ref).__name__}, got {type(got).__name__}: {got!r}"]
        if len(got) != len(ref):
            return [f"{path}: length {len(got)} != expected {len(ref)}: {got!r} vs {ref!r}"]
        out = []
        for i, (r, g) in enumerate(zip(ref, got)):
            out += diff(r, g, f"{path}[{i}]")
        return out
    if type(got) is not type(ref):
        return [f"{path}: expected {type(ref).__name__} {ref!r}, got {type(got).__name__} {got!r}"]
    if isinstance(ref, float) or isinstance(ref, np.floating):
        if not math.isclose(float(got), float(ref), rel_tol=1e-5, abs_tol=1e-6):
            return [f"{path}: {got!r} != expected {ref!r}"]
        return []
    if got != ref:
        return [f"{path}: {got!r} != expected {ref!r}"]
    return []
