"""Train the DLRM of paper 000 on real processes, with qc's alltoall and
allreduce over torch.distributed (gloo, through qc.torch.comm_from_process_group):
one rank per node, the hybrid parallelism of emulated.py (hybrid.Layout).

    torchrun --standalone --nproc_per_node 4 distributed.py --steps 300 \\
        --a2a 4,4 --allreduce ring:4:ec

Each rank keeps only its own tables (table t on rank t mod N) and the
replicated dense part. The forward and backward alltoall are the layers
"a2a.forward" and "a2a.backward", each with its own policy (widths f and
b); every dense tensor is a layer of its own name. At the end the owners
broadcast their tables, every rank evaluates, and rank 0 prints one line
"RESULT {json}": the test accuracy, whether the replicas agree (the same
digest of the dense parameters and of the tables on every rank), the loss
curve, the time per step and qc's wire bytes per step.
"""

import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import qc
import qc.torch as qct

from ctr_data import N_SPARSE, TEST_SEED, DataSpec, Teacher
from dlrm_model import init_dense_params, init_tables
from hybrid import (A2A_BACKWARD, A2A_FORWARD, DIM, Layout, config_record,
                    dense_policies, evaluate, node_gradients, row_policy, training_parser)


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def train(cfg):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    comm = qct.comm_from_process_group()
    try:
        return _train(cfg, comm, rank, n)
    finally:
        comm.close()
        dist.destroy_process_group()


def _train(cfg, comm, rank, n):
    spec = DataSpec(max_rows=cfg.max_rows, seed=cfg.data_seed)
    teacher = Teacher(spec)
    gen = torch.Generator().manual_seed(cfg.seed)
    params = init_dense_params(DIM, N_SPARSE, cfg.width, gen)  # the same on every rank
    tables = init_tables(spec.rows, DIM, gen)
    L = Layout(n, cfg.batch)
    mine = L.tables_of(rank)
    mb, batch = L.mb, cfg.batch
    comm.set_layer_policy(A2A_FORWARD, row_policy(cfg.a2a[0], DIM))
    comm.set_layer_policy(A2A_BACKWARD, row_policy(cfg.a2a[1], DIM))
    policies = dense_policies(params, n, cfg.allreduce, cfg.layers)
    for name in params:
        comm.set_layer_policy(name, policies.get(name, row_policy(32, 1)))
    errors = {name: qc.ErrorBuffer(comm, params[name].numel())
              for name, p in policies.items() if p.error_feedback}
    wire0 = comm.stats()["wire_bytes"]
    curve = []
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        dense, sparse, labels, _ = teacher.batch(batch, [cfg.train_seed, step])
        own = slice(rank * mb, (rank + 1) * mb)
        dense, labels = torch.from_numpy(dense[own]), torch.from_numpy(labels[own])
        sparse = torch.from_numpy(sparse)
        # forward alltoall: my tables' lookups for every sample, to their nodes
        look = torch.zeros(batch, L.slots, DIM)
        for k, t in mine:
            look[:, k] = tables[t][sparse[:, t]]
        emb = L.node_receive(comm.alltoall(L.owner_send(look), layer=A2A_FORWARD))
        loss, g_emb, g_params = node_gradients(params, dense, emb, labels, batch)
        if cfg.log_every and step % cfg.log_every == 0:
            total = torch.tensor([loss.item()], dtype=torch.float64)
            dist.all_reduce(total)
            curve.append([step, total.item()])
        # backward alltoall: the lookups' gradients to the tables' owners
        got = L.owner_receive(comm.alltoall(L.node_send(g_emb), layer=A2A_BACKWARD))
        with torch.no_grad():
            for k, t in mine:
                tables[t].index_add_(0, sparse[:, t], got[:, k], alpha=-cfg.lr)
            for (name, p), g in zip(params.items(), g_params):
                p -= cfg.lr * comm.allreduce(g.contiguous(), layer=name, error_buffer=errors.get(name))
    seconds = time.perf_counter() - t0
    wire = comm.stats()["wire_bytes"] - wire0
    # every rank gets every table (fp32) to evaluate
    for t in range(N_SPARSE):
        dist.broadcast(tables[t], src=t % n)
    d, s, lab, _ = teacher.batch(cfg.test_size, TEST_SEED)
    acc, test_loss = evaluate(params, tables, (torch.from_numpy(d), torch.from_numpy(s), torch.from_numpy(lab)))
    mine_digest = [digest(params.values()), digest(tables), acc]
    every = [None] * n
    dist.all_gather_object(every, mine_digest)
    return dict(config_record(cfg, n), **{
        "mode": "distributed", "ranks": n, "quantized_tensors": sorted(policies),
        "replicas_agree": all(e == every[0] for e in every),
        "test_accuracy": acc, "test_loss": test_loss, "train_loss": curve,
        "ms_per_step": 1000.0 * seconds / max(cfg.steps, 1),
        "wire_bytes_per_step": wire / max(cfg.steps, 1),
    }), rank


def parser():
    return training_parser(__doc__)


def main(argv=None):
    cfg = parser().parse_args(argv)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    result, rank = train(cfg)
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
