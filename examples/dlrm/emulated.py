"""Train the DLRM of paper 000 on N emulated nodes in one process, with qc's
quantized alltoall and allreduce emulated bit for bit (qc.emulate_alltoall,
qc.emulate_allreduce: what a real N-rank run of the same policies computes).

Hybrid parallelism as in the paper (§4): table t lives on node t mod N and
looks up its feature for the whole global batch; the lookups travel to the
node that owns each sample (the forward alltoall, width f); every node
computes the dense part's gradients on its own micro-batch (one vmap for all
nodes); the gradients of the lookups travel back to the tables' owners (the
backward alltoall, width b), which update their rows; the dense gradients
are summed by an allreduce (ring or recursive doubling in groups of 8, width
w, with or without error compensation, EC). Quantization is the paper's:
unsigned integers on a min-max grid per row, rounded to nearest even (qc's
minmax codec, one bucket per embedding row or weight row).

    python emulated.py --nodes 32 --steps 300 --a2a 4,2 --allreduce ring:4:ec --seed 1

prints one JSON line: the configuration, the test accuracy and loss, the
train loss curve (every --log-every steps) and the time per step.
"""

import argparse
import json
import math
import sys
import time

import numpy as np
import torch
from torch.func import grad, vmap

import qc

from ctr_data import N_SPARSE, TEST_SEED, DataSpec, Teacher
from dlrm_model import dense_forward, init_dense_params, init_tables, loss_sum

DIM = 16


def parse_a2a(text):
    """'f,b' -> (f, b) widths of the forward and backward alltoall; 32 = fp32."""
    f, b = (int(x) for x in text.split(","))
    for w in (f, b):
        if w not in (1, 2, 3, 4, 5, 6, 7, 8, 32):
            raise argparse.ArgumentTypeError(f"alltoall width {w}: 1..8 or 32 (fp32)")
    return f, b


def parse_allreduce(text):
    """'fp32' or 'ALGO:BITS[:ec]' with ALGO ring or rd."""
    if text == "fp32":
        return None
    parts = text.split(":")
    if len(parts) not in (2, 3) or parts[0] not in ("ring", "rd") or (len(parts) == 3 and parts[2] != "ec"):
        raise argparse.ArgumentTypeError(f"allreduce {text!r}: fp32 or ring|rd:BITS[:ec]")
    return {"algorithm": "ring" if parts[0] == "ring" else "recursive_doubling",
            "bits": int(parts[1]), "ec": len(parts) == 3}


def row_policy(bits, row, algorithm="ring", ec=False):
    """The paper's quantizer: minmax on rows of `row` values, nearest even,
    always compressed (min_compress_bytes 0); recursive doubling in groups of 8."""
    return qc.Policy(codec="minmax", bits=bits, bucket_size=row, rounding="nearest",
                     algorithm=algorithm, error_feedback=ec, group_size=8, min_compress_bytes=0)


class Alltoall:
    """The lookups' exchange between table owners and sample owners, as
    qc.emulate_alltoall blocks: owner o's block for node m holds o's tables
    (slot k = table t // N for t = k N + o, zero padded to the same count on
    every node) for m's samples, table by table, one embedding row (DIM
    values, one minmax bucket) after the other."""

    def __init__(self, nodes, batch):
        self.n = nodes
        self.mb = batch // nodes
        self.slots = math.ceil(N_SPARSE / nodes)
        self.calls = 0

    def _pad(self, x):  # B x 26 x d -> N(m) x mb x slots x N(o) x d
        pad = torch.zeros(x.shape[0], self.slots * self.n, DIM, dtype=x.dtype)
        pad[:, :N_SPARSE] = x
        return pad.view(self.n, self.mb, self.slots, self.n, DIM)

    def _unpad(self, y):  # N(m) x mb x slots x N(o) x d -> B x 26 x d
        return y.reshape(self.n * self.mb, self.slots * self.n, DIM)[:, :N_SPARSE]

    def _run(self, send, policy):
        arrays = [send[i].reshape(-1).contiguous().numpy() for i in range(self.n)]
        out = qc.emulate_alltoall(arrays, policy, call_index=self.calls)
        self.calls += 1
        return torch.from_numpy(np.stack(out)).view(self.n, self.n, self.slots, self.mb, DIM)

    @staticmethod
    def policy(bits):
        """None for fp32 (nothing to emulate), else the row-wise quantizer."""
        return None if bits == 32 else row_policy(bits, DIM)

    def forward(self, emb, policy):
        """emb: B x 26 x d, looked up by the owners; returns what the sample
        owners receive."""
        if policy is None:
            return emb
        send = self._pad(emb).permute(3, 0, 2, 1, 4)  # o, m, slot, sample, d
        recv = self._run(send, policy)                 # m, o, slot, sample, d
        return self._unpad(recv.permute(0, 3, 2, 1, 4))

    def backward(self, grads, policy):
        """grads: B x 26 x d on the sample owners; returns what the table
        owners receive."""
        if policy is None:
            return grads
        send = self._pad(grads).permute(0, 3, 2, 1, 4)  # m, o, slot, sample, d
        recv = self._run(send, policy)                   # o, m, slot, sample, d
        return self._unpad(recv.permute(1, 3, 2, 0, 4))


class Allreduce:
    """The dense gradients' sum over the nodes, one qc.emulate_allreduce per
    tensor. `layers` "paper" quantizes only the layers whose first weight
    dimension divides by N (the paper's emulation could only split those),
    the others are summed in fp32; "all" quantizes every tensor."""

    def __init__(self, spec, nodes, params, layers):
        self.spec = spec
        self.n = nodes
        self.policy = {}
        self.errors = {}
        self.replicas_agree = True
        if spec is None:
            return
        for name, p in params.items():
            layer = name.rsplit(".", 1)[0]
            out_dim = params[layer + ".weight"].shape[0]
            if layers == "paper" and out_dim % nodes != 0:
                continue
            row = p.shape[1] if p.dim() == 2 else p.shape[0]
            self.policy[name] = row_policy(spec["bits"], row, spec["algorithm"], spec["ec"])
            if spec["ec"]:
                self.errors[name] = [qc.ErrorBuffer(None, p.numel()) for _ in range(nodes)]
        self.calls = 0

    def quantized(self):
        return sorted(self.policy)

    def __call__(self, name, per_node):
        """per_node: N x shape, each node's gradient; returns the sum."""
        if name not in self.policy:
            return per_node.sum(0)
        arrays = [per_node[i].reshape(-1).contiguous().numpy() for i in range(self.n)]
        out = qc.emulate_allreduce(arrays, self.policy[name], error_buffers=self.errors.get(name),
                                   layer=name, call_index=self.calls)
        # an allreduce leaves the same sum on every node: the replicas stay equal
        if not all(np.array_equal(o, out[0]) for o in out[1:]):
            self.replicas_agree = False
        return torch.from_numpy(out[0]).view(per_node.shape[1:])

    def step_done(self):
        self.calls += 1


def evaluate(params, tables, test):
    dense, sparse, labels = test
    with torch.no_grad():
        emb = torch.stack([tables[t][sparse[:, t]] for t in range(N_SPARSE)], dim=1)
        logits = dense_forward(params, dense, emb)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels).item()
        acc = ((logits > 0).float() == labels).float().mean().item()
    return acc, loss


def train(cfg):
    spec = DataSpec(max_rows=cfg.max_rows, seed=cfg.data_seed)
    teacher = Teacher(spec)
    d, s, l, _ = teacher.batch(cfg.test_size, TEST_SEED)
    test = (torch.from_numpy(d), torch.from_numpy(s), torch.from_numpy(l))
    gen = torch.Generator().manual_seed(cfg.seed)
    params = init_dense_params(DIM, N_SPARSE, cfg.width, gen)
    tables = init_tables(spec.rows, DIM, gen)
    n, batch = cfg.nodes, cfg.batch
    if batch % n:
        raise SystemExit(f"--batch {batch} is not a multiple of --nodes {n}")
    mb = batch // n
    a2a = Alltoall(n, batch)
    allreduce = Allreduce(cfg.allreduce, n, params, cfg.layers)

    def node_loss(p, dense, emb, labels):
        return loss_sum(p, dense, emb, labels) / batch  # the node's share of the global mean

    node_grads = vmap(grad(node_loss, argnums=(0, 2)), in_dims=(None, 0, 0, 0))
    curve = []
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        dense, sparse, labels, _ = teacher.batch(batch, [cfg.train_seed, step])
        dense, sparse, labels = torch.from_numpy(dense), torch.from_numpy(sparse), torch.from_numpy(labels)
        emb = torch.stack([tables[t][sparse[:, t]] for t in range(N_SPARSE)], dim=1)
        recv = a2a.forward(emb, Alltoall.policy(cfg.a2a[0]))
        g_params, g_emb = node_grads(params, dense.view(n, mb, -1), recv.view(n, mb, N_SPARSE, DIM),
                                     labels.view(n, mb))
        if cfg.log_every and step % cfg.log_every == 0:
            with torch.no_grad():
                curve.append([step, loss_sum(params, dense, recv, labels).item() / batch])
        g_tables = a2a.backward(g_emb.reshape(batch, N_SPARSE, DIM), Alltoall.policy(cfg.a2a[1]))
        with torch.no_grad():
            for t in range(N_SPARSE):
                tables[t].index_add_(0, sparse[:, t], g_tables[:, t], alpha=-cfg.lr)
            for name in params:
                params[name] -= cfg.lr * allreduce(name, g_params[name])
        allreduce.step_done()
    seconds = time.perf_counter() - t0
    acc, loss = evaluate(params, tables, test)
    return {
        "nodes": n, "batch": batch, "steps": cfg.steps, "lr": cfg.lr, "width": cfg.width,
        "max_rows": cfg.max_rows, "seed": cfg.seed, "data_seed": cfg.data_seed,
        "a2a": list(cfg.a2a), "allreduce": cfg.allreduce, "layers": cfg.layers,
        "quantized_tensors": allreduce.quantized(),
        "replicas_agree": allreduce.replicas_agree,
        "test_accuracy": acc, "test_loss": loss, "train_loss": curve,
        "ms_per_step": 1000.0 * seconds / max(cfg.steps, 1),
    }


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=32, help="emulated nodes N (default 32)")
    ap.add_argument("--batch", type=int, default=1024, help="global batch (paper: 1024)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.5, help="SGD learning rate (default 0.5)")
    ap.add_argument("--width", type=float, default=1.0,
                    help="hidden layer widths relative to the paper's Table 1 (default 1.0)")
    ap.add_argument("--max-rows", type=int, default=DataSpec.max_rows)
    ap.add_argument("--a2a", type=parse_a2a, default=(32, 32),
                    help="forward,backward alltoall widths, 32 = fp32 (default 32,32)")
    ap.add_argument("--allreduce", type=parse_allreduce, default=None,
                    help="fp32 (default) or ring|rd:BITS[:ec]")
    ap.add_argument("--layers", choices=("paper", "all"), default="paper",
                    help="quantize the layers whose first dimension divides by N (paper) or all")
    ap.add_argument("--seed", type=int, default=1, help="model initialisation seed")
    ap.add_argument("--train-seed", type=int, default=1, help="training data order")
    ap.add_argument("--data-seed", type=int, default=DataSpec.seed, help="the teacher")
    ap.add_argument("--test-size", type=int, default=200000)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    return ap


def main(argv=None):
    cfg = parser().parse_args(argv)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    print(json.dumps(train(cfg)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
