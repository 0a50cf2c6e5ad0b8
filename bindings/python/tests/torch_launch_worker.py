"""One process of a torchrun-style launch (launched by test_torch_launch.py).

    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python3 torch_launch_worker.py

No mpirun: torch.distributed's group spans the n processes (gloo, env://).
QcHookState then builds its communicator over that process group (qc's bytes
over gloo) and trains; with --mpi-world it is given MPI's world instead, in
which each process is alone, and must refuse. The worker prints one line:

    LAUNCH_WORKER REFUSED <exception class> <message>   the hook refused
    LAUNCH_WORKER ACCEPTED <digest after 3 steps> <comm> it trained

and exits 0 either way, so the test judges the lines, not the exit status. It
leaves with os._exit once its line is out: the shutdown of an MPI singleton
(mpi4py's MPI_Finalize at exit) and of gloo after a peer left sometimes hangs
on a loaded machine (seen under ctest -j2), which is neither qc's nor the
test's business.

With --fake-peer it instead calls qc.torch.check_ranks_match(collective=True) with
a stand-in communicator that is "rank 0 of n" on every process: rank 0's own numbers
match, the others' do not, and every rank must refuse (the check is collective).
"""

import hashlib
import os
import sys
import types

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import qc
import qc.torch as qct


def main() -> int:
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank = dist.get_rank()
    if "--fake-peer" in sys.argv:
        stand_in = types.SimpleNamespace(rank=0, size=dist.get_world_size())
        try:
            qct.check_ranks_match(stand_in, collective=True)
            print("LAUNCH_WORKER ACCEPTED fake-peer", flush=True)
        except qc.Error as e:
            print(f"LAUNCH_WORKER REFUSED {type(e).__name__} {e}", flush=True)
        return 0
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(16, 4))
    kwargs = {}
    if "--mpi-world" in sys.argv:
        from mpi4py import MPI  # each process alone in MPI's world: must be refused

        kwargs["mpi_comm"] = MPI.COMM_WORLD
    policy = qc.Policy(codec="none")
    if "--compress" in sys.argv:
        policy = qc.Policy(codec="minmax", bits=4, error_feedback=True, min_compress_bytes=0)
    try:
        state = qct.QcHookState(model, policy=policy, preset=None, timeout=20.0, **kwargs)
    except qc.Error as e:
        print(f"LAUNCH_WORKER REFUSED {type(e).__name__} {e}", flush=True)
        return 0
    model.register_comm_hook(state, qct.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)  # different data per rank
    for _ in range(3):
        x = torch.randn(8, 16, generator=g)
        opt.zero_grad()
        F.mse_loss(model(x), torch.zeros(8, 4)).backward()
        opt.step()
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    print(f"LAUNCH_WORKER ACCEPTED {h.hexdigest()[:16]} {state.comm!r}", flush=True)
    state.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
