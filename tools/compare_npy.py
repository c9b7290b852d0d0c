"""Compares the .npy outputs in two folders (same file names): prints, per output,
the max absolute difference and the difference relative to the reference's largest
magnitude; exits 1 if any exceeds --tol (or shapes/dtypes differ).

usage: python compare_npy.py GOT_DIR REF_DIR [--tol 1e-4] [--label TEXT]
"""
import argparse
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("got")
    ap.add_argument("ref")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    names = sorted(f for f in os.listdir(a.ref) if f.endswith(".npy"))
    if not names:
        print(f"{a.label}: no reference outputs in {a.ref}")
        return 1
    worst, bad = 0.0, []
    for n in names:
        p = os.path.join(a.got, n)
        if not os.path.exists(p):
            bad.append(f"{n} missing")
            continue
        g, r = np.load(p), np.load(os.path.join(a.ref, n))
        if g.shape != r.shape or g.dtype != r.dtype:
            bad.append(f"{n}: {g.dtype}{list(g.shape)} vs {r.dtype}{list(r.shape)}")
            continue
        if r.dtype.kind in "fc":
            diff = float(np.abs(g.astype(np.float64) - r).max()) if r.size else 0.0
            rel = diff / max(float(np.abs(r).max()) if r.size else 0.0, 1e-12)
        else:
            rel = diff = float((g != r).sum())
        worst = max(worst, rel)
        if not rel <= a.tol:
            bad.append(f"{n}: relative difference {rel:.3e} > {a.tol}")
    status = "ok" if not bad else "MISMATCH"
    print(f"{a.label}: {status}, {len(names)} outputs, max relative difference {worst:.3e}" +
          ("" if not bad else "; " + "; ".join(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
