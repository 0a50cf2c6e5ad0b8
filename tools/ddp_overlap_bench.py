#!/usr/bin/python3
"""DDP step time with qc's asynchronous hook against its synchronous hook.

The qc.torch hook either starts a non-blocking qc request and returns a future that
completes with it (QcHookState(async_op=True), DDP computes the next buckets' gradients
meanwhile) or reduces each bucket before it returns (async_op=False). This trains the
same model on scikit-learn's digits both ways (same seeds, data order, policy) and
reports, per mode: the median step time, the test accuracy, whether the replicas are
bit-identical, and whether both modes end with the same parameters bit for bit.

The model is an MLP 64-H-...-H-10 with several hidden layers and DDP buckets of
--bucket-mb, so that a step has several buckets and the backward pass of the lower
layers can run while the upper layers' gradients are on the wire.

Driver (default: one mpirun per mode and repeat, alternating the modes):

    PYTHONPATH=<build>/bindings/python /usr/bin/python3 tools/ddp_overlap_bench.py \\
        --np 4 --hidden 512 --layers 6 --steps 60
    # on the 1 Gbit/s link (root; see tools/slowlink.sh):
    PYTHONPATH=<build>/bindings/python tools/slowlink.sh --exec -- \\
        /usr/bin/python3 tools/ddp_overlap_bench.py --np 4 --hidden 512 --layers 6

Issue 29's model (backward compute and gradient transfer of the same order on the
1 Gbit/s link): --np 2 --hidden 1024 --layers 6 --batch 16 --bits 8 --bucket-mb 0.25
--init kaiming --lr 0.01 (docs/benchmarks.md).

qc runs over MPI (Comm.from_mpi); the driver passes OpenMPI TCP-on-loopback flags
(--mca pml ob1 --mca btl tcp,self ...), the path tools/slowlink.sh rate-limits, unless
--mpi-shm. DDP's own process group (gloo) only carries its start-up broadcast.
Output: a line "RESULT {json}" per run and a table.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

WARMUP = 5
MODES = ("sync", "async")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=MODES, help="run this mode (under mpirun); else: driver")
    ap.add_argument("--np", type=int, default=4, help="driver: processes")
    ap.add_argument("--repeats", type=int, default=2, help="driver: runs per mode (alternating)")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--mpi-shm", action="store_true", help="driver: OpenMPI's default transports")
    ap.add_argument("--timeout", type=float, default=900.0, help="driver: seconds per run")
    ap.add_argument("--json", help="driver: also write the results here")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6, help="hidden layers")
    ap.add_argument("--bucket-mb", type=float, default=1.0, help="DDP bucket_cap_mb")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=32, help="per-rank batch")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--init", choices=("torch", "kaiming"), default="torch",
                    help="hidden layers' weights: torch's default or Kaiming-normal for ReLU "
                         "(zero biases), which lets a deeper MLP train")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--codec", default="minmax")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--algorithm", default="sra")
    ap.add_argument("--no-ef", action="store_true", help="no error feedback")
    return ap.parse_args(argv)


def worker(args):
    import hashlib
    from collections import OrderedDict

    from mpi4py import MPI
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    import qc
    import qc.torch as qct

    world = MPI.COMM_WORLD
    torch.set_num_threads(1)
    rank, size = qct.init_process_group_from_mpi()

    digits = load_digits()
    X = torch.from_numpy((digits.data / 16.0).astype("float32"))
    y = torch.from_numpy(digits.target.astype("int64"))
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=args.seed, stratify=y)
    gbatch = args.batch * size
    per_epoch = len(Xtr) // gbatch

    torch.manual_seed(args.seed)
    layers = OrderedDict()
    width = 64
    for i in range(args.layers):
        layers[f"fc{i}"] = nn.Linear(width, args.hidden)
        layers[f"act{i}"] = nn.ReLU()
        width = args.hidden
    layers["out"] = nn.Linear(width, 10)
    model = nn.Sequential(layers)
    if args.init == "kaiming":
        for i in range(args.layers):
            nn.init.kaiming_normal_(layers[f"fc{i}"].weight, nonlinearity="relu")
            nn.init.zeros_(layers[f"fc{i}"].bias)
    nparams = sum(p.numel() for p in model.parameters())
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    policy = qc.Policy(codec=args.codec, bits=args.bits, bucket_size=128, algorithm=args.algorithm,
                       error_feedback=not args.no_ef)
    state = qct.QcHookState(ddp, policy=policy, async_op=args.mode == "async")
    ddp.register_comm_hook(state, qct.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    times, step, epoch = [], 0, 0
    while step < args.steps:
        perm = torch.randperm(len(Xtr), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        for b in range(per_epoch):
            if step >= args.steps:
                break
            idx = perm[b * gbatch + rank * args.batch: b * gbatch + (rank + 1) * args.batch]
            world.Barrier()  # every rank starts the step together: the time is the step's
            t0 = time.perf_counter()
            opt.zero_grad()
            F.cross_entropy(ddp(Xtr[idx]), ytr[idx]).backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            step += 1
        epoch += 1

    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    digests = world.gather(h.hexdigest())
    with torch.no_grad():
        acc = float((model(Xte).argmax(dim=1) == yte).float().mean())
    ms = statistics.median(times[WARMUP:]) * 1e3
    ms_all = world.gather(ms)
    st = state.stats()
    buckets = st["calls"] / max(st["steps"], 1)
    state.close()
    if rank == 0:
        print("RESULT " + json.dumps({
            "mode": args.mode, "ranks": size, "params": nparams, "steps": step,
            "buckets_per_step": buckets, "ms_per_step": max(ms_all), "ms_per_step_rank0": ms,
            "wire_bytes_per_step": st["wire_bytes"] / max(st["steps"], 1),
            "test_accuracy": acc, "replicas_identical": len(set(digests)) == 1,
            "digest": digests[0], "policy": repr(policy)}), flush=True)
    world.Barrier()
    import torch.distributed as dist
    dist.destroy_process_group()


def run(args, mode):
    cmd = [args.mpirun, "-np", str(args.np), "--oversubscribe"]
    if not args.mpi_shm:
        cmd += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
                "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
    passed = ["hidden", "layers", "bucket_mb", "steps", "batch", "lr", "init", "seed", "codec",
              "bits", "algorithm"]
    cmd += [sys.executable, os.path.abspath(__file__), "--mode", mode]
    for name in passed:
        cmd += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.no_ef:
        cmd.append("--no-ef")
    env = dict(os.environ)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=args.timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    sys.exit(f"{mode}: no result (exit {proc.returncode})\n{proc.stdout[-4000:]}")


def driver(args):
    results = []
    for _ in range(args.repeats):
        for mode in MODES:
            res = run(args, mode)
            results.append(res)
            print("RESULT " + json.dumps(res), flush=True)
    by = {m: [r for r in results if r["mode"] == m] for m in MODES}
    best = {m: min(r["ms_per_step"] for r in by[m]) for m in MODES}
    same_bits = len({r["digest"] for r in results}) == 1
    r0 = results[0]
    print()
    print(f"digits MLP 64-{args.hidden}x{args.layers}-10 ({r0['params']:,} parameters), "
          f"{args.np} ranks, batch {args.batch}/rank, {args.steps} steps, "
          f"{r0['buckets_per_step']:.0f} buckets/step, {r0['policy']}")
    print(f"{'mode':<6} {'ms/step (each run)':<28} {'best':>8} {'test acc':>9} {'replicas':>10}")
    for m in MODES:
        runs = ", ".join(f"{r['ms_per_step']:.1f}" for r in by[m])
        accs = {r["test_accuracy"] for r in by[m]}
        ident = all(r["replicas_identical"] for r in by[m])
        print(f"{m:<6} {runs:<28} {best[m]:8.1f} {100 * min(accs):8.2f}% "
              f"{'identical' if ident else 'DIFFER':>10}")
    print(f"async / sync (best runs): {best['async'] / best['sync']:.3f}; "
          f"final parameters of every run {'bit-identical' if same_bits else 'DIFFER'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)
    return 0 if same_bits and all(r["replicas_identical"] for r in results) else 1


def main(argv=None):
    args = parse_args(argv)
    if args.mode:
        worker(args)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
