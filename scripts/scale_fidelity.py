#!/usr/bin/env python3
"""The error of one allreduce per codec, scale and rounding on three kinds of
data: the table of docs/fidelity.md ("Scale and rounding of the global
codecs", "The block-scaled formats"). Uses qc.emulate_allreduce (bit-identical to a real run), so it
needs no MPI and no second process.

    PYTHONPATH=build/bindings/python python3 scripts/scale_fidelity.py \
        [--ranks 4] [--count 262144] [--seed 1]

Error = ||y - exact|| / ||exact|| over all elements, exact the float64 sum of
the ranks' inputs (the usual relative L2 error; 1.0 is "all zeros").
"""
import argparse

import numpy as np

import qc


def make_data(kind, ranks, count, rng):
    if kind == "normal":
        return [rng.standard_normal(count).astype(np.float32) for _ in range(ranks)]
    if kind == "heavy-tailed":  # Student t, 2 degrees of freedom: rare huge values
        return [rng.standard_t(2, count).astype(np.float32) for _ in range(ranks)]
    if kind == "gradient-like":
        # Layers of 4096 elements whose magnitudes spread over four decades
        # (a model's gradient), the same layer scales on every rank.
        layer_scale = 10.0 ** rng.uniform(-4, 0, count // 4096 + 1)
        scale = np.repeat(layer_scale, 4096)[:count]
        return [(rng.standard_normal(count) * scale).astype(np.float32) for _ in range(ranks)]
    raise ValueError(kind)


def rows(bits):
    """(label, policy changes): the new scale choices next to minmax/qsgd."""
    out = [
        (f"minmax{bits}/128", dict(codec="minmax", bits=bits, algorithm="sra")),
        (f"qsgd{bits}/128~", dict(codec="qsgd", bits=bits, rounding="stochastic", algorithm="sra")),
    ]
    # The block-scaled formats of this element width (sra: each block's
    # scale is its own, so no shared grid), nearest and stochastic.
    block_scaled = {4: ("mxfp4", "nvfp4"), 6: ("mxfp6", "mxfp6_e3m2"),
                    8: ("mxfp8", "mxfp8_e5m2", "mxint8")}
    for codec in block_scaled.get(bits, ()):
        for rounding in ("nearest", "stochastic"):
            mark = "~" if rounding == "stochastic" else ""
            out.append((f"{codec}{mark}", dict(codec=codec, rounding=rounding, algorithm="sra")))
    if bits == 6:  # the global codecs only at 4 and 8 bits
        return out
    for codec, short in (("global_linear", "glin"), ("global_exp", "gexp")):
        for scale in ("l2", "max_abs"):
            for rounding in ("stochastic", "nearest"):
                mark = "~" if rounding == "stochastic" else ""
                out.append((f"{short}{bits}{mark} {scale}, native",
                            dict(codec=codec, bits=bits, scale=scale, rounding=rounding,
                                 algorithm="native")))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--count", type=int, default=262144)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bits", default="4,6,8")
    args = ap.parse_args()
    kinds = ("normal", "heavy-tailed", "gradient-like")
    data = {k: make_data(k, args.ranks, args.count, np.random.default_rng(args.seed)) for k in kinds}
    exact = {k: np.sum([x.astype(np.float64) for x in v], axis=0) for k, v in data.items()}
    print(f"| codec ({args.ranks} ranks x {args.count} floats) | " + " | ".join(kinds) + " |")
    print("| --- |" + " --- |" * len(kinds))
    for bits in (int(b) for b in args.bits.split(",")):
        for label, changes in rows(bits):
            policy = qc.Policy(min_compress_bytes=0, seed=args.seed, **changes)
            cells = []
            for k in kinds:
                y = qc.emulate_allreduce(data[k], policy)[0].astype(np.float64)
                err = np.linalg.norm(y - exact[k]) / np.linalg.norm(exact[k])
                cells.append(f"{err:.3g}")
            print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
