"""One MPI rank of the qc.torch DDP hook test (launched by test_torch_hook.py).

    mpirun -np 3 --oversubscribe /usr/bin/python3 torch_ddp_worker.py [--codec minmax --bits 4 ...]

Checks, on every rank, failing the whole job (MPI Abort, exit 1) on the first miss:
  1. replicas stay bit-identical after every step (SHA-256 of the parameters, gathered);
  2. the mean training loss over all ranks decreases;
  3. the hook counted its steps and qc's stats moved (wire bytes > 0);
  4. checkpoint round trip: the hook state, model and optimizer saved after K steps and
     loaded into a fresh DDP model + fresh QcHookState give bit-identical parameters after
     the next steps to the run that went on (and, with error feedback, a fresh state
     that did not load the residuals does not: they matter);
  5. with codec "none" the hook matches DDP's own allreduce to float rounding;
  6. the asynchronous hook (async_op=True, the default, its future completed by qc's
     request) and the synchronous one (async_op=False) give bit-identical parameters
     after the same steps;
  7. a failed request (the ranks disagree on a policy) reaches DDP through the
     asynchronous hook's future: backward() raises the qc error on every rank.
Rank 0 prints one line "TORCH_DDP_WORKER OK {json}" at the end.
"""

import argparse
import copy
import hashlib
import json
import sys
import traceback
from collections import OrderedDict

from mpi4py import MPI

import torch
import torch.nn as nn
import torch.nn.functional as F

import qc
import qc.torch as qct

WORLD = MPI.COMM_WORLD
IN, HID1, HID2, OUT = 32, 160, 64, 4   # fc1.weight 5120 and fc2.weight 10240 elements are
BATCH, NBATCH = 32, 4                  # over the cgx preset's 16 KiB: compressed; the rest not


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(OrderedDict(
        fc1=nn.Linear(IN, HID1), act1=nn.ReLU(),
        fc2=nn.Linear(HID1, HID2), act2=nn.ReLU(),
        out=nn.Linear(HID2, OUT)))


def make_data(rank: int):
    """Per-rank batches (different on every rank) labelled by one shared teacher."""
    g = torch.Generator().manual_seed(1234)
    teacher = torch.randn(IN, OUT, generator=g)
    g = torch.Generator().manual_seed(100 + rank)
    xs = [torch.randn(BATCH, IN, generator=g) for _ in range(NBATCH)]
    return [(x, (x @ teacher).argmax(dim=1)) for x in xs]


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"rank {WORLD.rank}: {what}")


def check_identical(model: nn.Module, what: str) -> None:
    ds = WORLD.allgather(digest(model))
    check(len(set(ds)) == 1, f"replicas differ {what}: {ds}")


def train_step(ddp, opt, batch) -> float:
    x, y = batch
    opt.zero_grad()
    loss = F.cross_entropy(ddp(x), y)
    loss.backward()
    opt.step()
    return float(loss)


def mean_loss(model: nn.Module, data) -> float:
    with torch.no_grad():
        mine = sum(float(F.cross_entropy(model(x), y)) for x, y in data) / len(data)
    return WORLD.allreduce(mine) / WORLD.size


def build(seed, policy, args, comm=None, async_op=None):
    model = make_model(seed)
    ddp = nn.parallel.DistributedDataParallel(model)
    state = qct.QcHookState(ddp, comm=comm, policy=policy,
                            preset=None if args.no_preset else "cgx",
                            async_op=not args.sync if async_op is None else async_op)
    ddp.register_comm_hook(state, qct.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    return model, ddp, state, opt


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--codec", default="minmax")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--algorithm", default="sra")
    ap.add_argument("--no-ef", action="store_true", help="no error feedback")
    ap.add_argument("--no-preset", action="store_true", help="policy for '*' instead of cgx")
    ap.add_argument("--steps", type=int, default=8, help="steps before the checkpoint")
    ap.add_argument("--after", type=int, default=2, help="steps after the checkpoint")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--rounding", default="nearest", choices=["nearest", "stochastic"])
    ap.add_argument("--sync", action="store_true",
                    help="the synchronous hook (async_op=False) in checks 1-5")
    args = ap.parse_args()

    rank, world = qct.init_process_group_from_mpi()
    torch.set_num_threads(1)
    data = make_data(rank)
    policy = qc.Policy(codec=args.codec, bits=args.bits, bucket_size=128,
                       algorithm=args.algorithm, error_feedback=not args.no_ef,
                       rounding=args.rounding)
    report = {"world": world, "policy": repr(policy)}

    # -- 1-3: train, replicas identical after every step, loss decreases ---------
    model, ddp, state, opt = build(0, policy, args)
    report["layer_policies"] = {n: p.codec for n, p in
                                qct.qc_policies_for_model(state.comm, ddp, policy).items()} \
        if not args.no_preset else None
    check_identical(model, "after DDP construction")
    loss0 = mean_loss(model, data)
    for step in range(args.steps):
        train_step(ddp, opt, data[step % NBATCH])
        check_identical(model, f"after step {step + 1}")
    loss1 = mean_loss(model, data)
    report.update(loss_before=loss0, loss_after=loss1)
    check(loss1 < loss0, f"loss did not decrease: {loss0} -> {loss1}")
    st = state.stats()
    report["stats"] = {k: st[k] for k in ("steps", "calls", "wire_bytes", "logical_bytes")}
    check(st["steps"] == args.steps, f"hook counted {st['steps']} steps, not {args.steps}")
    check(st["wire_bytes"] > 0 and st["calls"] >= args.steps, f"qc stats did not move: {st}")
    if args.codec != "none":
        check(st["wire_bytes"] < st["logical_bytes"] * 2 * (world - 1) / world,
              f"no compression on the wire: {st}")

    # -- 4: checkpoint round trip -----------------------------------------------
    ckpt = {"model": copy.deepcopy(model.state_dict()),
            "opt": copy.deepcopy(opt.state_dict()),
            "hook": state.state_dict()}
    ef = not args.no_ef and args.codec != "none"
    report["residual_norm"] = state.residual_norm()
    images = [b["image"] for b in ckpt["hook"]["buckets"].values()]
    check(len(images) > 0, "no buckets in the hook state")
    if ef:
        check(all(i is not None for i in images), "error feedback on but no residual image")
        check(state.residual_norm() > 0, "error feedback on but residuals are all zero")
    else:
        check(all(i is None for i in images), "residual images without error feedback")
    for i in range(args.after):
        train_step(ddp, opt, data[(args.steps + i) % NBATCH])
    continued = digest(model)
    check_identical(model, "after the continued steps")

    def restored_run(load_hook: bool) -> str:
        m, d, s, o = build(7, policy, args)       # other seed: everything comes from ckpt
        m.load_state_dict(ckpt["model"])
        o.load_state_dict(ckpt["opt"])
        if load_hook:
            s.load_state_dict(ckpt["hook"])
        for i in range(args.after):
            train_step(d, o, data[(args.steps + i) % NBATCH])
        check_identical(m, "after the restored steps")
        out = digest(m)
        s.close()
        return out

    restored = restored_run(load_hook=True)
    if args.rounding == "stochastic":
        # the random bits come from the communicator's call sequence, which the new
        # communicator restarts: the restored run is valid (replicas identical, checked
        # above) but not the same steps
        report["checkpoint"] = "replicas identical (stochastic rounding: not compared)"
    else:
        check(restored == continued, "restored run differs from the continued run")
        report["checkpoint"] = "identical"
    if ef:
        cold = restored_run(load_hook=False)
        check(cold != continued, "dropping the residuals changed nothing: were they used?")

    # -- 5: codec none == DDP's own allreduce (to float rounding) ----------------
    ref = make_model(3)
    ref_ddp = nn.parallel.DistributedDataParallel(ref)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=args.lr)
    none_args = copy.copy(args)
    none_args.no_preset = True
    m, d, s, o = build(3, qc.Policy(codec="none"), none_args, comm=state.comm)
    o = torch.optim.SGD(m.parameters(), lr=args.lr)
    for i in range(3):
        train_step(ref_ddp, ref_opt, data[i % NBATCH])
        train_step(d, o, data[i % NBATCH])
    for (n, a), b in zip(ref.named_parameters(), m.parameters()):
        check(torch.allclose(a, b, rtol=1e-5, atol=1e-6),
              f"codec none differs from DDP's allreduce in {n}: "
              f"{(a - b).abs().max().item()}")
    s.close()

    # -- 6: asynchronous hook == synchronous hook, bit for bit -------------------
    digests = {}
    for async_op in (True, False):
        m, d, s, o = build(11, policy, args, async_op=async_op)
        for i in range(args.after + 2):
            train_step(d, o, data[i % NBATCH])
        check_identical(m, f"after the async_op={async_op} steps")
        digests[async_op] = digest(m)
        s.close()
    check(digests[True] == digests[False],
          "the asynchronous hook's parameters differ from the synchronous hook's")
    report["async_equals_sync"] = True

    # -- 7: a failed request surfaces from the asynchronous hook's future --------
    m, d, s, o = build(13, policy.replace(bits=8 if WORLD.rank == 1 else 4), args,
                       async_op=True)
    x, y = data[0]
    try:
        F.cross_entropy(d(x), y).backward()
    except Exception as e:  # DDP rethrows the future's exception (as RuntimeError in 1.13)
        report["async_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        check("QC_ERROR_MISMATCH" in str(e) or isinstance(e, qc.MismatchError),
              f"backward raised, but not the qc mismatch: {e!r}")
    else:
        check(False, "backward() succeeded although the ranks' policies differ")
    s.close()

    state.close()
    return report


if __name__ == "__main__":
    try:
        rep = main()
    except BaseException:  # noqa: B902 - any failure must end every rank, not hang them
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        WORLD.Abort(1)
    if WORLD.rank == 0:
        print("TORCH_DDP_WORKER OK " + json.dumps(rep), flush=True)
    torch.distributed.destroy_process_group()
