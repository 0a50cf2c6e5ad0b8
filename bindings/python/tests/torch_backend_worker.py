"""One rank of tests/test_torch_backend.py, launched by torchrun (4 processes).

    torchrun --standalone --nproc_per_node 4 torch_backend_worker.py MODE

MODE:
  ops    every collective with backend "qc" against its exact value (codec
         none: equal), compressed calls within qc's bound and identical on
         every rank, and the ops that go to the gloo fallback;
  ddp    DDP, 4-bit minmax + error feedback on gradients: the loss falls and
         every replica's parameters are bit-identical; then the residuals'
         state dict round trip;
  fsdp   FSDP2 fully_shard, 4-bit reduce-scatter with error feedback, 8-bit
         allgather: the loss falls and the gathered parameters are
         identical on every rank;
  mismatch  ranks that disagree fail with qc's message on every rank
         (wait() and the Future), and the broken group fails fast;
  peer_exit  the last rank exits without a word: the others' next qc call
         fails instead of waiting.
Exits non-zero (an AssertionError's traceback) on any failure.
"""

import hashlib
import os
import sys

import torch
import torch.distributed as dist

import qc
import qc.torch as qct

MODE = sys.argv[1]
torch.manual_seed(0)
torch.set_num_threads(1)


def all_equal_on_ranks(value):
    """The objects every rank holds (gathered over the fallback)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def params_digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_ops(rank, world):
    f32 = torch.float32
    # allreduce SUM / AVG, integer-valued floats: exact with codec none.
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        base = torch.arange(1000, dtype=torch.float64) % 50  # sums exact in bfloat16 too
        x = (base + rank).to(dtype)
        dist.all_reduce(x)
        want = (base * world + sum(range(world))).to(dtype)
        assert torch.equal(x, want), (dtype, x[:5], want[:5])
    x = torch.full((64,), float(rank + 1))
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    assert torch.equal(x, torch.full((64,), (world + 1) / 2.0)), x[:4]
    # several tensors, one non-contiguous (transposed)
    a = torch.ones(7) * rank
    b = (torch.arange(12, dtype=f32).reshape(3, 4) + rank).t()
    work = dist.all_reduce(a, async_op=True)
    dist.all_reduce(b)
    work.wait()
    assert torch.equal(a, torch.full((7,), float(sum(range(world)))))
    want_b = (torch.arange(12, dtype=f32).reshape(3, 4) * world + sum(range(world))).t()
    assert torch.equal(b, want_b)
    # reduce_scatter_tensor
    inp = torch.arange(world * 10, dtype=f32) + 100 * rank
    out = torch.empty(10)
    dist.reduce_scatter_tensor(out, inp)
    want = torch.arange(world * 10, dtype=f32)[rank * 10:(rank + 1) * 10] * world + 100 * sum(range(world))
    assert torch.equal(out, want), (out, want)
    # reduce_scatter (list form)
    outs = torch.empty(5)
    dist.reduce_scatter(outs, [torch.full((5,), float(rank + j)) for j in range(world)])
    assert torch.equal(outs, torch.full((5,), float(sum(r + rank for r in range(world)))))
    # all_gather_into_tensor and all_gather (list)
    gathered = torch.empty(world * 6)
    dist.all_gather_into_tensor(gathered, torch.full((6,), float(rank)))
    assert torch.equal(gathered, torch.arange(world, dtype=f32).repeat_interleave(6))
    parts = [torch.empty(2, 3) for _ in range(world)]
    dist.all_gather(parts, torch.full((2, 3), float(rank) * 2))
    for r, p in enumerate(parts):
        assert torch.equal(p, torch.full((2, 3), float(r) * 2)), (r, p)
    # broadcast from a non-zero root
    t = torch.arange(33, dtype=f32) if rank == 1 else torch.zeros(33)
    dist.broadcast(t, src=1)
    assert torch.equal(t, torch.arange(33, dtype=f32))
    # all_to_all_single, equal splits
    send = torch.arange(world * 3, dtype=f32) + 1000 * rank
    recv = torch.empty(world * 3)
    dist.all_to_all_single(recv, send)
    want = torch.cat([torch.arange(rank * 3, rank * 3 + 3, dtype=f32) + 1000 * r for r in range(world)])
    assert torch.equal(recv, want), (recv, want)
    # PREMUL_SUM with a scalar factor: a qc SUM, scaled after
    if hasattr(dist, "_make_nccl_premul_sum"):
        p = torch.full((8,), float(rank))
        dist.all_reduce(p, op=dist._make_nccl_premul_sum(0.5))
        assert torch.equal(p, torch.full((8,), 0.5 * sum(range(world)))), p
    dist.barrier()
    stats = qct.backend_stats()
    assert stats["calls"] >= 13, stats  # one qc call per collective above
    assert qct.fallback_counts() == {}, qct.fallback_counts()

    # ---- the fallback: gloo's results, exactly ----
    m = torch.tensor([float(rank)])
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    assert m.item() == world - 1
    i = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(i)
    assert i.item() == sum(range(world))
    d = torch.tensor([0.1 * rank], dtype=torch.float64)
    dist.all_reduce(d)
    assert abs(d.item() - 0.1 * sum(range(world))) < 1e-12
    if rank == 0:
        dist.send(torch.tensor([42.0]), dst=1)
    elif rank == 1:
        r = torch.zeros(1)
        dist.recv(r, src=0)
        assert r.item() == 42.0
    g = [torch.zeros(2) for _ in range(world)] if rank == 0 else None
    dist.gather(torch.full((2,), float(rank)), gather_list=g, dst=0)
    if rank == 0:
        assert [x[0].item() for x in g] == list(range(world))
    s = torch.zeros(3)
    dist.scatter(s, [torch.full((3,), float(j)) for j in range(world)] if rank == 0 else None, src=0)
    assert torch.equal(s, torch.full((3,), float(rank)))
    red = torch.ones(4)
    dist.reduce(red, dst=0)
    if rank == 0:
        assert torch.equal(red, torch.full((4,), float(world)))
    # unequal splits: rank r sends r+1 elements to everyone
    in_splits = [rank + 1] * world
    out_splits = [r + 1 for r in range(world)]
    send = torch.full((sum(in_splits),), float(rank))
    recv = torch.empty(sum(out_splits))
    dist.all_to_all_single(recv, send, out_splits, in_splits)
    assert torch.equal(recv, torch.cat([torch.full((r + 1,), float(r)) for r in range(world)]))
    counts = qct.fallback_counts()
    for key in ("allreduce: reduce op MAX", "allreduce: dtype Long", "allreduce: dtype Double",
                "gather: not a qc collective", "scatter: not a qc collective",
                "reduce: not a qc collective", "all_to_all_single: unequal splits"):
        assert counts.get(key, 0) >= 1, (key, counts)
    assert counts.get("send: point to point", 0) + counts.get("recv: point to point", 0) >= (1 if rank < 2 else 0)

    # a sub-group is a backend of its own (its own inner gloo groups)
    sub = dist.new_group([0, 1], backend="qc")
    if rank < 2:
        y = torch.full((16,), float(rank + 1))
        dist.all_reduce(y, group=sub)
        assert torch.equal(y, torch.full((16,), 3.0)), y
        assert qct.backend_stats(sub)["calls"] == 1
        dist.destroy_process_group(sub)

    # ---- compressed: 8-bit minmax, within the bound, identical on every rank ----
    qct.set_backend_policy("allreduce:*", qc.Policy(codec="minmax", bits=8, min_compress_bytes=0))
    gen = torch.Generator().manual_seed(1 + rank)
    x = torch.randn(4096, generator=gen)
    exact = x.clone()
    dist.all_reduce(exact, op=dist.ReduceOp.MAX)  # just to use the fallback in between
    x_sum = x.clone()
    dist.all_reduce(x_sum)
    inputs = all_equal_on_ranks(x)
    truth = sum(inputs)
    err = (x_sum - truth).abs().max().item()
    spread = max((t.max() - t.min()).item() for t in inputs)
    assert 0 < err < world * spread / 255, (err, spread)
    digests = all_equal_on_ranks(params_digest([x_sum]))
    assert len(set(digests)) == 1, digests
    layers_ok = qct.backend_policy("allreduce:float32:4096:0")
    assert layers_ok.codec == "minmax" and layers_ok.bits == 8


def make_data(rank, world, n=256):
    gen = torch.Generator().manual_seed(123)
    w = torch.randn(16, 1, generator=gen)
    xs = torch.randn(n, 16, generator=gen)
    ys = xs @ w + 0.01 * torch.randn(n, 1, generator=gen)
    shard = slice(rank * n // world, (rank + 1) * n // world)
    return xs[shard], ys[shard]


def make_model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))


def train(model, rank, world, steps):
    """SGD on this rank's shard of the regression data; the loss must halve."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    xs, ys = make_data(rank, world)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xs), ys)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def check_ddp(rank, world):
    qct.set_backend_policy("allreduce:*", qc.Policy(codec="minmax", bits=4, bucket_size=64,
                                                    error_feedback=True, min_compress_bytes=0))
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    train(model, rank, world, steps=30)
    # DDP's start also exchanges int32/int64 metadata: those go to the fallback.
    counts = qct.fallback_counts()
    assert not any(k.startswith("allreduce") or "Float" in k for k in counts), counts
    digests = all_equal_on_ranks(params_digest(list(model.parameters())))
    assert len(set(digests)) == 1, digests
    stats = qct.backend_stats()
    assert stats["wire_bytes"] < stats["logical_bytes"], stats  # compressed
    # error feedback: residual sites, a k counter restarted by each step
    state = qct.backend_state_dict()
    assert state["residuals"], state
    layers = sorted(state["residuals"])
    assert all(name.startswith("allreduce:float32:") and name.endswith(":0") for name in layers), layers
    # (d) round trip: load what was saved, save again: the same bytes
    qct.load_backend_state_dict(state)
    again = qct.backend_state_dict()
    assert again["residuals"] == state["residuals"]
    nonzero = any(any(b != 0 for b in img[1][56:]) for img in state["residuals"].values())
    assert nonzero, "residuals are all zero"
    # a checkpoint survives torch.save/torch.load
    path = os.path.join(os.environ["QC_TEST_TMP"], f"qc_state_{rank}.pt")
    torch.save(state, path)
    qct.load_backend_state_dict(torch.load(path, weights_only=False))
    try:
        qct.load_backend_state_dict({"format": "bogus"})
        raise AssertionError("a bogus state dict was accepted")
    except ValueError:
        pass


def check_ddp_hook(rank, world):
    """DDP over gloo with qc's comm hook under torchrun: the hook's communicator is
    built over the process group (no MPI), 4-bit minmax with error feedback."""
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    state = qct.QcHookState(model, policy=qc.Policy(codec="minmax", bits=4, bucket_size=64,
                                                    error_feedback=True, min_compress_bytes=0),
                            preset=None)
    assert "callbacks" in repr(state.comm), state.comm
    model.register_comm_hook(state, qct.allreduce_hook)
    train(model, rank, world, steps=30)
    digests = all_equal_on_ranks(params_digest(list(model.parameters())))
    assert len(set(digests)) == 1, digests
    stats = state.stats()
    assert stats["wire_bytes"] < stats["logical_bytes"], stats  # compressed
    state.close()


def check_fsdp(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    qct.set_backend_policy("reduce_scatter:*", qc.Policy(codec="minmax", bits=4, bucket_size=64,
                                                         error_feedback=True, min_compress_bytes=0))
    qct.set_backend_policy("allgather:*", qc.Policy(codec="minmax", bits=8, min_compress_bytes=0))
    mesh = init_device_mesh("cpu", (world,))
    model = make_model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    train(model, rank, world, steps=25)
    full = [p.full_tensor() for p in model.parameters()]
    counts = qct.fallback_counts()  # before all_gather_object's own (int64, uint8) calls
    assert counts == {}, counts
    digests = all_equal_on_ranks(params_digest(full))
    assert len(set(digests)) == 1, digests
    state = qct.backend_state_dict()
    assert any(k.startswith("reduce_scatter:") for k in state["residuals"]), list(state["residuals"])


def check_mismatch(rank, world):
    """Ranks that disagree (count) fail on every rank with a qc error,
    through wait() and through the Future, and the ranks that meet the
    other size say the ranks disagree; the broken group then refuses every
    qc call at once instead of hanging; shutting down still works.

    Not every rank need see the sizes: a rank whose group failed closes its
    gloo connections at once (docs/python.md), so a rank still waiting on
    it may fail first with the transport error naming that peer."""
    x = torch.ones(10 + (rank == 0))
    work = dist.all_reduce(x, async_op=True)
    fut = work.get_future()
    try:
        work.wait()
        raise AssertionError("a mismatched allreduce succeeded")
    except RuntimeError as e:
        seen = str(e)
    assert "qc" in seen and ("disagree" in seen or "QC_ERROR_TRANSPORT" in seen), seen
    try:
        fut.wait()
        raise AssertionError("the future of a failed allreduce succeeded")
    except RuntimeError as e:
        assert str(e) == seen, (str(e), seen)  # the same failure both ways
    try:
        dist.all_reduce(torch.ones(10))
        raise AssertionError("a broken group ran an allreduce")
    except RuntimeError as e:
        assert "qc" in str(e), str(e)
    # the fallback group is not qc's: it still works
    i = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(i)
    assert i.item() == sum(range(world))
    # the mismatch itself was named somewhere (QC_ERROR_MISMATCH, or the
    # transport naming both sizes)
    seen_by = [None] * world
    dist.all_gather_object(seen_by, seen)
    assert any("disagree" in s for s in seen_by), seen_by


def check_peer_exit(rank, world):
    """A rank that dies makes the others' next qc call fail, not hang."""
    import time
    dist.barrier()
    if rank == world - 1:
        os._exit(0)  # gone without a word (its sockets close)
    time.sleep(1.0)
    try:
        dist.all_reduce(torch.ones(100000))
        raise AssertionError("an allreduce with a dead rank succeeded")
    except RuntimeError as e:
        assert "qc" in str(e), str(e)


def main():
    dist.init_process_group("gloo" if MODE == "ddp_hook" else "cpu:qc")
    rank, world = dist.get_rank(), dist.get_world_size()
    modes = {"ops": check_ops, "ddp": check_ddp, "ddp_hook": check_ddp_hook, "fsdp": check_fsdp,
             "mismatch": check_mismatch, "peer_exit": check_peer_exit}
    modes[MODE](rank, world)
    if MODE not in ("mismatch", "peer_exit"):
        dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: {MODE} ok", flush=True)


if __name__ == "__main__":
    main()
    # torch 2.15's gloo can abort a process in its C++ teardown at exit
    # ("terminate called without an active exception"), after the checks have
    # passed and qc's backend is destroyed: leave before that teardown, as
    # torch_launch_worker.py does.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
