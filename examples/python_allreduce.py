#!/usr/bin/env python3
"""A compressed allreduce from Python: 3 ranks of an in-process group.

Each rank is a Python thread with its own communicator; the gradients are
averaged with 4-bit minmax codes and error feedback, and the result is
checked against the exact average and against qc.emulate_allreduce (the
same call on virtual ranks, bit for bit). Run by CTest as
example_python_allreduce:

    PYTHONPATH=build/bindings/python /usr/bin/python3 examples/python_allreduce.py

Exits 1 if a check fails.
"""

import sys
import threading

import numpy as np

import qc

# --- snippet: docs/using.md, "Python" ---
policy = qc.Policy(codec="minmax", bits=4, error_feedback=True)
comms = qc.Comm.local(3)                       # ranks 0..2 of one group
rng = np.random.default_rng(0)
grads = [rng.standard_normal(1 << 16).astype(np.float32) for _ in comms]
outs = [np.empty_like(g) for g in grads]

def rank(comm):                                # one thread per rank
    with comm, qc.ErrorBuffer(comm, grads[comm.rank].size) as eb:
        comm.set_layer_policy("*", policy)
        comm.allreduce(grads[comm.rank], out=outs[comm.rank], op="avg",
                       layer="fc1.weight", error_buffer=eb)

threads = [threading.Thread(target=rank, args=(c,)) for c in comms]
for t in threads: t.start()
for t in threads: t.join()
# --- end snippet ---

exact = sum(g.astype(np.float64) for g in grads) / len(grads)
rel = float(np.linalg.norm(outs[0] - exact) / np.linalg.norm(exact))
emulated = qc.emulate_allreduce(grads, policy, op="avg")
print(f"3 ranks, {grads[0].size} floats, minmax 4-bit + error feedback")
print(f"relative error vs the exact average: {rel:.4f}")

ok = True
if not all(np.array_equal(o, outs[0]) for o in outs):
    print("FAIL: ranks received different results"); ok = False
if not rel < 0.2:  # 4-bit codes of N(0,1) data, requantized once by SRA
    print("FAIL: error too large"); ok = False
if not all(np.array_equal(e, outs[0]) for e in emulated):
    print("FAIL: the emulation differs from the real run"); ok = False
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
