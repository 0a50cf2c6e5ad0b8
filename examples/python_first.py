#!/usr/bin/env python3
"""The README's first Python program: 4-bit gradients with error feedback.

Four ranks of an in-process group (one Python thread each) average a
gradient, sent as 4-bit minmax codes, for 8 steps; error feedback carries
each step's quantization error into the next, so the mean output over the
steps approaches the exact average. Run by CTest as example_python_first:

    PYTHONPATH=build/bindings/python /usr/bin/python3 examples/python_first.py

Exits 1 if every rank did not get the same bits or the error is too large.
"""

import sys
import threading

import numpy as np

import qc

STEPS = 8
grads = [np.sin(0.01 * np.arange(4096, dtype=np.float32) + r).astype(np.float32) for r in range(4)]
avgs = [np.empty_like(g) for g in grads]
sums = [np.zeros(g.size) for g in grads]

comms = qc.Comm.local(4)                       # 4 ranks of one group, one thread each
def rank(comm, grad, avg):
    with comm, qc.ErrorBuffer(comm, grad.size) as residuals:
        comm.set_layer_policy("*", qc.Policy(codec="minmax", bits=4, error_feedback=True))
        for step in range(STEPS):
            comm.allreduce(grad, out=avg, op="avg", layer="fc1.weight", error_buffer=residuals)
            sums[comm.rank] += avg

threads = [threading.Thread(target=rank, args=(c, grads[c.rank], avgs[c.rank])) for c in comms]
for t in threads: t.start()
for t in threads: t.join()

exact = np.mean(grads, axis=0)
worst = float(np.max(np.abs(sums[0] / STEPS - exact)))
same = all(np.array_equal(a, avgs[0]) for a in avgs)
print(f"python_first: {STEPS} steps of 4-bit allreduce with error feedback: "
      f"largest error of the mean output {worst:.2e}; ranks agree: {same}")
sys.exit(0 if same and worst < 0.01 else 1)
