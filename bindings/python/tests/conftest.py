"""Shared helpers for the qc pytest suite (run with the build tree's package
on PYTHONPATH: PYTHONPATH=<build>/bindings/python /usr/bin/python3 -m pytest)."""

import threading

import pytest


def run_ranks(comms, fn, timeout=60.0):
    """Run fn(comm) on one thread per rank; return the results in rank order.
    An exception on a rank is returned (not raised) as that rank's result."""
    results = [None] * len(comms)

    def body(i, c):
        try:
            results[i] = fn(c)
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            results[i] = e

    threads = [threading.Thread(target=body, args=(i, c), daemon=True) for i, c in enumerate(comms)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a rank did not finish in time"
    return results


def check_ok(results):
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


@pytest.fixture
def local3():
    import qc

    comms = qc.Comm.local(3, timeout=30.0)
    yield comms
    for c in comms:
        c.close()


def qc_has_mpi_transport(world, timeout=60.0):
    """Whether this libqc has the MPI transport (a communicator over mpi4py's
    `world` can be made). Collective over `world`."""
    import qc

    try:
        c = qc.Comm.from_mpi(world, timeout=timeout)
    except qc.UnsupportedError:
        return False
    c.close()
    return True


# ---- torchrun launches (test_torch_backend.py, test_torch_examples.py) ----

def torchrun_command():
    """torchrun next to this interpreter, else `python -m torch.distributed.run`;
    None without torch.distributed.run."""
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("torchrun")
    if exe.exists():
        return [str(exe)]
    try:
        import torch.distributed.run  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "torch.distributed.run"]


def torchrun_env(keep=("QC_DEBUG",), **extra):
    """The environment of a torchrun launch: the package that this test imports
    first on PYTHONPATH, gloo on the loopback, one thread per process, and no
    QC_* variable but those in `keep` (the launched code sets its own policies)."""
    import os

    import qc

    qc_root = os.path.dirname(os.path.dirname(os.path.abspath(qc.__file__)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("QC_") or k in keep}
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([qc_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
               **extra)
    return env


@pytest.fixture(scope="module")
def backend_compiled():
    """qc.torch_backend with its C++ extension compiled (once per test module)."""
    import qc.torch_backend as qtb

    try:
        qtb.load_extension()
    except Exception as e:  # a missing compiler or headers: say so
        pytest.fail(f"compiling the qc torch backend failed: {e}")
    return qtb


def torchrun_result(script_args, nproc=4, timeout=300, env=None):
    """Run `torchrun --standalone --nproc_per_node nproc *script_args`; the one
    "RESULT {json}" its rank 0 printed, as a dict, and the output. Skips
    without torchrun; fails on a non-zero exit or not exactly one RESULT."""
    import json
    import subprocess

    launcher = torchrun_command()
    if launcher is None:
        pytest.skip("torchrun is not available")
    cmd = launcher + ["--standalone", "--nproc_per_node", str(nproc)] + [str(a) for a in script_args]
    proc = subprocess.run(cmd, env=env or torchrun_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-8000:]}"
    rows = [json.loads(l[len("RESULT "):]) for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert len(rows) == 1, proc.stdout[-4000:]
    return rows[0], proc.stdout
