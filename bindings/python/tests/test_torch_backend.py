"""The torch.distributed backend "qc" (qc/torch_backend.py, qc/_torch_backend/).

Each test launches torchrun with 4 processes (tests/torch_backend_worker.py):
  - test_collectives: every collective against its exact value (codec none),
    compressed allreduce within qc's bound and identical on every rank, and
    the ops that go to the gloo fallback (MAX, int64, float64, send/recv,
    gather, scatter, reduce, unequal all_to_all splits) give gloo's results;
  - test_ddp: DDP with 4-bit minmax + error feedback trains, replicas stay
    bit-identical, the residuals' state dict round-trips;
  - test_ddp_gloo_with_the_qc_hook: DDP over gloo with qc.torch's comm hook
    (4-bit minmax + error feedback, its communicator over the process group:
    no MPI) trains, replicas bit-identical, fewer bytes on the wire;
  - test_fsdp2: fully_shard with 4-bit reduce-scatter + error feedback and
    8-bit allgather trains, gathered parameters identical on every rank;
  - test_ranks_that_disagree_fail_cleanly: an allreduce whose count differs
    between ranks fails on every rank (wait() and the Future) with a message
    saying the ranks disagree, no process dies, the fallback still works;
  - test_a_rank_that_dies_fails_the_others: the others' next call fails.
One-rank groups in this process check the QC_* default, bad arguments,
the call-site counters, "cpu:qc,cuda:qc" on a machine without a GPU and,
with a GPU, CUDA tensors through qc's NCCL communicator.
Needs torch >= 2.0 and torchrun (skips otherwise); run it with that
interpreter, e.g. /work/venv-torch/bin/python -m pytest, PYTHONPATH=<build>/bindings/python.
The first run compiles the backend (torch.utils.cpp_extension, cached).
"""

import os
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
qc = pytest.importorskip("qc")
if not hasattr(qc, "Comm"):
    pytest.skip("the qc extension is not built", allow_module_level=True)
if int(torch.__version__.split(".")[0]) < 2:
    pytest.skip(f"the qc backend needs torch >= 2.0 (this is {torch.__version__})", allow_module_level=True)
import torch.distributed as dist  # noqa: E402
from conftest import torchrun_command, torchrun_env  # noqa: E402

if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

HERE = Path(__file__).resolve().parent
WORKER = HERE / "torch_backend_worker.py"
NPROC = 4


def _run(mode, tmp_path, ranks=range(NPROC)):
    launcher = torchrun_command()
    if launcher is None:
        pytest.skip("torchrun is not available")
    env = torchrun_env(QC_TEST_TMP=str(tmp_path))
    cmd = launcher + ["--standalone", "--nproc_per_node", str(NPROC), str(WORKER), mode]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-8000:]}"
    for r in ranks:
        assert f"rank {r}: {mode} ok" in proc.stdout, proc.stdout[-4000:]


def test_backend_is_registered():
    import qc.torch  # noqa: F401
    assert "qc" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["qc"] == ["cpu", "cuda"]


@pytest.fixture
def one_rank_group(backend_compiled, monkeypatch):
    """A one-rank "qc" group in this process (a HashStore: no launcher)."""
    import qc.torch  # noqa: F401
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    for k in [k for k in os.environ if k.startswith("QC_")]:
        monkeypatch.delenv(k)
    monkeypatch.setattr(backend_compiled, "_default_policies", [])

    def start(backend="qc", **env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


def test_environment_gives_the_default_policy(one_rank_group):
    import qc.torch as qct
    one_rank_group(QC_CODEC="minmax", QC_BITS="2")
    # the backend's own pipeline piece size is set for its creation only
    assert "QC_PIPELINE_CHUNK" not in os.environ
    p = qct.backend_policy("allreduce:float32:10:0")
    assert (p.codec, p.bits) == ("minmax", 2)
    qct.set_backend_policy("allreduce:*", qc.Policy(codec="fp16"))
    assert qct.backend_policy("allreduce:float32:10:0").codec == "fp16"
    assert qct.backend_policy("broadcast:float32:10:0").codec == "minmax"
    x = torch.arange(10, dtype=torch.float32)
    dist.all_reduce(x)
    assert torch.equal(x, torch.arange(10, dtype=torch.float32))


def test_bad_arguments_are_refused(one_rank_group):
    import qc.torch as qct
    with pytest.raises(RuntimeError, match="init_process_group"):
        qct.backend_state_dict()
    one_rank_group()
    with pytest.raises(TypeError):
        qct.set_backend_policy("*", 5)
    with pytest.raises(ValueError):
        qct.set_backend_policy("*", {"codec": "minmax", "bits": 99})
    with pytest.raises(ValueError, match="state dict"):
        qct.load_backend_state_dict({"format": "something else"})
    state = {"format": "qc.torch_backend/1", "residuals": {"allreduce:float32:8:0": (8, b"junk")}}
    with pytest.raises(RuntimeError, match="allreduce:float32:8:0"):
        qct.load_backend_state_dict(state)


def test_fallback_is_logged_once_per_op_and_reason(one_rank_group, capfd):
    import qc.torch as qct
    one_rank_group(QC_DEBUG="info")
    for _ in range(2):
        m = torch.ones(3)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        assert torch.equal(m, torch.ones(3))
        i = torch.ones(3, dtype=torch.int64)
        dist.all_reduce(i)
        assert torch.equal(i, torch.ones(3, dtype=torch.int64))
    err = capfd.readouterr().err
    assert err.count("allreduce goes to gloo (reduce op MAX)") == 1, err
    assert err.count("allreduce goes to gloo (dtype Long)") == 1, err
    assert qct.fallback_counts() == {"allreduce: reduce op MAX": 2, "allreduce: dtype Long": 2}


def test_coalesced_forms_go_through_qc(one_rank_group):
    import qc.torch as qct
    one_rank_group()
    outs, ins = [torch.empty(4), torch.empty(6)], [torch.ones(4), torch.full((6,), 2.0)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    assert torch.equal(outs[0], torch.ones(4)) and torch.equal(outs[1], torch.full((6,), 2.0))
    rs_out, rs_in = [torch.empty(3), torch.empty(5)], [torch.ones(3), torch.full((5,), 3.0)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(rs_out, rs_in):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    assert torch.equal(rs_out[0], torch.ones(3)) and torch.equal(rs_out[1], torch.full((5,), 3.0))
    assert qct.fallback_counts() == {}
    assert qct.backend_stats()["calls"] == 4


def test_call_sites_wrap_and_reset_on_optimizer_steps(one_rank_group, capfd):
    import qc.torch as qct
    one_rank_group(QC_TORCH_MAX_SITES="3")
    qct.set_backend_policy("allreduce:*", qc.Policy(codec="minmax", bits=4, error_feedback=True,
                                                    min_compress_bytes=0))
    for _ in range(5):  # no optimizer: sites 0, 1, 2, then the counter wraps
        dist.all_reduce(torch.ones(256))
    names = sorted(qct.backend_state_dict()["residuals"])
    assert names == ["allreduce:float32:256:0", "allreduce:float32:256:1", "allreduce:float32:256:2"]
    assert capfd.readouterr().err.count("call counters wrap") == 1
    # An optimizer step restarts the counters: the same sites again, no new ones.
    w = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([w], lr=0.1)
    w.grad = torch.ones(1)
    opt.step()
    dist.all_reduce(torch.ones(256))
    dist.all_reduce(torch.ones(100))
    names = sorted(qct.backend_state_dict()["residuals"])
    assert names == ["allreduce:float32:100:0", "allreduce:float32:256:0",
                     "allreduce:float32:256:1", "allreduce:float32:256:2"]


def test_cpu_and_cuda_share_one_backend_whose_nccl_part_is_lazy(one_rank_group):
    """"cpu:qc,cuda:qc" works on any machine: one QcBackend serves both devices,
    and its NCCL communicator is made only by a first collective on CUDA tensors
    (none here), so CPU-only training never loads NCCL."""
    import qc.torch as qct
    import qc.torch_backend
    one_rank_group(backend="cpu:qc,cuda:qc")
    ext = qc.torch_backend.load_extension()
    pg = dist.group.WORLD
    assert isinstance(pg._get_backend(torch.device("cuda")), ext.QcBackend)
    backend = qc.torch_backend.backend_of()
    x = torch.arange(10, dtype=torch.float32)
    dist.all_reduce(x)
    assert torch.equal(x, torch.arange(10, dtype=torch.float32))
    assert not backend.cuda_ready()
    assert qct.backend_stats()["calls"] == 1
    assert qct.fallback_counts() == {}
    # residuals of CUDA sites wait for the NCCL communicator: loading them
    # neither makes it nor reads them (these bytes are no image)
    qct.load_backend_state_dict({"format": "qc.torch_backend/1",
                                 "residuals": {"cuda/allreduce:float32:8:0": (8, b"junk")}})
    assert not backend.cuda_ready()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_go_through_qcs_nccl_communicator(one_rank_group):
    """The one-rank NCCL smoke through the backend (issue 32): CUDA tensors take
    qc's NCCL communicator made from a unique id in the store, stream-ordered on
    the backend's side stream; each result equals the same call on CPU tensors
    (qc's host path), bit for bit; nothing goes to the fallback."""
    import qc.torch as qct
    import qc.torch_backend
    one_rank_group(backend="cpu:qc,cuda:qc")
    backend = qc.torch_backend.backend_of()
    qct.set_backend_policy("allreduce:*", qc.Policy(codec="minmax", bits=4, error_feedback=True,
                                                    min_compress_bytes=0))
    x = torch.randn(5000, generator=torch.Generator().manual_seed(1))
    host = x.clone()
    dist.all_reduce(host)
    assert not torch.equal(host, x)  # quantized
    dev = x.cuda()
    work = dist.all_reduce(dev, async_op=True)
    work.wait()  # the current stream waits for the side stream
    assert backend.cuda_ready()
    assert torch.equal(dev.cpu(), host)
    # the Future (what DDP's hooks use), a second site of the same signature
    dev2 = x.cuda()
    got = dist.all_reduce(dev2, async_op=True).get_future().wait()[0]
    assert torch.equal(got.cpu(), host)
    # not contiguous, bfloat16, PREMUL_SUM: still qc's
    y = torch.randn(64, 40, generator=torch.Generator().manual_seed(2))
    ycpu, ydev = y.t().clone(), y.cuda().t()
    dist.all_reduce(ycpu)
    dist.all_reduce(ydev)
    assert torch.equal(ydev.cpu(), ycpu)
    # codec none (the default for the other ops): exact
    inp = torch.arange(12, dtype=torch.float32).cuda()
    out = torch.empty(12, device="cuda")
    dist.reduce_scatter_tensor(out, inp)
    assert torch.equal(out.cpu(), torch.arange(12, dtype=torch.float32))
    out.zero_()
    dist.all_gather_into_tensor(out, inp)
    assert torch.equal(out.cpu(), torch.arange(12, dtype=torch.float32))
    b = torch.full((7,), 3.0, device="cuda", dtype=torch.bfloat16)
    dist.broadcast(b, src=0)
    assert torch.equal(b.cpu(), torch.full((7,), 3.0, dtype=torch.bfloat16))
    a2a = torch.empty(12, device="cuda")
    dist.all_to_all_single(a2a, inp)
    assert torch.equal(a2a.cpu(), torch.arange(12, dtype=torch.float32))
    dist.barrier()
    assert qct.fallback_counts() == {}
    # residuals: CUDA sites carry "cuda/" and round-trip
    state = qct.backend_state_dict()
    assert "cuda/allreduce:float32:5000:0" in state["residuals"], sorted(state["residuals"])
    assert "allreduce:float32:5000:0" in state["residuals"]
    qct.load_backend_state_dict(state)
    # DDP on the GPU: the broadcast at construction and the gradient
    # allreduces go through qc's NCCL communicator, one step trains
    calls = qct.backend_stats()["calls"]
    model = torch.nn.Linear(32, 4).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.randn(16, 32, device="cuda")
    loss = ddp(data).square().mean()
    loss.backward()
    opt.step()
    assert torch.isfinite(ddp(data).square().mean()).item()
    assert qct.backend_stats()["calls"] >= calls + 2
    assert not [k for k in qct.fallback_counts() if "float" in k or "device" in k]
    # what qc does not take on CUDA tensors goes to the inner NCCL group
    m = torch.arange(3.0, device="cuda")
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    assert torch.equal(m.cpu(), torch.arange(3.0))
    assert qct.fallback_counts()["allreduce: reduce op MAX"] == 1


def test_collectives(backend_compiled, tmp_path):
    _run("ops", tmp_path)


def test_ddp(backend_compiled, tmp_path):
    _run("ddp", tmp_path)


def test_ddp_gloo_with_the_qc_hook(tmp_path):
    _run("ddp_hook", tmp_path)


def test_fsdp2(backend_compiled, tmp_path):
    pytest.importorskip("torch.distributed.fsdp")
    from torch.distributed import fsdp
    if not hasattr(fsdp, "fully_shard"):
        pytest.skip("this torch has no FSDP2 fully_shard")
    _run("fsdp", tmp_path)


def test_ranks_that_disagree_fail_cleanly(backend_compiled, tmp_path):
    # gloo would kill a process whose receive is smaller than the message:
    # the transport sends lengths first, so every rank gets an error instead.
    _run("mismatch", tmp_path)


def test_a_rank_that_dies_fails_the_others(backend_compiled, tmp_path):
    # Its gloo connections close: the others' next qc call fails at once
    # (not at the 30-minute timeout), and they still shut down cleanly.
    _run("peer_exit", tmp_path, ranks=range(NPROC - 1))
