#!/usr/bin/env python3
"""Train the digits MLP with PyTorch FSDP2 (fully_shard) over gloo or over qc's
torch.distributed backend, and report step time, bytes on the wire and test accuracy.

Needs torch >= 2 with torch.distributed.fsdp.fully_shard (FSDP2) and scikit-learn.
One training run (a worker job), under torchrun or mpirun:

    PYTHONPATH=<build>/bindings/python GLOO_SOCKET_IFNAME=lo \\
    /work/venv-torch/bin/torchrun --standalone --nproc_per_node 4 \\
        examples/torch_fsdp_digits.py --backend gloo|qc --hidden 1024 --epochs 5

Every Linear layer is its own FSDP2 unit (fully_shard(layer)), then the root
(fully_shard(model)); parameters, gradients and optimizer state are sharded on dim 0
over the ranks. A step all-gathers each layer's parameters in the forward, again in
the backward (reshard_after_forward), and reduce-scatters its gradients.

  --backend gloo  torch's gloo process group, uncompressed float32
  --backend qc    qc's backend ("cpu:qc"): policy "reduce_scatter:*" = --rs-policy
                  (default minmax 4-bit, bucket 128, error feedback: the gradients),
                  "allgather:*" = --ag-policy (default minmax 8-bit, bucket 128: the
                  parameters). Set with qc.torch.set_backend_policy before init.

Rank 0 prints one line per epoch ("epoch E: loss L test acc A% ms/step T"; the test
accuracy of the sharded model's own forward). At the end every rank gathers the full
parameters (p.full_tensor(), with allgather:* switched to codec none so the gather is
exact), checks that its own shard is in them unchanged, and the ranks compare
digests: "replicas identical" when every rank holds the same full parameters. The
final test accuracy is that of a plain (unsharded) copy of the MLP with those
parameters. Then one "RESULT {json}" line:

  ms/step   median wall time of a training step (forward, backward with the
            gradient reduce-scatter, optimizer step) on rank 0, first 3 steps
            excluded; the processes share this machine's cores.
  wire B/step  bytes one rank sends per training step, averaged over the ranks.
            qc: measured, qc.torch.backend_stats() wire_bytes over the training
            steps (headers included) / steps.
            gloo: computed from FSDP2's collectives. Unit l holds E_l float32
            elements once padded (each parameter's dim 0 rounded up to a multiple
            of n ranks: E_l = sum over its parameters of ceil(rows/n) * n * cols);
            a ring allgather or reduce-scatter of a B-byte full buffer sends
            (n-1)/n * B per rank; a step is two allgathers (forward, backward) and
            one reduce-scatter per unit:  sum over l of 3 * (n-1)/n * 4 * E_l.
            (The root unit holds no parameters of its own; gloo's headers are not
            counted.)
  test acc  the final parameters' accuracy on the held-out 20% (360 images).

Driver (no --backend and not started by a launcher): one job per backend (default
gloo,qc) with a timeout, then a table:

    PYTHONPATH=<build>/bindings/python /work/venv-torch/bin/python \\
        examples/torch_fsdp_digits.py --launcher torchrun --np 4 --hidden 1024 --epochs 5
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import digits_common as dc  # noqa: E402

DEFAULT_RS_POLICY = "codec=minmax,bits=4,bucket_size=128,error_feedback=1"
DEFAULT_AG_POLICY = "codec=minmax,bits=8,bucket_size=128"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["gloo", "qc"],
                    help="worker: the process group's backend")
    ap.add_argument("--backends", default="gloo,qc", help="driver: backends to run")
    ap.add_argument("--launcher", choices=["torchrun", "mpirun"], default="torchrun",
                    help="driver: how each job starts (default torchrun)")
    ap.add_argument("--np", type=int, default=4, help="driver: processes (default 4)")
    ap.add_argument("--timeout", type=float, default=900.0, help="driver: seconds per job")
    ap.add_argument("--mpirun", default="mpirun", help="driver: the mpirun to use")
    ap.add_argument("--json", help="driver: also write the results to this file")
    ap.add_argument("--hidden", type=int, default=1024,
                    help="hidden width of the 64-H-H-10 MLP (1024: 1.13 M parameters)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=None, help="total steps (overrides --epochs)")
    ap.add_argument("--batch", type=int, default=32, help="per-rank batch size")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--rs-policy", default=DEFAULT_RS_POLICY,
                    help="backend qc: reduce_scatter:* policy (qc.Policy keywords)")
    ap.add_argument("--ag-policy", default=DEFAULT_AG_POLICY,
                    help="backend qc: allgather:* policy (qc.Policy keywords)")
    ap.add_argument("--quiet", action="store_true", help="worker: no per-epoch lines")
    return ap.parse_args(argv)


def padded_elements(module, n):
    """Elements of one FSDP2 unit's parameters once each dim 0 is padded to a
    multiple of n (what its allgather / reduce-scatter buffers hold)."""
    total = 0
    for p in module.parameters(recurse=False):
        rows = p.shape[0]
        cols = p.numel() // rows if rows else 0
        total += -(-rows // n) * n * cols
    return total


def worker(args):
    import torch
    import torch.distributed as dist
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        raise SystemExit(f"torch_fsdp_digits.py needs FSDP2 (torch.distributed.fsdp.fully_shard, "
                         f"torch >= 2.4); this is torch {torch.__version__}") from None

    backend = args.backend or "gloo"
    torch.set_num_threads(args.threads)
    if backend == "qc":
        import qc
        import qc.torch as qct
        qct.set_backend_policy("reduce_scatter:*", dc.parse_policy(args.rs_policy))
        qct.set_backend_policy("allgather:*", dc.parse_policy(args.ag_policy))
    rank, world, launcher = dc.init_distributed(backend)

    data = dc.load_digits_tensors(args.seed)
    Xte, yte = data[1], data[3]

    model = dc.make_mlp(args.hidden, args.seed)
    nparams = sum(p.numel() for p in model.parameters())
    units = [m for m in model if isinstance(m, torch.nn.Linear)]
    wire_formula = sum(3 * dc.ring_gather_bytes(4 * padded_elements(u, world), world)
                       for u in units)
    mesh = init_device_mesh("cpu", (world,))
    for unit in units:
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)

    def backend_counters():
        if backend != "qc":
            return 0.0, 0.0
        st = qct.backend_stats()
        return st["wire_bytes"], st["logical_bytes"]

    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    # The evaluation's allgathers are not training sites: restart the counters.
    run = dc.train_epochs(model, model, opt, data, args, world, rank, counters=backend_counters,
                          after_eval=qct.reset_call_sites if backend == "qc" else None)
    times, epoch_losses, step = run["times"], run["epoch_losses"], run["steps"]
    wire_bytes, logical_bytes = run["counted"]

    # Full parameters, gathered exactly (the training's 8-bit allgather policy would
    # hand back decoded values).
    if backend == "qc":
        qct.set_backend_policy("allgather:*", qc.Policy(codec="none"))
    names = [n for n, _ in model.named_parameters()]
    full, own_shard_exact = {}, True
    for name, p in model.named_parameters():
        f = p.full_tensor().detach().clone()
        local = p.to_local().detach()
        rows = -(-p.shape[0] // world)
        lo = min(rank * rows, p.shape[0])
        own_shard_exact &= bool(torch.equal(f[lo:lo + local.shape[0]], local))
        full[name] = f
    plain = dc.make_mlp(args.hidden, args.seed)
    plain.load_state_dict(full)
    acc = dc.accuracy(plain, Xte, yte)
    ms = dc.median_ms(times)
    if backend == "qc":
        wire, wire_src = wire_bytes / max(step, 1), "qc backend stats"
    else:
        wire, wire_src = wire_formula, "formula"
    rows = dc.gather({"wire": wire, "ms": ms, "acc": acc, "exact": own_shard_exact,
                      "digest": dc.digest(full[n] for n in names)})
    identical = len({r["digest"] for r in rows}) == 1
    if rank == 0:
        print("replicas identical" if identical else "REPLICAS DIFFER", flush=True)
        res = {"method": "fsdp-" + backend, "backend": backend, "launcher": launcher,
               "status": "ok", "ranks": world, "params": nparams, "hidden": args.hidden,
               "steps": step, "ms_per_step": ms,
               "ms_per_step_max_rank": max(r["ms"] for r in rows),
               "wire_bytes_per_step": sum(r["wire"] for r in rows) / world,
               "wire_source": wire_src, "wire_formula_uncompressed": wire_formula,
               "test_accuracy": acc, "replicas_agree": identical,
               "own_shards_exact": all(r["exact"] for r in rows),
               "first_loss": epoch_losses[0], "last_loss": epoch_losses[-1],
               "epoch_losses": [round(v, 4) for v in epoch_losses]}
        if backend == "qc":
            res["qc_logical_bytes_per_step"] = logical_bytes / max(step, 1)
            res["policies"] = {"reduce_scatter": args.rs_policy, "allgather": args.ag_policy}
        print("RESULT " + json.dumps(res), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def driver(args):
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in ("gloo", "qc"):
            sys.exit(f"unknown backend {b!r}; known: gloo, qc")
    if "qc" in backends:
        dc.compile_qc_backend_first()
    script = os.path.abspath(__file__)
    results = []
    for b in backends:
        job_args = ["--backend", b, "--hidden", str(args.hidden), "--epochs", str(args.epochs),
                    "--batch", str(args.batch), "--lr", str(args.lr),
                    "--momentum", str(args.momentum), "--seed", str(args.seed),
                    "--threads", str(args.threads),
                    "--rs-policy", args.rs_policy, "--ag-policy", args.ag_policy]
        if args.steps is not None:
            job_args += ["--steps", str(args.steps)]
        cmd = dc.launch_command(args.launcher, args.np, script, job_args, args.mpirun)
        res, out = dc.run_job("fsdp-" + b, cmd, dc.launch_env(args.threads), args.timeout,
                              echo=True)
        results.append(res)
        print("RESULT " + json.dumps(res), flush=True)
        if res["status"] != "ok":
            print(f"--- fsdp-{b}: {res['status']} ({res.get('detail', '')}); output tail:\n"
                  + out[-3000:], flush=True)
    ok = [r for r in results if r["status"] == "ok"]
    params = ok[0]["params"] if ok else None
    dc.print_table(f"digits MLP 64-{args.hidden}-{args.hidden}-10"
                   + (f" ({params:,} parameters)" if params else "")
                   + f", FSDP2, {args.np} processes ({args.launcher}), batch {args.batch}/rank, "
                   + (f"{args.steps} steps" if args.steps is not None else f"{args.epochs} epochs")
                   + f", seed {args.seed}", results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)
    return 0 if len(ok) == len(results) and all(r["replicas_agree"] for r in ok) else 1


def main(argv=None):
    args = parse_args(argv)
    if args.backend or dc.launched_by_torchrun() or dc.launched_by_mpi():
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
