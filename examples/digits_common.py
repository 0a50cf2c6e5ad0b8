"""What examples/torch_ddp_digits.py and examples/torch_fsdp_digits.py share: the
digits data and MLP, starting torch.distributed under torchrun or mpirun, gathering
results over torch.distributed, the ring byte formulas, and launching one job
(torchrun or mpirun) with a timeout.

Imported by the examples from their own directory (Python puts a script's
directory first on sys.path); nothing here imports torch at module level, so
the drivers start fast.
"""

import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time

WARMUP = 3  # steps left out of ms/step (first calls, DDP's bucket rebuild)


# ---- process group ------------------------------------------------------------------

def launched_by_torchrun():
    """torchrun (torch.distributed.run) sets these for every worker."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def launched_by_mpi():
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def init_distributed(backend):
    """Start torch.distributed's default group on `backend` ("gloo" or "qc").
    Under torchrun from its environment; under mpirun through
    qc.torch.init_process_group_from_mpi (rendezvous agreed over MPI), or, for
    gloo without qc installed, a file rendezvous over mpi4py. Returns
    (rank, world, launcher)."""
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    name = "gloo"
    if backend == "qc":
        import qc.torch  # noqa: F401  (registers the backend "qc")
        name = "cpu:qc"
    if launched_by_torchrun():
        dist.init_process_group(name)
        return dist.get_rank(), dist.get_world_size(), "torchrun"
    try:
        import qc.torch as qct
    except ImportError:
        if backend == "qc":
            raise
        rank, world = _init_gloo_over_mpi_files()
        return rank, world, "mpirun"
    rank, world = qct.init_process_group_from_mpi(backend=name)
    return rank, world, "mpirun"


def _init_gloo_over_mpi_files():
    """init_process_group over gloo without qc installed (torch-only methods)."""
    import atexit
    import shutil
    import tempfile
    import torch.distributed as dist
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    path = tempfile.mkdtemp(prefix="digits-rdzv-") if comm.rank == 0 else None
    path = comm.bcast(path)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(path, "store"),
                            rank=comm.rank, world_size=comm.size)
    if comm.rank == 0:
        atexit.register(shutil.rmtree, path, True)
    return comm.rank, comm.size


def gather(obj):
    """Every rank's `obj`, on every rank (torch.distributed, no MPI needed)."""
    import torch.distributed as dist
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def mean_over_ranks(value):
    """The mean of a float over the ranks (a float64 allreduce: under backend qc it
    goes to gloo, uncompressed)."""
    import torch
    import torch.distributed as dist
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t[0]) / dist.get_world_size()


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def fail_worker(exc_text):
    """A worker that failed: print why, then end the whole job (under mpirun
    MPI_Abort, else exit 1, which torchrun turns into stopping the others)."""
    sys.stdout.flush()
    print(exc_text, file=sys.stderr, flush=True)
    if launched_by_mpi() and "mpi4py" in sys.modules:
        from mpi4py import MPI
        MPI.COMM_WORLD.Abort(1)
    os._exit(1)


def finish_worker():
    """A worker that succeeded: end the process now, its results written.

    torch 2.15 with the gloo backend can abort a process in its C++ teardown at
    exit ("terminate called without an active exception", no Python frame left):
    2 of 10 runs of plain DDP over gloo on 4 ranks here, without qc in the
    picture. Leaving with os._exit skips that teardown. Under mpirun the
    interpreter's exit stays (mpi4py finalizes MPI there)."""
    if launched_by_mpi():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ---- data and model -----------------------------------------------------------------

def load_digits_tensors(seed):
    """scikit-learn's digits (bundled, no download): 80/20 stratified split."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    X = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int64")
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=seed, stratify=y)
    return (torch.from_numpy(Xtr), torch.from_numpy(Xte),
            torch.from_numpy(ytr), torch.from_numpy(yte))


def make_mlp(hidden, seed):
    """The 64-H-H-10 MLP, same initial weights on every rank (seeded)."""
    import torch
    import torch.nn as nn
    from collections import OrderedDict
    torch.manual_seed(seed)
    return nn.Sequential(OrderedDict(
        fc1=nn.Linear(64, hidden), act1=nn.ReLU(),
        fc2=nn.Linear(hidden, hidden), act2=nn.ReLU(),
        out=nn.Linear(hidden, 10)))


def epoch_batches(n_train, batch, world, rank, seed, epoch):
    """This rank's index slices of one epoch: the same permutation on every rank
    (seeded by the epoch), each global batch split into `world` slices."""
    import torch
    gbatch = batch * world
    g = torch.Generator().manual_seed(seed * 1000 + epoch)
    perm = torch.randperm(n_train, generator=g)
    for b in range(n_train // gbatch):
        yield perm[b * gbatch + rank * batch: b * gbatch + (rank + 1) * batch]


def accuracy(model, X, y):
    import torch
    with torch.no_grad():
        return float((model(X).argmax(dim=1) == y).float().mean())


def train_epochs(step_model, eval_model, opt, data, args, world, rank, counters=None,
                 after_eval=None):
    """The training loop both examples run: epochs of this rank's batches until
    total_steps, cross-entropy through step_model (DDP or the sharded model), the
    test accuracy of eval_model after each epoch (collective under FSDP), a
    progress line per epoch on rank 0. counters() returns byte counters (e.g. qc's
    wire and logical bytes) whose growth over the training steps, evaluation left
    out, is summed; after_eval() runs after each evaluation.
    Returns {"times", "losses", "epoch_losses", "steps", "counted"}."""
    import torch.nn.functional as F
    Xtr, Xte, ytr, yte = data
    per_epoch = len(Xtr) // (args.batch * world)
    total_steps = args.steps if args.steps is not None else args.epochs * per_epoch
    counters = counters or (lambda: ())
    counted = [0.0] * len(counters())
    times, losses, epoch_losses = [], [], []
    step = epoch = 0
    while step < total_steps:
        before = counters()
        ep_times, ep_losses = [], []
        for idx in epoch_batches(len(Xtr), args.batch, world, rank, args.seed, epoch):
            if step >= total_steps:
                break
            x, t = Xtr[idx], ytr[idx]
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = F.cross_entropy(step_model(x), t)
            loss.backward()
            opt.step()
            ep_times.append(time.perf_counter() - t0)
            ep_losses.append(loss.item())
            step += 1
        counted = [c + a - b for c, a, b in zip(counted, counters(), before)]
        times += ep_times
        losses += ep_losses
        mean_loss = mean_over_ranks(statistics.mean(ep_losses))
        epoch_losses.append(mean_loss)
        acc = accuracy(eval_model, Xte, yte)  # collective under FSDP: every rank runs it
        if after_eval is not None:
            after_eval()
        if rank == 0 and not args.quiet:
            print(f"epoch {epoch}: loss {mean_loss:.4f} test acc {100 * acc:.2f}% "
                  f"ms/step {statistics.median(ep_times) * 1e3:.1f}", flush=True)
        epoch += 1
    return {"times": times, "losses": losses, "epoch_losses": epoch_losses, "steps": step,
            "counted": counted}


def median_ms(times):
    measured = times[WARMUP:] if len(times) > WARMUP else times
    return statistics.median(measured) * 1e3 if measured else 0.0


def parse_policy(text):
    """'codec=minmax,bits=4,error_feedback=1' -> qc.Policy."""
    import qc
    kw = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise SystemExit(f"bad policy item {item!r} (expected key=value)")
        k, v = item.split("=", 1)
        kw[k.strip()] = int(v) if v.strip().lstrip("-").isdigit() else v.strip()
    return qc.Policy(**kw)


# ---- bytes on the wire (torch's own collectives) -------------------------------------

def ring_allreduce_bytes(payload, n):
    """Bytes one rank sends in a bandwidth-optimal (ring) allreduce of `payload` bytes."""
    return 2.0 * (n - 1) / n * payload if n > 1 else 0.0


def ring_gather_bytes(payload, n):
    """Bytes one rank sends in a ring reduce-scatter or allgather whose full
    (unsharded) buffer is `payload` bytes."""
    return (n - 1) / n * payload if n > 1 else 0.0


# ---- launching one job ---------------------------------------------------------------

def launch_command(launcher, np_, script, script_args, mpirun="mpirun", mpi_shm=False,
                   mpirun_args=""):
    if launcher == "torchrun":
        return ([sys.executable, "-m", "torch.distributed.run", "--standalone",
                 "--nproc_per_node", str(np_), script] + script_args)
    cmd = [mpirun, "-np", str(np_), "--oversubscribe"]
    if not mpi_shm:
        cmd += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
                "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
    cmd += mpirun_args.split()
    return cmd + [sys.executable, script] + script_args


def launch_env(threads):
    env = dict(os.environ)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("OMP_NUM_THREADS", str(threads))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # the ranks must import the qc this driver would (a build tree on PYTHONPATH)
    return env


def run_job(method, cmd, env, timeout, echo=False):
    """Run one job; returns (result dict, output). A job past `timeout` seconds is
    killed (its process group) and recorded as "deadlock" unless it printed its
    RESULT; one that exits without a RESULT is "failed" with gloo's/qc's message."""
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    hung = False
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        out = ""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, _ = p.communicate(timeout=15)
                break
            except subprocess.TimeoutExpired:
                pass
        out = out or ""
        if "RESULT " not in out:
            return {"method": method, "status": "deadlock",
                    "detail": f"no result after {timeout:.0f} s (killed)",
                    "wall_s": time.time() - t0}, out
    if echo:
        for line in out.splitlines():
            if line.startswith("epoch "):
                print(f"  [{method}] {line}", flush=True)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT "):])
            res["method"] = method
            res["wall_s"] = time.time() - t0
            if hung:
                res["detail"] = f"result printed, but the job hung at exit (killed after {timeout:.0f} s)"
            elif p.returncode != 0:
                res["status"] = "failed"
                res["detail"] = f"exit {p.returncode} after its result"
            return res, out
    errs = [l.strip() for l in out.splitlines() if "Error" in l and "Traceback" not in l]
    why = errs[-1].rsplit("RuntimeError: ", 1)[-1][:200] if errs else ""
    return {"method": method, "status": "failed",
            "detail": f"exit {p.returncode}" + (f": {why}" if why else ""),
            "wall_s": time.time() - t0}, out


def compile_qc_backend_first():
    """Compile the qc torch backend in the driver (once, cached), so that no job's
    timeout or first step pays for it. False if this torch cannot have it."""
    try:
        import qc.torch_backend as qtb
        qtb.load_extension()
        return True
    except Exception as e:  # noqa: BLE001 - the jobs will report it too
        print(f"note: the qc torch backend is not available here: {e}", flush=True)
        return False


def fmt_bytes(b):
    for unit, div in (("MB", 1e6), ("kB", 1e3)):
        if b >= div:
            return f"{b / div:.2f} {unit}"
    return f"{b:.0f} B"


def print_table(title, results, name_width=14):
    print()
    print(title)
    print(f"{'method':<{name_width}} {'ms/step':>9} {'wire B/step/rank':>17} {'test acc':>9}  note")
    for r in results:
        if r["status"] == "ok":
            agree = r.get("replicas_agree", True)
            print(f"{r['method']:<{name_width}} {r['ms_per_step']:9.1f} "
                  f"{fmt_bytes(r['wire_bytes_per_step']):>17} "
                  f"{100 * r['test_accuracy']:8.2f}%  {r['wire_source']}"
                  + ("" if agree else ", REPLICAS DISAGREE"))
        else:
            print(f"{r['method']:<{name_width}} {'-':>9} {'-':>17} {'-':>9}  {r['status']}: "
                  f"{r.get('detail', '')}")
