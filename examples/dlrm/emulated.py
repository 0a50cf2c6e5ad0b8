"""Train the DLRM of paper 000 on N emulated nodes in one process, with qc's
quantized alltoall and allreduce emulated bit for bit (qc.emulate_alltoall,
qc.emulate_allreduce: what a real N-rank run of the same policies computes).

Hybrid parallelism as in the paper (§4): table t lives on node t mod N and
looks up its feature for the whole global batch; the lookups travel to the
node that owns each sample (the forward alltoall, width f); every node
computes the dense part's gradients on its own micro-batch (with the same
function as a real rank, hybrid.node_gradients); the gradients of the lookups travel back to the tables' owners (the
backward alltoall, width b), which update their rows; the dense gradients
are summed by an allreduce (ring or recursive doubling in groups of 8, width
w, with or without error compensation, EC). Quantization is the paper's:
unsigned integers on a min-max grid per row, rounded to nearest even (qc's
minmax codec, one bucket per embedding row or weight row).

    python emulated.py --nodes 32 --steps 300 --a2a 4,2 --allreduce ring:4:ec --seed 1

prints one JSON line: the configuration, the test accuracy and loss, the
train loss curve (every --log-every steps) and the time per step.
"""

import json
import sys
import time

import numpy as np
import torch

import qc

from ctr_data import N_SPARSE, TEST_SEED, DataSpec, Teacher
from dlrm_model import init_dense_params, init_tables
from hybrid import (A2A_BACKWARD, A2A_FORWARD, DIM, Layout, config_record,
                    dense_policies, evaluate, node_gradients, row_policy, training_parser)


class Alltoall:
    """Both alltoalls of all N nodes through qc.emulate_alltoall, in
    hybrid.Layout's blocks; one call counter per layer, as a real run has."""

    def __init__(self, nodes, batch):
        self.layout = Layout(nodes, batch)
        self.calls = {A2A_FORWARD: 0, A2A_BACKWARD: 0}

    def _run(self, arrays, policy, layer):
        out = qc.emulate_alltoall([a.contiguous().numpy() for a in arrays], policy, layer=layer,
                                  call_index=self.calls[layer])
        self.calls[layer] += 1
        return [torch.from_numpy(o) for o in out]

    def forward(self, emb, policy):
        """emb: B x 26 x DIM, looked up by the owners; returns what the sample
        owners receive, B x 26 x DIM (policy None: fp32, nothing to emulate)."""
        if policy is None:
            return emb
        L = self.layout
        sends = []
        for o in range(L.n):
            look = emb.new_zeros(emb.shape[0], L.slots, DIM)
            for k, t in L.tables_of(o):
                look[:, k] = emb[:, t]
            sends.append(L.owner_send(look))
        return torch.cat([L.node_receive(r) for r in self._run(sends, policy, A2A_FORWARD)])

    def backward(self, grads, policy):
        """grads: B x 26 x DIM on the sample owners; returns what the table
        owners receive, B x 26 x DIM."""
        if policy is None:
            return grads
        L = self.layout
        sends = [L.node_send(grads[m * L.mb:(m + 1) * L.mb]) for m in range(L.n)]
        out = grads.new_empty(grads.shape)
        for o, r in enumerate(self._run(sends, policy, A2A_BACKWARD)):
            got = L.owner_receive(r)
            for k, t in L.tables_of(o):
                out[:, t] = got[:, k]
        return out


class Allreduce:
    """The dense gradients' sum over the nodes: one qc.emulate_allreduce per
    quantized tensor (hybrid.dense_policies), a plain sum for the others."""

    def __init__(self, policies, nodes, params):
        self.policy = policies
        self.n = nodes
        self.errors = {name: [qc.ErrorBuffer(None, params[name].numel()) for _ in range(nodes)]
                       for name, p in policies.items() if p.error_feedback}
        self.calls = 0
        self.replicas_agree = True
        # Each tensor's N outputs, made once and reused every step (out=):
        # new arrays would cost their page faults on every call.
        self.out = {}

    def __call__(self, name, per_node):
        """per_node: N x shape, each node's gradient; returns the sum."""
        if name not in self.policy:
            return per_node.sum(0)
        arrays = [per_node[i].reshape(-1).contiguous().numpy() for i in range(self.n)]
        shape = (self.n, arrays[0].size)
        if name not in self.out or self.out[name].shape != shape:
            self.out[name] = np.empty(shape, arrays[0].dtype)
        out = qc.emulate_allreduce(arrays, self.policy[name], error_buffers=self.errors.get(name),
                                   layer=name, call_index=self.calls, out=self.out[name])
        # an allreduce leaves the same sum on every node: the replicas stay
        # equal, byte for byte (a diverged run's NaNs are equal bytes too)
        first = out[0].view(np.uint8)
        if not all(np.array_equal(o.view(np.uint8), first) for o in out[1:]):
            self.replicas_agree = False
        # a copy: the next step overwrites the outputs
        return torch.from_numpy(out[0].copy()).view(per_node.shape[1:])

    def step_done(self):
        self.calls += 1


def train(cfg):
    spec = DataSpec(max_rows=cfg.max_rows, seed=cfg.data_seed)
    teacher = Teacher(spec)
    d, s, l, _ = teacher.batch(cfg.test_size, TEST_SEED)
    test = (torch.from_numpy(d), torch.from_numpy(s), torch.from_numpy(l))
    gen = torch.Generator().manual_seed(cfg.seed)
    params = init_dense_params(DIM, N_SPARSE, cfg.width, gen)
    tables = init_tables(spec.rows, DIM, gen)
    n, batch = cfg.nodes, cfg.batch
    a2a = Alltoall(n, batch)
    mb = a2a.layout.mb
    allreduce = Allreduce(dense_policies(params, n, cfg.allreduce, cfg.layers), n, params)
    f_policy = None if cfg.a2a[0] == 32 else row_policy(cfg.a2a[0], DIM)
    b_policy = None if cfg.a2a[1] == 32 else row_policy(cfg.a2a[1], DIM)

    curve = []
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        dense, sparse, labels, _ = teacher.batch(batch, [cfg.train_seed, step])
        dense, sparse, labels = torch.from_numpy(dense), torch.from_numpy(sparse), torch.from_numpy(labels)
        emb = torch.stack([tables[t][sparse[:, t]] for t in range(N_SPARSE)], dim=1)
        recv = a2a.forward(emb, f_policy)
        # every node's gradients on its own micro-batch, as each rank computes them
        per_node = [node_gradients(params, dense[m * mb:(m + 1) * mb], recv[m * mb:(m + 1) * mb],
                                   labels[m * mb:(m + 1) * mb], batch) for m in range(n)]
        if cfg.log_every and step % cfg.log_every == 0:
            curve.append([step, sum(p[0].item() for p in per_node)])
        g_params = {name: torch.stack([p[2][i] for p in per_node])
                    for i, name in enumerate(params)}
        g_tables = a2a.backward(torch.cat([p[1] for p in per_node]), b_policy)
        with torch.no_grad():
            for t in range(N_SPARSE):
                tables[t].index_add_(0, sparse[:, t], g_tables[:, t], alpha=-cfg.lr)
            for name in params:
                params[name] -= cfg.lr * allreduce(name, g_params[name])
        allreduce.step_done()
    seconds = time.perf_counter() - t0
    acc, loss = evaluate(params, tables, test)
    return dict(config_record(cfg, n), **{
        "mode": "emulated", "quantized_tensors": sorted(allreduce.policy),
        "replicas_agree": allreduce.replicas_agree,
        "test_accuracy": acc, "test_loss": loss, "train_loss": curve,
        "ms_per_step": 1000.0 * seconds / max(cfg.steps, 1),
    })


def parser():
    ap = training_parser(__doc__)
    ap.add_argument("--nodes", type=int, default=32, help="emulated nodes N (default 32)")
    return ap


def main(argv=None):
    cfg = parser().parse_args(argv)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    print(json.dumps(train(cfg)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
