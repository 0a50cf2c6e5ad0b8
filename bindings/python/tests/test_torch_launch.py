"""qc.torch under a torchrun-style launch, and its refusal of a communicator whose
ranks are not torch.distributed's.

Launched the way torchrun launches (RANK, WORLD_SIZE, MASTER_ADDR; no mpirun),
QcHookState builds its communicator over torch.distributed's process group (qc's
bytes over gloo, issue 32 item 4). Given MPI's world there instead, every process
is alone in it while DDP's process group spans all of them: the hook would then
"average" each gradient with itself and the replicas drift apart with no error
(issue 28, item 7). The hook must refuse with qc.MismatchError naming both ranks
and sizes and what to do.

  - test_torchrun_style_launch_reduces_over_the_process_group: three processes
    with torchrun's environment, gloo, no mpirun: they train, replicas identical;
  - test_torchrun_style_launch_with_mpi_world_is_refused: two such processes
    handed mpi_comm=MPI.COMM_WORLD;
  - the unit tests: one process, a one-rank gloo group, and a qc
    communicator (or a fake one) whose rank/size differ.

Labels python;torch (no mpirun; the launch test needs mpi4py and skips without).
"""

import copy
import os
import pickle
import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
qc = pytest.importorskip("qc")
if not hasattr(qc, "Comm"):
    pytest.skip("the qc extension is not built", allow_module_level=True)
import torch.distributed as dist  # noqa: E402

import qc.torch as qct  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKER = HERE / "torch_launch_worker.py"
PYTHON = sys.executable or "/usr/bin/python3"
BAD_VALUE = qc.InvalidArgumentError
BAD_TYPE = getattr(qc, "ArgumentTypeError", type("_Missing", (Exception,), {}))


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_env(rank, world, port):
    # Nothing of an mpirun launch: the processes must be MPI singletons.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "MPI_LOCALRANK"))}
    qc_root = os.path.dirname(os.path.dirname(os.path.abspath(qc.__file__)))
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
               LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([qc_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return env


def _launch(world, *args):
    """Run WORKER as torchrun would, world processes; their outputs."""
    port = _free_port()
    procs = [subprocess.Popen([PYTHON, str(WORKER), *args], env=_launch_env(r, world, port), cwd=str(HERE),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
             for r in range(world)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=180)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("the torchrun-style launch did not finish in 180 s:\n" +
                    "\n".join(p.communicate()[0][-2000:] for p in procs))
    return outs


def _result(out, rank):
    lines = [l for l in out.splitlines() if l.startswith("LAUNCH_WORKER ")]
    assert lines, f"rank {rank} printed no result:\n{out[-3000:]}"
    return lines[-1]


def test_torchrun_style_launch_reduces_over_the_process_group():
    """No MPI and no comm=: the hook's communicator is built over torch.distributed's
    group (qc.torch.comm_from_process_group), so every replica ends identical."""
    for args in ((), ("--compress",)):
        outs = _launch(3, *args)
        lines = [_result(out, rank) for rank, out in enumerate(outs)]
        for rank, line in enumerate(lines):
            assert line.startswith("LAUNCH_WORKER ACCEPTED"), f"rank {rank}: {outs[rank][-3000:]}"
            assert f"callbacks rank {rank} of 3" in line, line
        digests = {line.split()[2] for line in lines}
        assert len(digests) == 1, lines  # bit-identical replicas


def test_torchrun_style_launch_with_mpi_world_is_refused():
    pytest.importorskip("mpi4py")
    outs = _launch(2, "--mpi-world")
    if any("REFUSED UnsupportedError" in o for o in outs):
        pytest.skip("qc was built without the MPI transport")
    for rank, out in enumerate(outs):
        line = _result(out, rank)
        assert line.startswith("LAUNCH_WORKER REFUSED MismatchError"), f"rank {rank}: {out[-3000:]}"
        # names both sides and the way out
        assert "rank 0 of 1" in line and f"rank {rank} of 2" in line, line
        assert "mpirun" in line and "comm=" in line, line


def test_every_rank_refuses_when_one_differs():
    """Rank 0's own numbers match; rank 1's do not. Both refuse (a gloo all-gather),
    so no rank goes on to wait for a peer that left."""
    outs = _launch(2, "--fake-peer")
    assert _result(outs[1], 1).startswith("LAUNCH_WORKER REFUSED MismatchError"), outs[1][-3000:]
    line = _result(outs[0], 0)
    assert line.startswith("LAUNCH_WORKER REFUSED MismatchError"), outs[0][-3000:]
    assert "torch rank 1's qc communicator is rank 0 of 2" in line, line


@pytest.fixture
def one_rank_group(tmp_path, monkeypatch):
    """torch.distributed with a one-process gloo group (file store)."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _ddp():
    torch.manual_seed(0)
    return torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))


def test_hook_refuses_a_communicator_of_another_size(one_rank_group):
    comms = qc.Comm.local(2)
    try:
        with pytest.raises(qc.MismatchError) as info:
            qct.QcHookState(_ddp(), comm=comms[1], policy=qc.Policy(codec="none"))
        text = str(info.value)
        assert "rank 1 of 2" in text and "rank 0 of 1" in text, text
        assert not comms[1].closed  # a communicator passed in stays the caller's
    finally:
        for c in comms:
            c.close()


def test_hook_accepts_a_matching_communicator(one_rank_group):
    (c,) = qc.Comm.local(1)
    with c, qct.QcHookState(_ddp(), comm=c, policy=qc.Policy(codec="none")) as state:
        assert state.comm is c


def test_check_with_a_fake_communicator(one_rank_group):
    check = getattr(qct, "check_ranks_match", None)
    assert check is not None, "qc.torch.check_ranks_match is missing"
    check(types.SimpleNamespace(rank=0, size=1))  # matches: no exception
    for rank, size in ((0, 3), (1, 1), (2, 4)):
        with pytest.raises(qc.MismatchError, match=rf"rank {rank} of {size}.*rank 0 of 1"):
            check(types.SimpleNamespace(rank=rank, size=size))


def test_hook_adapts_bit_widths_every_k_steps(one_rank_group):
    """adapt_every=K: comm.adapt_policies after steps K, 2K, ...; the widths it
    chooses apply from the next step. allowed_bits=[8] makes the choice known."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    (c,) = qc.Comm.local(1)
    policy = qc.Policy(codec="minmax", bits=4, bucket_size=16, min_compress_bytes=0)
    with c, qct.QcHookState(ddp, comm=c, policy=policy, preset=None, async_op=False,
                            adapt_every=3, adapt={"allowed_bits": [8]}) as state:
        ddp.register_comm_hook(state, qct.allreduce_hook)
        x = torch.randn(8, 32)
        bits_seen = []
        for _ in range(7):
            ddp(x).square().mean().backward()
            bits_seen.append(c.get_layer_policy("0.weight").bits)
        assert [r["step"] for r in state.adapt_reports] == [3, 6]
        assert bits_seen == [4, 4, 8, 8, 8, 8, 8]  # adapted after step 3, in use from step 4
        assert state.adapt_reports[0]["layers"] == 4  # two weights, two biases
        assert sorted(state.adapt_reports[0]["policies"]) == ["0.bias", "0.weight", "2.bias", "2.weight"]
        assert all(p.bits == 8 for p in state.adapt_reports[-1]["policies"].values())
        assert state.layer_policies() == state.adapt_reports[-1]["policies"]


def test_hook_checks_at_its_first_call_when_torch_starts_later(tmp_path, monkeypatch):
    """A state made before init_process_group is checked when DDP first calls the hook."""
    assert not dist.is_initialized()
    comms = qc.Comm.local(2)
    try:
        state = qct.QcHookState(None, comm=comms[1], policy=qc.Policy(codec="none"), preset=None)
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
        try:
            with pytest.raises(qc.MismatchError, match="rank 1 of 2"):
                qct.allreduce_hook(state, object())  # refused before the bucket is touched
        finally:
            dist.destroy_process_group()
        state.close()
    finally:
        for c in comms:
            c.close()


# ---- bad arguments of qc.torch (the rule of test_arguments.py) ----------------------

def _state_dict(**bucket):
    entry = dict(image=None, counts=[8], layers=["fc.weight"])
    entry.update(bucket)
    return {"format": "qc.torch.QcHookState/1", "buckets": {0: entry}}


TORCH_CASES = [
    ("op.value", lambda c: qct.QcHookState(comm=c, op="max"), BAD_VALUE),
    ("op.nul", lambda c: qct.QcHookState(comm=c, op="avg\0"), BAD_VALUE),
    ("op.type", lambda c: qct.QcHookState(comm=c, op=1), BAD_TYPE),
    ("preset.nul", lambda c: qct.QcHookState(comm=c, policy=qc.Policy(), preset="cgx\0x"), BAD_VALUE),
    ("preset.unknown", lambda c: qct.QcHookState(comm=c, policy=qc.Policy(), preset="nope"), BAD_VALUE),
    ("comm.type", lambda c: qct.QcHookState(comm="comm"), BAD_TYPE),
    ("policy.type", lambda c: qct.QcHookState(comm=c, policy="minmax"), BAD_TYPE),
    ("adapt_every.type", lambda c: qct.QcHookState(comm=c, adapt_every="5"), BAD_TYPE),
    ("adapt_every.bool", lambda c: qct.QcHookState(comm=c, adapt_every=True), BAD_TYPE),
    ("adapt_every.-1", lambda c: qct.QcHookState(comm=c, adapt_every=-1), BAD_VALUE),
    ("adapt.type", lambda c: qct.QcHookState(comm=c, adapt=[8]), BAD_TYPE),
    ("adapt.key", lambda c: qct.QcHookState(comm=c, adapt={"beta": 1.0}), BAD_VALUE),
    ("model.type", lambda c: qct.QcHookState("model", comm=c), BAD_TYPE),
    ("qc_policies_for_model.model", lambda c: qct.qc_policies_for_model(c, None, qc.Policy()), BAD_TYPE),
    ("pickle.state", lambda c: pickle.dumps(qct.QcHookState(comm=c)), BAD_TYPE),
    ("copy.state", lambda c: copy.copy(qct.QcHookState(comm=c)), BAD_TYPE),
    ("load_state_dict.type", lambda c: qct.QcHookState(comm=c).load_state_dict(5), BAD_TYPE),
    ("load_state_dict.format",
     lambda c: qct.QcHookState(comm=c).load_state_dict({"format": "x", "buckets": {}}), BAD_VALUE),
    ("load_state_dict.key",
     lambda c: qct.QcHookState(comm=c).load_state_dict({"format": "qc.torch.QcHookState/1",
                                                         "buckets": {1.5: {}}}), BAD_TYPE),
    ("load_state_dict.counts.float",
     lambda c: qct.QcHookState(comm=c).load_state_dict(_state_dict(counts=[8.5])), BAD_TYPE),
    ("load_state_dict.counts.-1",
     lambda c: qct.QcHookState(comm=c).load_state_dict(_state_dict(counts=[-1])), BAD_VALUE),
    ("load_state_dict.layers.len",
     lambda c: qct.QcHookState(comm=c).load_state_dict(_state_dict(layers=["a", "b"])), BAD_VALUE),
    ("load_state_dict.layers.nul",
     lambda c: qct.QcHookState(comm=c).load_state_dict(_state_dict(layers=["a\0b"])), BAD_VALUE),
    ("load_state_dict.image.type",
     lambda c: qct.QcHookState(comm=c).load_state_dict(_state_dict(image=12)), BAD_TYPE),
    ("load_state_dict.plain.image",
     lambda c: qct.QcHookState(comm=c).load_state_dict({0: "text"}), BAD_TYPE),
]


@pytest.mark.parametrize("call, expected", [c[1:] for c in TORCH_CASES], ids=[c[0] for c in TORCH_CASES])
def test_torch_bad_argument_raises_qc_error(call, expected):
    (c,) = qc.Comm.local(1)
    with c:
        with pytest.raises(Exception) as info:
            call(c)
    e = info.value
    assert isinstance(e, expected) and isinstance(e, qc.Error), f"{type(e).__name__}: {e}"
    if expected is BAD_VALUE:
        assert not isinstance(e, TypeError)
    else:
        assert not isinstance(e, ValueError)


def test_init_process_group_from_mpi_checks_rendezvous_first():
    with pytest.raises(BAD_VALUE, match="rendezvous"):
        qct.init_process_group_from_mpi(rendezvous="carrier-pigeon")
    with pytest.raises(BAD_TYPE, match="rendezvous"):
        qct.init_process_group_from_mpi(rendezvous=None)
