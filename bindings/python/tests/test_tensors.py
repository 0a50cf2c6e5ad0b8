"""torch tensors through the qc API (skipped without torch; the CUDA ones
without a CUDA device)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import qc  # noqa: E402
from conftest import check_ok, run_ranks  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["sum", "avg"])
def test_allreduce_tensors_threads(local3, dtype, op):
    xs = [torch.arange(600, dtype=torch.float32).remainder(5).add(r).to(dtype).reshape(20, 30) for r in range(3)]
    outs = check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank], op=op)))
    expected = sum(x.float() for x in xs)
    if op == "avg":
        expected = expected * np.float32(1.0 / 3.0)
    for x, o in zip(xs, outs):
        assert isinstance(o, torch.Tensor) and o.dtype == dtype and o.shape == (20, 30)
        assert o.data_ptr() != x.data_ptr()
        assert torch.equal(o, expected.to(dtype))


def test_in_place_is_zero_copy(local3):
    xs = [torch.full((1000,), float(r + 1)) for r in range(3)]
    ptrs = [x.data_ptr() for x in xs]
    res = check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank], out=xs[c.rank])))
    for x, p, r in zip(xs, ptrs, res):
        assert r is x and x.data_ptr() == p
        assert torch.equal(x, torch.full((1000,), 6.0))


def test_grad_bucket_view_in_place(local3):
    # a contiguous view into a larger flat buffer (what DDP buckets are)
    flats = [torch.zeros(100) for _ in range(3)]
    for r, f in enumerate(flats):
        f[10:60] = r + 1
    check_ok(run_ranks(local3, lambda c: c.allreduce(flats[c.rank][10:60], out=flats[c.rank][10:60])))
    for f in flats:
        assert torch.equal(f[10:60], torch.full((50,), 6.0))
        assert f[:10].abs().sum() == 0 and f[60:].abs().sum() == 0


def test_emulate_equals_local_bf16_and_mixed_out(local3):
    policy = qc.Policy(codec="qsgd", bits=4, bucket_size=32, min_compress_bytes=0)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(4000, generator=g).to(torch.bfloat16) for _ in range(3)]
    emulated = qc.emulate_allreduce(xs, policy)
    assert all(isinstance(e, torch.Tensor) and e.dtype == torch.bfloat16 for e in emulated)
    for c in local3:
        c.set_layer_policy("*", policy)
    outs = check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank])))
    for e, o in zip(emulated, outs):
        assert torch.equal(e.view(torch.int16), o.view(torch.int16))
    # numpy input with a torch output of the same dtype (and the reverse)
    (c,) = qc.Comm.local(1)
    with c:
        out = torch.empty(8)
        assert c.allreduce(np.arange(8, dtype=np.float32), out=out) is out
        assert torch.equal(out, torch.arange(8, dtype=torch.float32))
        arr = np.empty(8, np.float32)
        c.allreduce(torch.arange(8, dtype=torch.float32), out=arr)
        np.testing.assert_array_equal(arr, np.arange(8))


def test_tensor_errors():
    (c,) = qc.Comm.local(1)
    with c:
        for bad in (torch.zeros(8, dtype=torch.float64), torch.zeros(8, dtype=torch.int32)):
            with pytest.raises(TypeError, match="dtype"):
                c.allreduce(bad)
        with pytest.raises(ValueError, match="contiguous"):
            c.allreduce(torch.zeros(4, 4).t())
        with pytest.raises(ValueError, match="contiguous"):
            c.allreduce(torch.zeros(16)[::2])
        with pytest.raises(TypeError, match="out: dtype"):
            c.allreduce(torch.zeros(8), out=torch.zeros(8, dtype=torch.bfloat16))
        with pytest.raises(ValueError, match="layout"):
            c.allreduce(torch.zeros(4, 4).to_sparse())


def test_tensor_on_another_device_is_refused():
    (c,) = qc.Comm.local(1)
    with c:
        with pytest.raises(ValueError, match="meta.*CPU and CUDA tensors"):
            c.allreduce(torch.empty(8, device="meta"))


def test_stream_reaches_the_library():
    # Host buffers with a stream: the library refuses it (a stream orders
    # device work), which shows the binding passes the stream through.
    (c,) = qc.Comm.local(1)
    with c:
        x = np.ones(8, np.float32)
        ptr = x.__array_interface__["data"][0]
        with pytest.raises(qc.UnsupportedError, match="stream"):
            c._h.allreduce(ptr, ptr, 8, 0, 0, None, None, 0x5eed)
        with pytest.raises(qc.UnsupportedError, match="stream"):
            c._h.alltoall(ptr, ptr, 8, 0, None, 0x5eed)
        with pytest.raises(qc.UnsupportedError, match="stream"):
            c._h.allreduce_segments(ptr, ptr, [8], [None], 0, 0, None, 0x5eed)
        c._h.allreduce(ptr, ptr, 8, 0, 0, None, None, 0)  # stream 0: host memory
        np.testing.assert_array_equal(x, np.ones(8))


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@cuda
def test_cuda_tensors_equal_the_cpu_result(local3):
    policy = qc.Policy(codec="minmax", bits=4, min_compress_bytes=0)
    for c in local3:
        c.set_layer_policy("*", policy)
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(5000, generator=g) for _ in range(3)]
    on_cpu = check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank])))
    xs_dev = [x.cuda() for x in xs]
    on_gpu = check_ok(run_ranks(local3, lambda c: c.allreduce(xs_dev[c.rank])))
    for a, b in zip(on_cpu, on_gpu):
        assert b.is_cuda and torch.equal(a.view(torch.int32), b.cpu().view(torch.int32))
    in_place = check_ok(run_ranks(local3, lambda c: c.allreduce(xs_dev[c.rank], out=xs_dev[c.rank])))
    for a, b in zip(on_cpu, in_place):
        assert torch.equal(a.view(torch.int32), b.cpu().view(torch.int32))
    with pytest.raises(ValueError, match="host memory"):
        local3[0].allreduce(xs_dev[0], out=torch.empty(5000))


def test_encode_decode_tensors():
    x = torch.linspace(-2, 2, 500).to(torch.bfloat16)
    data = qc.encode(x, qc.Policy(codec="bf16"))
    y = qc.decode(data, 500, dtype="bfloat16")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and torch.equal(x, y)
    z = qc.decode(data, 500, dtype=torch.float32)
    assert z.dtype == np.float32
    np.testing.assert_array_equal(z, x.float().numpy())


def test_requires_grad_tensor(local3):
    ps = [torch.ones(10, requires_grad=True) for _ in range(3)]
    outs = check_ok(run_ranks(local3, lambda c: c.allreduce(ps[c.rank].detach())))
    assert torch.equal(outs[0], torch.full((10,), 3.0))


def test_iallreduce_tensors_give_the_blocking_bits(local3):
    policy = qc.Policy(codec="minmax", bits=4, min_compress_bytes=0)
    for c in local3:
        c.set_layer_policy("*", policy)
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(4000, generator=g).to(torch.bfloat16) for _ in range(3)]
    blocking = check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank], op="avg")))
    started = check_ok(run_ranks(local3, lambda c: c.iallreduce(xs[c.rank], op="avg")))
    for a, req in zip(blocking, started):
        b = req.wait()
        assert isinstance(b, torch.Tensor) and b.dtype == torch.bfloat16
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))


@cuda
def test_nonblocking_collectives_refuse_cuda_tensors():
    (c,) = qc.Comm.local(1)
    with c:
        x = torch.ones(8, device="cuda")
        for start in (lambda: c.iallreduce(x), lambda: c.ialltoall(x),
                      lambda: c.iallreduce_segments(x, [8], None)):
            with pytest.raises(qc.UnsupportedError, match="host memory"):
                start()


# ---- reduce-scatter, allgather, broadcast ----


def _bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_sharded_collectives_on_tensors_are_exact_with_codec_none(local3, dtype):
    xs = [torch.arange(60, dtype=torch.float32).remainder(5).add(r).to(dtype).reshape(3, 20) for r in range(3)]
    shards = check_ok(run_ranks(local3, lambda c: c.reduce_scatter(xs[c.rank])))
    total = sum(x.float() for x in xs)
    for r, s in enumerate(shards):
        assert isinstance(s, torch.Tensor) and s.dtype == dtype and s.shape == (20,)
        assert torch.equal(s, total[r].to(dtype))
    gathered = check_ok(run_ranks(local3, lambda c: c.allgather(shards[c.rank])))
    for g in gathered:
        assert g.shape == (3, 20) and torch.equal(g, total.to(dtype))
    bufs = [x.clone() for x in xs]
    res = check_ok(run_ranks(local3, lambda c: c.broadcast(bufs[c.rank], 1, out=bufs[c.rank])))
    for b, r in zip(bufs, res):
        assert r is b and torch.equal(b, xs[1])


def test_sharded_emulation_and_nonblocking_equal_the_threaded_bf16(local3):
    policy = qc.Policy(codec="minmax", bits=4, bucket_size=32, min_compress_bytes=0)
    for c in local3:
        c.set_layer_policy("*", policy)
    g = torch.Generator().manual_seed(8)
    xs = [torch.randn(3 * 500, generator=g).to(torch.bfloat16) for _ in range(3)]

    def blocking(c):
        return (c.reduce_scatter(xs[c.rank]), c.allgather(xs[c.rank][:500]), c.broadcast(xs[c.rank], 0))

    def started(c):
        reqs = (c.ireduce_scatter(xs[c.rank]), c.iallgather(xs[c.rank][:500]), c.ibroadcast(xs[c.rank], 0))
        return tuple(r.wait() for r in reqs)

    want = check_ok(run_ranks(local3, blocking))
    got = check_ok(run_ranks(local3, started))
    emulated = (qc.emulate_reduce_scatter(xs, policy), qc.emulate_allgather([x[:500] for x in xs], policy),
                qc.emulate_broadcast([xs[0], None, None], policy, 0))
    for kind in range(3):
        for r in range(3):
            assert isinstance(got[r][kind], torch.Tensor) and got[r][kind].dtype == torch.bfloat16
            assert torch.equal(_bits(want[r][kind]), _bits(got[r][kind]))
            assert torch.equal(_bits(want[r][kind]), _bits(emulated[kind][r].reshape(want[r][kind].shape)))
    assert all(torch.equal(_bits(want[0][2]), _bits(w[2])) for w in want)  # broadcast replicas


@cuda
def test_sharded_collectives_on_cuda_tensors_equal_the_cpu_result(local3):
    policy = qc.Policy(codec="minmax", bits=4, min_compress_bytes=0)
    for c in local3:
        c.set_layer_policy("*", policy)
    g = torch.Generator().manual_seed(4)
    xs = [torch.randn(3 * 1000, generator=g) for _ in range(3)]
    xs_dev = [x.cuda() for x in xs]

    def run(c, inputs):
        x = inputs[c.rank]
        return (c.reduce_scatter(x), c.allgather(x[:1000]), c.broadcast(x, 2),
                c.broadcast(x if c.rank == 2 else None, 2, out=torch.empty_like(x)))

    on_cpu = check_ok(run_ranks(local3, lambda c: run(c, xs)))
    on_gpu = check_ok(run_ranks(local3, lambda c: run(c, xs_dev)))
    for a, b in zip(on_cpu, on_gpu):
        for kind in range(4):
            assert b[kind].is_cuda and torch.equal(_bits(a[kind]), _bits(b[kind].cpu())), kind
    c = local3[0]
    for start in (lambda: c.ireduce_scatter(xs_dev[0]), lambda: c.iallgather(xs_dev[0]),
                  lambda: c.ibroadcast(xs_dev[0], 0)):
        with pytest.raises(qc.UnsupportedError, match="host memory"):
            start()
