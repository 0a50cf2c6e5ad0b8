"""1-bit Adam (paper 004 §3; qc.torch.OneBitAdam) against Adam, on the digits
MLP of examples/torch_ddp_digits.py, 4 ranks under torchrun.

Methods (each rank averages over qc, a communicator over torch.distributed's
gloo group):
  adam            Adam on gradients averaged uncompressed (codec none);
  onebit-adam     qc.torch.OneBitAdam: Adam for --warmup steps, then the
                  variance frozen and the momentum averaged with qc's 1-bit
                  SRA and error feedback (worker and server residuals);
  onebit-grads    Adam on gradients averaged with the same 1-bit SRA + EF,
                  no warm-up and no frozen variance: the naive way, which
                  paper 004 says error compensation cannot fix for Adam.

    python examples/torch_onebit_adam.py                  # driver: all three, a table
    torchrun --standalone --nproc_per_node 4 examples/torch_onebit_adam.py --method onebit-adam

A worker prints "RESULT {json}" on rank 0: test accuracy, the replica check,
the mean loss of the first and last epoch, and qc's wire bytes per step of
this rank, in all and in the compressed stage.
"""

import argparse
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import digits_common as dc  # noqa: E402

METHODS = ["adam", "onebit-adam", "onebit-grads"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", choices=METHODS, help="worker: the method (driver: all)")
    ap.add_argument("--np", type=int, default=4, help="driver: ranks (default 4)")
    ap.add_argument("--timeout", type=float, default=900.0, help="driver: seconds per job")
    ap.add_argument("--json", help="driver: also write the results here")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=None, help="total steps (overrides --epochs)")
    ap.add_argument("--batch", type=int, default=32, help="per-rank batch size")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50, help="onebit-adam: warm-up steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quiet", action="store_true")
    return ap.parse_args(argv)


class AveragedAdam:
    """torch.optim.Adam on the gradients averaged over the ranks by one qc
    allreduce of the flattened gradients (layer "grads", whatever its policy)."""

    def __init__(self, model, comm, lr, policy):
        import torch
        import qc
        self.torch, self.comm = torch, comm
        self.params = list(model.parameters())
        self.adam = torch.optim.Adam(self.params, lr=lr)
        comm.set_layer_policy("grads", policy)
        count = sum(p.numel() for p in self.params)
        self.error = qc.ErrorBuffer(comm, count) if policy.error_feedback else None

    def zero_grad(self):
        self.adam.zero_grad()

    def step(self):
        torch = self.torch
        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
        self.comm.allreduce(flat, out=flat, op="avg", layer="grads", error_buffer=self.error)
        offset = 0
        for p in self.params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        self.adam.step()


def worker(args):
    import torch
    import torch.distributed as dist
    import qc
    import qc.torch as qct

    torch.set_num_threads(args.threads)
    rank, world, launcher = dc.init_distributed("gloo")
    comm = qct.comm_from_process_group()
    data = dc.load_digits_tensors(args.seed)
    model = dc.make_mlp(args.hidden, args.seed)
    onebit = qc.Policy(codec="onebit", algorithm="sra", error_feedback=True, min_compress_bytes=0)
    if args.method == "adam":
        opt = AveragedAdam(model, comm, args.lr, qc.Policy(codec="none"))
    elif args.method == "onebit-grads":
        opt = AveragedAdam(model, comm, args.lr, onebit)
    else:
        opt = qct.OneBitAdam(model.parameters(), comm, lr=args.lr, warmup_steps=args.warmup,
                             policy=onebit)
    run = dc.train_epochs(model, model, opt, data, args, world, rank)
    steps = run["steps"]
    stats = comm.stats()
    if args.method == "onebit-adam":
        compressed, warm = opt.compressed_wire_bytes, opt.warmup_wire_bytes
        compressed_steps = max(steps - args.warmup, 0)
    else:
        compressed = warm = None
        compressed_steps = steps if args.method == "onebit-grads" else 0
        compressed = stats["wire_bytes"] if args.method == "onebit-grads" else None
    acc = dc.accuracy(model, data[1], data[3])
    rows = dc.gather({"digest": dc.digest(model.parameters()), "acc": acc})
    res = {"method": args.method, "status": "ok", "ranks": world, "launcher": launcher,
           "steps": steps, "warmup": args.warmup if args.method == "onebit-adam" else 0,
           "params": sum(p.numel() for p in model.parameters()), "test_accuracy": acc,
           "replicas_agree": len({r["digest"] for r in rows}) == 1,
           "first_loss": run["epoch_losses"][0], "last_loss": run["epoch_losses"][-1],
           "wire_bytes_per_step": stats["wire_bytes"] / max(steps, 1),
           "compressed_stage_bytes_per_step":
               None if compressed is None else compressed / max(compressed_steps, 1),
           "warmup_bytes_per_step": None if warm is None else warm / max(args.warmup, 1)}
    comm.close()
    if rank == 0:
        print("RESULT " + json.dumps(res), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def driver(args):
    script = os.path.abspath(__file__)
    results = []
    for m in METHODS:
        job = ["--method", m, "--hidden", str(args.hidden), "--epochs", str(args.epochs),
               "--batch", str(args.batch), "--lr", str(args.lr), "--warmup", str(args.warmup),
               "--seed", str(args.seed), "--threads", str(args.threads)]
        if args.steps is not None:
            job += ["--steps", str(args.steps)]
        if args.quiet:
            job.append("--quiet")
        res, out = dc.run_job(m, dc.launch_command("torchrun", args.np, script, job),
                              dc.launch_env(args.threads), args.timeout, echo=True)
        results.append(res)
        print("RESULT " + json.dumps(res), flush=True)
        if res["status"] != "ok":
            print(out[-3000:], flush=True)
    adam = next((r for r in results if r["method"] == "adam" and r["status"] == "ok"), None)
    print(f"\n{'method':<14}{'test acc':>10}{'vs adam':>9}{'B/step':>10}{'compressed B/step':>19}"
          f"{'fewer bytes':>13}")
    for r in results:
        if r["status"] != "ok":
            print(f"{r['method']:<14} {r['status']}: {r.get('detail', '')}")
            continue
        cb = r.get("compressed_stage_bytes_per_step")
        gain = adam["wire_bytes_per_step"] / cb if (adam and cb) else None
        delta = "" if adam is None else "%+.2f" % (100 * (r["test_accuracy"] - adam["test_accuracy"]))
        cbs = "-" if cb is None else "%.0f" % cb
        gains = "-" if gain is None else "%.1fx" % gain
        print(f"{r['method']:<14}{100 * r['test_accuracy']:>9.2f}%{delta:>9}"
              f"{r['wire_bytes_per_step']:>10.0f}{cbs:>19}{gains:>13}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["status"] == "ok" for r in results) else 1


def main(argv=None):
    args = parse_args(argv)
    if args.method is None:
        return driver(args)
    try:
        worker(args)
    except Exception:  # noqa: BLE001 - reported, then the job ends
        dc.fail_worker(traceback.format_exc())
    dc.finish_worker()
    return 0


if __name__ == "__main__":
    sys.exit(main())
