"""Time qc's emulation of an N-rank allreduce against a vectorised NumPy
emulation of the same ring (issue 36's yardstick).

    python tools/emulate_bench.py --ranks 32:262144,128:1048576 [--reps 3]

Both emulate a minmax 4-bit ring allreduce of N ranks' float32 vectors:
a reduce-scatter of N-1 hops, each hop requantizing the partial sum it
forwards, then an allgather of each owner's block, quantized once. NumPy
does a hop of all ranks as one array operation (every rank's block at once,
one bucket per row), so it pays no per-rank overhead; qc runs the real
algorithm for every rank (qc.emulate_allreduce, bit-identical to a real
run). The NumPy emulation rounds to nearest and is not bit-identical to
qc's; it stands for the same arithmetic, as a Python user would write it.

qc writes into output arrays made once and passed as out= on every run, as
a training loop that emulates step after step would; the column "new
outputs" times the same call making fresh arrays each run, whose first
touch (page faults) costs as much as the emulation itself at 32 ranks.

The column "copy" times np.copyto(out, inputs): reading every rank's input
and writing every rank's output once, on one thread, which any emulation
that gives each rank its own output pays at least (NumPy's ring returns one
broadcast array instead, and so skips the writes).

Prints one line per shape: the best of --reps runs of each, and the ratio
of NumPy to qc with out= (> 1: qc faster), measured in the same run.
"""

import argparse
import time

import numpy as np

import qc

BUCKET = 128  # qc's default minmax bucket (qc_policy_t.bucket_size)


def quantize(x, bits):
    """Min-max quantization of each row of BUCKET values, returned dequantized."""
    rows = x.reshape(-1, BUCKET)
    lo = rows.min(axis=1, keepdims=True)
    hi = rows.max(axis=1, keepdims=True)
    scale = (hi - lo) / np.float32((1 << bits) - 1)
    scale[scale == 0] = 1
    codes = np.rint((rows - lo) / scale)
    return (codes * scale + lo).reshape(x.shape)


def numpy_ring(inputs, bits):
    """inputs: N x count. Every rank's result (N x count)."""
    n, count = inputs.shape
    blocks = inputs.reshape(n, n, count // n).copy()  # rank, block, values
    ranks = np.arange(n)
    for step in range(n - 1):
        # rank r sends its partial sum of block (r - step) mod n to rank r + 1
        sent = (ranks - step) % n
        hop = quantize(blocks[ranks, sent], bits)
        blocks[(ranks + 1) % n, sent] += hop
    # rank r now owns block (r + 1) mod n; its quantized copy goes to everyone
    owned = blocks[ranks, (ranks + 1) % n]
    final = np.empty((n, count // n), dtype=np.float32)
    final[(ranks + 1) % n] = quantize(owned, bits)
    return np.broadcast_to(final.reshape(1, count), (n, count))


def best_of(reps, fn):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="32:262144,128:1048576",
                    help="N:COUNT shapes, comma separated (COUNT float32 per rank)")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    policy = qc.Policy(codec="minmax", bits=args.bits, algorithm="ring", bucket_size=BUCKET,
                       min_compress_bytes=0)
    print("| ranks | elements per rank | NumPy | qc.emulate_allreduce, out= | qc faster by "
          "| new outputs | copy |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for shape in args.ranks.split(","):
        n, count = (int(x) for x in shape.split(":"))
        if count % (n * BUCKET):
            raise SystemExit(f"{count} is not a multiple of {n} ranks x {BUCKET}")
        rng = np.random.default_rng(1)
        inputs = rng.standard_normal((n, count), dtype=np.float32)
        arrays = list(inputs)
        t_np = best_of(args.reps, lambda: numpy_ring(inputs, args.bits))
        out = np.empty_like(inputs)
        t_qc = best_of(args.reps, lambda: qc.emulate_allreduce(arrays, policy, out=out))
        t_new = best_of(args.reps, lambda: qc.emulate_allreduce(arrays, policy))
        t_copy = best_of(args.reps, lambda: np.copyto(out, inputs))
        print(f"| {n} | {count:,} | {t_np:.3f} s | {t_qc:.3f} s | {t_np / t_qc:.1f}x "
              f"| {t_new:.3f} s | {t_copy:.3f} s |", flush=True)


if __name__ == "__main__":
    main()
