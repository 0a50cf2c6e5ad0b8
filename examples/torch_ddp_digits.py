#!/usr/bin/python3
"""Train an MLP on scikit-learn's digits with PyTorch DDP, once per gradient-reduction
method, and compare step time, bytes on the wire and test accuracy.

One training run (a worker job), under torchrun or mpirun:

    PYTHONPATH=<build>/bindings/python GLOO_SOCKET_IFNAME=lo \\
    torchrun --standalone --nproc_per_node 4 examples/torch_ddp_digits.py \\
        --backend gloo|qc --hook none|fp16|powersgd|qc-minmax4|qc-qsgd4|qc-onebit

  --backend gloo   DDP over torch's gloo process group
  --backend qc     DDP over qc's torch.distributed backend ("cpu:qc"): DDP's own bucket
                   allreduces are compressed by the backend, policy "allreduce:*" =
                   --qc-policy (default minmax 4-bit, bucket 128, error feedback)
  --hook none      DDP's default allreduce
  --hook fp16      torch's fp16_compress_hook (allreduce of an fp16 copy)
  --hook powersgd  torch's powerSGD_hook, rank 4, error feedback, warm start,
                   start_powerSGD_iter 2 (the least allowed with error feedback)
  --hook qc-minmax4  qc.torch hook: minmax 4-bit, bucket 128, SRA, error feedback
  --hook qc-qsgd4    qc.torch hook: qsgd 4-bit, bucket 128
  --hook qc-onebit   qc.torch hook: onebit + error feedback
  --hook qc-none     qc.torch hook with codec none (the hook's overhead)
  --hook qc-custom   qc.torch hook with --qc-policy
Every qc hook uses qc's "cgx" preset (comm.policy_preset("cgx", base=policy)): biases
(and norms) and every layer under 16 KiB travel uncompressed, the rest with the policy.
Under torchrun the hook's communicator runs over the process group; under mpirun over MPI.

The same run under mpirun (Debian's python with torch 1.13 has no backend "qc"):

    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GLOO_SOCKET_IFNAME=lo \\
    mpirun -np 4 --oversubscribe --mca pml ob1 --mca btl tcp,self \\
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \\
        /usr/bin/python3 examples/torch_ddp_digits.py --hook qc-minmax4 --hidden 1024

(`--method M` is the older spelling: allreduce = gloo/none, fp16, powersgd, qc-* =
gloo with that hook, backend-qc = qc/none.) Rank 0 prints one line per epoch
("epoch E: loss L test acc A% ms/step T") and at the end one "RESULT {json}" line.

Driver (no --backend/--hook/--method and not started by a launcher): runs each method
in its own job (`--launcher mpirun`, default, or `torchrun`) with a timeout, so that a
method that deadlocks (torch 1.13's powerSGD_hook can on CPU/gloo) is recorded as
"deadlock", and prints a table:

    PYTHONPATH=<build>/bindings/python /usr/bin/python3 examples/torch_ddp_digits.py \\
        --np 4 --hidden 1024 --epochs 10            # the issue's 1.1 M-parameter MLP
    PYTHONPATH=<build>/bindings/python /work/venv-torch/bin/python \\
        examples/torch_ddp_digits.py --launcher torchrun \\
        --methods allreduce,fp16,powersgd,backend-qc   # torch >= 2

With mpirun the driver passes the --mca flags above so that qc's MPI traffic goes over
TCP on the loopback, like gloo's (not through shared memory): the same path for every
method, and the one tools/slowlink.sh rate-limits. --mpi-shm keeps OpenMPI's default.

Output columns:
  ms/step   median wall time of a training step (forward, backward with the gradient
            reduction, optimizer step) on rank 0, first 3 steps (warm-up, DDP's bucket
            rebuild) excluded; the processes share this machine's cores.
  wire B/step  bytes one rank sends per step, averaged over the ranks.
            qc hook: measured, qc's stats (wire_bytes, headers included) / steps.
            backend qc: measured, qc.torch.backend_stats() wire_bytes over the
            training steps / steps.
            torch methods: from the hook's format, for a bandwidth-optimal (ring)
            allreduce of P bytes, which sends 2(n-1)/n * P bytes per rank (n ranks):
              allreduce  P = 4 * N                  (N gradient elements, fp32)
              fp16       P = 2 * N
              powersgd   P = 4 * (sum over compressed matrices of (rows + cols) * r
                              + elements of the uncompressed tensors)
                         (steady state; a tensor is viewed as rows = shape[0], cols = the
                         rest, r = min(rows, cols, 4), and compressed when
                         (rows + cols) * r * 2 < rows * cols, torch's rule with
                         min_compression_rate 2; 1-D tensors never are; the first 2
                         steps are a plain allreduce)
            gloo's own headers are not counted.
  test acc  accuracy of the final model on the held-out 20% (360 images).
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import digits_common as dc  # noqa: E402

HOOKS = ["none", "fp16", "powersgd", "qc-minmax4", "qc-qsgd4", "qc-onebit", "qc-none",
         "qc-custom"]
ALL_METHODS = ["allreduce", "fp16", "powersgd", "qc-minmax4", "qc-qsgd4", "qc-onebit"]
TORCH2_METHODS = ["backend-qc"]
EXTRA_METHODS = ["qc-none", "qc-custom"]
KNOWN_METHODS = ALL_METHODS + TORCH2_METHODS + EXTRA_METHODS


def method_parts(method):
    """Driver method name -> (backend, hook)."""
    if method == "allreduce":
        return "gloo", "none"
    if method == "backend-qc":
        return "qc", "none"
    if method.startswith("backend-qc+"):
        return "qc", method[len("backend-qc+"):]
    return "gloo", method


def method_name(backend, hook):
    if backend == "qc":
        return "backend-qc" if hook == "none" else "backend-qc+" + hook
    return "allreduce" if hook == "none" else hook


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["gloo", "qc"],
                    help="worker: the process group's backend (default gloo)")
    ap.add_argument("--hook", choices=HOOKS, help="worker: DDP comm hook (default none)")
    ap.add_argument("--method", choices=KNOWN_METHODS,
                    help="worker: older spelling of --backend/--hook (see above)")
    ap.add_argument("--methods", default=None,
                    help="driver: comma-separated methods (default: the six hook methods, "
                         "and backend-qc when this python's torch >= 2)")
    ap.add_argument("--launcher", choices=["mpirun", "torchrun"], default="mpirun",
                    help="driver: how each method's job starts (default mpirun)")
    ap.add_argument("--np", type=int, default=4, help="driver: processes (default 4)")
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="driver: seconds per method before it counts as a deadlock")
    ap.add_argument("--mpirun", default="mpirun", help="driver: the mpirun to use")
    ap.add_argument("--mpi-shm", action="store_true",
                    help="driver: let OpenMPI use shared memory (default: TCP over lo)")
    ap.add_argument("--mpirun-args", default="", help="driver: extra mpirun arguments")
    ap.add_argument("--json", help="driver: also write the results to this file")
    ap.add_argument("--hidden", type=int, default=1024,
                    help="hidden width of the 64-H-H-10 MLP (1024: 1.13 M parameters)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=None, help="total steps (overrides --epochs)")
    ap.add_argument("--batch", type=int, default=32, help="per-rank batch size")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--powersgd-rank", type=int, default=4)
    ap.add_argument("--qc-policy", default=None,
                    help="backend qc: the allreduce:* policy (default codec=minmax,bits=4,"
                         "bucket_size=128,error_feedback=1); hook qc-custom: its policy "
                         "(default codec=minmax,bits=4), as qc.Policy keywords")
    ap.add_argument("--qc-preset", default="cgx", help="qc hooks: preset, or 'none'")
    ap.add_argument("--adapt-every", type=int, default=0,
                    help="qc hooks: adaptive bit widths (paper 003) every K steps (default 0: off)")
    ap.add_argument("--adapt-alpha", type=float, default=2.0,
                    help="qc hooks: the adaptation's error budget, alpha x the 4-bit error")
    ap.add_argument("--quiet", action="store_true", help="worker: no per-epoch lines")
    return ap.parse_args(argv)


# ---------------------------------------------------------------------------------------
# Worker: one method, one rank
# ---------------------------------------------------------------------------------------

def powersgd_payload(model, rank):
    total = 0
    for p in model.parameters():
        rows = p.shape[0]
        cols = p.numel() // rows
        r = min(rows, cols, rank)
        if p.dim() > 1 and (rows + cols) * r * 2 < rows * cols:
            total += (rows + cols) * r
        else:
            total += p.numel()
    return 4 * total


def code_bits(policy):
    """Bits per value a policy's codes take (scales not counted)."""
    return {"none": 32, "fp16": 16, "bf16": 16, "onebit": 1}.get(policy.codec, policy.bits)


def run_bits_per_value(model, first, reports, steps):
    """The code width averaged over the parameters' values and the run's
    steps: `first` (name -> policy) until the first adaptation, then each
    report's policies until the next."""
    sizes = dict((name, p.numel()) for name, p in model.named_parameters())
    total = sum(sizes.values())

    def mean_bits(policies):
        return sum(code_bits(policies[n]) * sizes[n] for n in sizes) / total

    segments = [(0, first)] + [(r["step"], r["policies"]) for r in reports]
    bits = 0.0
    for i, (start, policies) in enumerate(segments):
        end = segments[i + 1][0] if i + 1 < len(segments) else steps
        bits += mean_bits(policies) * max(end - start, 0)
    return bits / max(steps, 1)


def qc_hook_policy(hook, args):
    import qc
    if hook == "qc-custom":
        return dc.parse_policy(args.qc_policy or "codec=minmax,bits=4")
    return {
        "qc-minmax4": qc.Policy(codec="minmax", bits=4, bucket_size=128,
                                algorithm="sra", error_feedback=True),
        "qc-qsgd4": qc.Policy(codec="qsgd", bits=4, bucket_size=128),
        "qc-onebit": qc.Policy(codec="onebit", error_feedback=True),
        "qc-none": qc.Policy(codec="none"),
    }[hook]


def worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    if args.method:
        backend, hook = method_parts(args.method)
    else:
        backend, hook = args.backend or "gloo", args.hook or "none"
    method = method_name(backend, hook)
    torch.set_num_threads(args.threads)
    if backend == "qc":
        import qc.torch as qct
        qct.set_backend_policy("allreduce:*", dc.parse_policy(
            args.qc_policy or "codec=minmax,bits=4,bucket_size=128,error_feedback=1"))
    rank, world, launcher = dc.init_distributed(backend)

    data = dc.load_digits_tensors(args.seed)
    Xte, yte = data[1], data[3]

    model = dc.make_mlp(args.hidden, args.seed)
    nparams = sum(p.numel() for p in model.parameters())
    ddp = nn.parallel.DistributedDataParallel(model)

    state = None
    wire_formula = None
    if hook == "none":
        wire_formula = dc.ring_allreduce_bytes(4 * nparams, world)
    elif hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        wire_formula = dc.ring_allreduce_bytes(2 * nparams, world)
    elif hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        state = psgd.PowerSGDState(process_group=None,
                                   matrix_approximation_rank=args.powersgd_rank,
                                   start_powerSGD_iter=2, use_error_feedback=True,
                                   warm_start=True, random_seed=args.seed)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        wire_formula = dc.ring_allreduce_bytes(powersgd_payload(model, args.powersgd_rank), world)
    else:
        import qc.torch as qct
        state = qct.QcHookState(ddp, policy=qc_hook_policy(hook, args),
                                preset=None if args.qc_preset == "none" else args.qc_preset,
                                adapt_every=args.adapt_every, adapt={"alpha": args.adapt_alpha})
        first_policies = state.layer_policies()
        ddp.register_comm_hook(state, qct.allreduce_hook)

    def backend_wire():
        return (qct.backend_stats()["wire_bytes"] if backend == "qc" else 0.0,)

    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    run = dc.train_epochs(ddp, model, opt, data, args, world, rank, counters=backend_wire)
    times, losses, step = run["times"], run["losses"], run["steps"]
    epoch_losses = run["epoch_losses"]
    backend_wire_bytes = run["counted"][0]

    ms = dc.median_ms(times)
    if hook.startswith("qc"):
        st = state.stats()
        wire = st["wire_bytes"] / max(st["steps"], 1)
        wire_src = "qc hook stats"
    elif backend == "qc":
        wire = backend_wire_bytes / max(step, 1)
        wire_src = "qc backend stats"
    else:
        wire = wire_formula
        wire_src = "formula"
    acc = dc.accuracy(model, Xte, yte)
    final_train_loss = dc.mean_over_ranks(statistics.mean(losses[-min(10, len(losses)):]))
    rows = dc.gather({"wire": wire, "ms": ms, "acc": acc,
                      "digest": dc.digest(model.parameters())})
    pol = None
    adapt = None
    if hook.startswith("qc"):
        pol = repr(state.comm.get_layer_policy("fc2.weight"))
        adapt = {"every": args.adapt_every, "adaptations": len(state.adapt_reports),
                 "bits_per_value": run_bits_per_value(model, first_policies, state.adapt_reports, step)}
        state.close()
    elif backend == "qc":
        pol = repr(qct.backend_policy("allreduce:float32:1:0"))
    if rank == 0:
        res = {"method": method, "backend": backend, "hook": hook, "launcher": launcher,
               "status": "ok", "ranks": world, "params": nparams, "hidden": args.hidden,
               "steps": step, "ms_per_step": ms,
               "ms_per_step_max_rank": max(r["ms"] for r in rows),
               "wire_bytes_per_step": sum(r["wire"] for r in rows) / world,
               "wire_source": wire_src, "test_accuracy": acc,
               "replicas_agree": len({r["digest"] for r in rows}) == 1,
               "final_train_loss": final_train_loss,  # last 10 steps, mean over ranks
               "first_loss": epoch_losses[0], "last_loss": epoch_losses[-1],
               "epoch_losses": [round(v, 4) for v in epoch_losses],
               "loss_curve": [round(v, 4) for v in losses[::max(1, len(losses) // 10)]]}
        if pol is not None:
            res["policy"] = pol
        if adapt is not None:
            res["adapt"] = adapt
        print("RESULT " + json.dumps(res), flush=True)
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------
# Driver: one job per method
# ---------------------------------------------------------------------------------------

def _torch_major():
    try:
        import torch
        return int(torch.__version__.split(".")[0])
    except (ImportError, ValueError):
        return 0


def driver(args):
    if args.methods is None:
        methods = ALL_METHODS + (TORCH2_METHODS if _torch_major() >= 2 else [])
    else:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in KNOWN_METHODS and not m.startswith("backend-qc+"):
            sys.exit(f"unknown method {m!r}; known: {', '.join(KNOWN_METHODS)}")
    if any(method_parts(m)[0] == "qc" for m in methods):
        dc.compile_qc_backend_first()
    script = os.path.abspath(__file__)
    results = []
    for m in methods:
        job_args = ["--method", m] if m in KNOWN_METHODS else \
            ["--backend", "qc", "--hook", method_parts(m)[1]]
        job_args += ["--hidden", str(args.hidden), "--epochs", str(args.epochs),
                     "--batch", str(args.batch), "--lr", str(args.lr),
                     "--momentum", str(args.momentum), "--seed", str(args.seed),
                     "--threads", str(args.threads), "--powersgd-rank", str(args.powersgd_rank),
                     "--qc-preset", args.qc_preset, "--adapt-every", str(args.adapt_every),
                     "--adapt-alpha", str(args.adapt_alpha)]
        if args.qc_policy:
            job_args += ["--qc-policy", args.qc_policy]
        if args.steps is not None:
            job_args += ["--steps", str(args.steps)]
        cmd = dc.launch_command(args.launcher, args.np, script, job_args, args.mpirun,
                                args.mpi_shm, args.mpirun_args)
        res, out = dc.run_job(m, cmd, dc.launch_env(args.threads), args.timeout, echo=True)
        results.append(res)
        print("RESULT " + json.dumps(res), flush=True)
        if res["status"] != "ok":
            print(f"--- {m}: {res['status']} ({res.get('detail', '')}); output tail:\n"
                  + out[-3000:], flush=True)
    ok = [r for r in results if r["status"] == "ok"]
    params = ok[0]["params"] if ok else None
    path = ("torchrun, gloo over TCP/lo" if args.launcher == "torchrun" else
            f"mpirun, MPI over {'shared memory' if args.mpi_shm else 'TCP/lo'}")
    dc.print_table(f"digits MLP 64-{args.hidden}-{args.hidden}-10"
                   + (f" ({params:,} parameters)" if params else "")
                   + f", DDP, {args.np} processes, batch {args.batch}/rank, "
                   + (f"{args.steps} steps" if args.steps is not None else f"{args.epochs} epochs")
                   + f", seed {args.seed}, {path}", results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)
    # A deadlock is a result, and so is a crash of torch's powerSGD_hook (on CPU/gloo in
    # torch 1.13 it hangs or aborts at large sizes: a limit of the peer, reported in the
    # table); any other method that does not finish is an error.
    bad = [r for r in results if r["status"] != "ok"
           and not (r["status"] == "deadlock" or r["method"] == "powersgd")]
    return 1 if bad else 0


def is_worker(args):
    return bool(args.method or args.backend or args.hook
                or dc.launched_by_torchrun() or dc.launched_by_mpi())


def main(argv=None):
    args = parse_args(argv)
    if is_worker(args):
        try:
            worker(args)
        except SystemExit as e:  # a clear message of ours: no traceback
            dc.fail_worker(f"error: {e}")
        except BaseException:  # noqa: BLE001 - end every rank, not just this one
            import traceback
            dc.fail_worker(traceback.format_exc())
        dc.finish_worker()
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
