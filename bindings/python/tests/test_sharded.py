"""Reduce-scatter, allgather and broadcast (Comm.reduce_scatter, allgather,
broadcast, their i* forms and qc.emulate_*) over Comm.local ranks driven by
threads. torch tensors: test_tensors.py."""

import numpy as np
import pytest

import qc
from conftest import check_ok, run_ranks

NRANKS = 3
COMPRESSED = qc.Policy(codec="minmax", bits=4, bucket_size=64, min_compress_bytes=0)


def _group(policy=None, nranks=NRANKS):
    comms = qc.Comm.local(nranks, timeout=30.0)
    if policy is not None:
        for c in comms:
            c.set_layer_policy("*", policy)
    return comms


def _run(policy, fn, nranks=NRANKS):
    """fn(comm) on a fresh group with `policy` everywhere; the results in rank order."""
    comms = _group(policy, nranks)
    try:
        return check_ok(run_ranks(comms, fn))
    finally:
        for c in comms:
            c.close()


def _random(rank, n, dtype=np.float32, seed=0):
    return np.random.default_rng(seed + 31 * rank).standard_normal(n).astype(dtype)


def _same_bits(arrays):
    return all(a.tobytes() == arrays[0].tobytes() for a in arrays)


# ---- codec none: the exact results -------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["sum", "avg"])
def test_reduce_scatter_is_the_sum_of_each_block(local3, dtype, op):
    m = 500
    inputs = [(np.arange(NRANKS * m) % 7 + r).astype(dtype) for r in range(NRANKS)]  # exact in float16 too
    outs = check_ok(run_ranks(local3, lambda c: c.reduce_scatter(inputs[c.rank], op=op)))
    total = sum(x.astype(np.float32) for x in inputs)
    if op == "avg":
        total = total * np.float32(1.0 / NRANKS)
    for r, o in enumerate(outs):
        assert o.dtype == dtype and o.shape == (m,)
        np.testing.assert_array_equal(o, total[r * m:(r + 1) * m].astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_allgather_concatenates(local3, dtype):
    inputs = [_random(r, 300, dtype) for r in range(NRANKS)]
    outs = check_ok(run_ranks(local3, lambda c: c.allgather(inputs[c.rank])))
    for o in outs:
        assert o.dtype == dtype and o.shape == (NRANKS, 300)
        np.testing.assert_array_equal(o, np.stack(inputs))


@pytest.mark.parametrize("root", range(NRANKS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_broadcast_gives_the_roots_array(local3, root, dtype):
    inputs = [_random(r, 1000, dtype) for r in range(NRANKS)]
    outs = check_ok(run_ranks(local3, lambda c: c.broadcast(inputs[c.rank], root)))
    for r, o in enumerate(outs):
        assert o.dtype == dtype and o.shape == (1000,)
        np.testing.assert_array_equal(o, inputs[root])
    # the root's x is read, not written; the others' x is not touched at all
    for r, x in enumerate(inputs):
        np.testing.assert_array_equal(x, _random(r, 1000, dtype))


def test_shapes_of_new_outputs(local3):
    xs = [np.full((4, 5), r, np.float32) for r in range(NRANKS)]
    gathered = check_ok(run_ranks(local3, lambda c: c.allgather(xs[c.rank])))
    assert all(g.shape == (NRANKS, 4, 5) for g in gathered)
    # reduce_scatter of what allgather returns: the shape of one rank's share
    shards = check_ok(run_ranks(local3, lambda c: c.reduce_scatter(gathered[c.rank])))
    for r, s in enumerate(shards):
        assert s.shape == (4, 5)
        np.testing.assert_array_equal(s, NRANKS * r)
    # a leading dimension other than the group size: a flat share
    flat = check_ok(run_ranks(local3, lambda c: c.reduce_scatter(np.ones((2, 6), np.float32))))
    assert all(f.shape == (4,) for f in flat)
    # an explicit out of any shape with the right element count
    outs = [np.zeros((2, 2), np.float32) for _ in range(NRANKS)]
    check_ok(run_ranks(local3, lambda c: c.reduce_scatter(np.ones(12, np.float32), out=outs[c.rank])))
    assert all(np.array_equal(o, np.full((2, 2), 3.0)) for o in outs)


def test_broadcast_without_x_off_the_root(local3):
    x = _random(0, 64)
    outs = [np.zeros(64, np.float32) for _ in range(NRANKS)]
    res = check_ok(run_ranks(local3, lambda c: c.broadcast(x if c.rank == 1 else None, 1, out=outs[c.rank])))
    for o, r in zip(outs, res):
        assert r is o
        np.testing.assert_array_equal(o, x)


# ---- compressed: replicas, emulation, in place -------------------------------------------


@pytest.mark.parametrize("algorithm", ["auto", "ring", "recursive_doubling"])
def test_compressed_allgather_replicas_are_identical(algorithm):
    policy = COMPRESSED.replace(algorithm=algorithm, rounding="stochastic", seed=5)
    inputs = [_random(r, 1000) for r in range(NRANKS)]
    outs = _run(policy, lambda c: c.allgather(inputs[c.rank]))
    assert _same_bits(outs)
    err = np.abs(outs[0] - np.stack(inputs)).max()
    assert 0 < err < 0.5  # compressed, every block too (the owner's is decoded)
    assert outs[0][0].tobytes() != inputs[0].tobytes()


@pytest.mark.parametrize("algorithm", ["auto", "tree", "ring"])
@pytest.mark.parametrize("n", [100, 40000])  # auto: tree below 64 KiB, chain above
def test_compressed_broadcast_replicas_are_identical(algorithm, n):
    policy = COMPRESSED.replace(algorithm=algorithm)
    inputs = [_random(r, n) for r in range(NRANKS)]
    outs = _run(policy, lambda c: c.broadcast(inputs[c.rank], 2))
    assert _same_bits(outs)  # the root's too: it decodes its own message
    assert 0 < np.abs(outs[0] - inputs[2]).max() < 0.5


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("algorithm", ["auto", "ring", "recursive_doubling", "tree"])
def test_emulation_equals_the_threaded_run_bit_for_bit(algorithm, dtype):
    policy = COMPRESSED.replace(algorithm=algorithm, rounding="stochastic", seed=13)
    m = 700
    blocks = [_random(r, NRANKS * m, dtype, seed=1) for r in range(NRANKS)]
    shards = [_random(r, m, dtype, seed=2) for r in range(NRANKS)]

    def rank(c):
        return (c.reduce_scatter(blocks[c.rank], op="avg", layer="g"),
                c.allgather(shards[c.rank], layer="p"),
                c.broadcast(shards[c.rank], 1, layer="p"))

    outs = _run(policy, rank)
    emulated = (qc.emulate_reduce_scatter(blocks, policy, op="avg", layer="g"),
                qc.emulate_allgather(shards, policy, layer="p"),
                # the layer's second call: call_index 1
                qc.emulate_broadcast([None, shards[1], None], policy, 1, layer="p", call_index=1))
    for kind, emulated_outs in enumerate(emulated):
        for r in range(NRANKS):
            got = outs[r][kind]
            assert isinstance(emulated_outs[r], np.ndarray) and emulated_outs[r].shape == got.shape
            assert emulated_outs[r].tobytes() == got.tobytes(), (kind, r)
    exact = (sum(b.astype(np.float32) for b in blocks) / NRANKS)[:m]
    assert 0 < np.abs(outs[0][0].astype(np.float32) - exact).max() < 0.5


@pytest.mark.parametrize("reduce_scatter_algorithm", ["auto", "ring"])
def test_error_feedback_in_emulation_equals_the_threaded_run(reduce_scatter_algorithm):
    policy = COMPRESSED.replace(bits=2, error_feedback=True, algorithm=reduce_scatter_algorithm)
    m = 400
    rounds = 3
    blocks = [[_random(r, NRANKS * m, seed=10 + k) for r in range(NRANKS)] for k in range(rounds)]
    shards = [[_random(r, m, seed=20 + k) for r in range(NRANKS)] for k in range(rounds)]

    def rank(c):
        out = []
        with qc.ErrorBuffer(c, NRANKS * m) as rs_eb, qc.ErrorBuffer(c, m) as ag_eb:
            for k in range(rounds):
                out.append(c.reduce_scatter(blocks[k][c.rank], layer="g", error_buffer=rs_eb))
                out.append(c.allgather(shards[k][c.rank], layer="p", error_buffer=ag_eb))
            out.append((rs_eb.norm, ag_eb.norm))
        return out

    outs = _run(policy, rank)
    rs_ebs = [qc.ErrorBuffer(None, NRANKS * m) for _ in range(NRANKS)]
    ag_ebs = [qc.ErrorBuffer(None, m) for _ in range(NRANKS)]
    for k in range(rounds):
        rs = qc.emulate_reduce_scatter(blocks[k], policy, error_buffers=rs_ebs, layer="g", call_index=k)
        ag = qc.emulate_allgather(shards[k], policy, error_buffers=ag_ebs, layer="p", call_index=k)
        for r in range(NRANKS):
            assert rs[r].tobytes() == outs[r][2 * k].tobytes(), (k, r)
            assert ag[r].tobytes() == outs[r][2 * k + 1].tobytes(), (k, r)
    for r in range(NRANKS):
        assert outs[r][-1] == (rs_ebs[r].norm, ag_ebs[r].norm)
        assert rs_ebs[r].norm > 0 and ag_ebs[r].norm > 0
    # error feedback changes the later rounds: without it they differ
    plain = qc.emulate_reduce_scatter(blocks[1], policy.replace(error_feedback=False), layer="g", call_index=1)
    assert plain[0].tobytes() != outs[0][2].tobytes()


def test_in_place_forms_give_the_same_bits():
    m = 300
    blocks = [_random(r, NRANKS * m, seed=3) for r in range(NRANKS)]
    shards = [_random(r, m, seed=4) for r in range(NRANKS)]

    def separate(c):
        return (c.reduce_scatter(blocks[c.rank]), c.allgather(shards[c.rank]), c.broadcast(shards[c.rank], 0))

    def in_place(c):
        big = blocks[c.rank].copy()
        own = big.reshape(NRANKS, m)[c.rank]  # reduce-scatter's out: x's own block
        assert c.reduce_scatter(big, out=own) is own
        gathered = np.zeros((NRANKS, m), np.float32)
        gathered[c.rank] = shards[c.rank]  # allgather's x: out's own block
        assert c.allgather(gathered[c.rank], out=gathered) is gathered
        buf = shards[c.rank].copy()
        assert c.broadcast(buf, 0, out=buf) is buf  # torch's in-place broadcast, the root too
        return own, gathered, buf

    want = _run(COMPRESSED, separate)
    got = _run(COMPRESSED, in_place)
    for r in range(NRANKS):
        for kind in range(3):
            assert got[r][kind].tobytes() == want[r][kind].tobytes(), (kind, r)


# ---- non-blocking -----------------------------------------------------------------------


def test_nonblocking_equals_blocking():
    policy = COMPRESSED.replace(error_feedback=True, rounding="stochastic", seed=9)
    m = 500
    blocks = [_random(r, NRANKS * m, seed=6) for r in range(NRANKS)]
    shards = [_random(r, m, seed=7) for r in range(NRANKS)]

    def calls(c, start):
        with qc.ErrorBuffer(c, NRANKS * m) as rs_eb, qc.ErrorBuffer(c, m) as ag_eb:
            results = [start("reduce_scatter", blocks[c.rank], op="avg", error_buffer=rs_eb),
                       start("allgather", shards[c.rank], error_buffer=ag_eb),
                       start("broadcast", shards[c.rank], 2, layer="b"),
                       start("broadcast", shards[c.rank] if c.rank == 0 else None, 0,
                             out=np.zeros(m, np.float32))]
            results = [r.wait() if isinstance(r, qc.Request) else r for r in results]
            return results + [rs_eb.norm, ag_eb.norm]

    want = _run(policy, lambda c: calls(c, lambda name, *a, **k: getattr(c, name)(*a, **k)))
    got = _run(policy, lambda c: calls(c, lambda name, *a, **k: getattr(c, "i" + name)(*a, **k)))
    for r in range(NRANKS):
        for i in range(4):
            assert got[r][i].tobytes() == want[r][i].tobytes(), (i, r)
        assert got[r][4:] == want[r][4:]


def test_nonblocking_bad_root_raises_at_the_start(local3):
    c = local3[0]
    with pytest.raises(qc.InvalidArgumentError, match=r"argument 'root' is 3; expected 0\.\.2"):
        c.ibroadcast(np.ones(4, np.float32), 3)
    with pytest.raises(qc.InvalidArgumentError, match="multiple of the group size 3"):
        c.ireduce_scatter(np.ones(4, np.float32))


# ---- bad inputs ---------------------------------------------------------------------------


def test_root_out_of_range_gives_the_library_message(local3):
    for root in (-1, 3):
        res = run_ranks(local3, lambda c: c.broadcast(np.ones(8, np.float32), root))
        for e in res:
            assert isinstance(e, qc.InvalidArgumentError), e
            assert f"argument 'root' is {root}; expected 0..2" in e.message
    # refused before anything ran: the group still works
    outs = check_ok(run_ranks(local3, lambda c: c.broadcast(np.full(8, c.rank, np.float32), 2)))
    assert all(np.array_equal(o, np.full(8, 2.0)) for o in outs)
    with pytest.raises(qc.InvalidArgumentError, match=r"argument 'root' is 5; expected 0\.\.2"):
        qc.emulate_broadcast([np.ones(4, np.float32)] * 3, COMPRESSED, 5)


def test_ranks_that_disagree_raise_mismatch_on_every_rank():
    res = []

    def unequal(c):
        return c.allgather(np.ones(10 + (c.rank == 1), np.float32))

    def other_root(c):
        return c.broadcast(np.ones(10, np.float32), c.rank % 2)

    for fn in (unequal, other_root):
        comms = _group()
        try:
            res = run_ranks(comms, fn)
        finally:
            for c in comms:
                c.close()
        for e in res:
            assert isinstance(e, qc.MismatchError), e
            assert e.status == 5 and e.message


def test_bad_arguments_raise_qc_errors(local3):
    c = local3[1]
    x = np.ones(12, np.float32)
    with pytest.raises(qc.InvalidArgumentError, match="not a multiple of the group size 3"):
        c.reduce_scatter(np.ones(10, np.float32))
    with pytest.raises(qc.InvalidArgumentError, match="out: 5 elements, expected 4"):
        c.reduce_scatter(x, out=np.zeros(5, np.float32))
    with pytest.raises(qc.InvalidArgumentError, match="out: 12 elements, expected 36"):
        c.allgather(x, out=np.zeros(12, np.float32))
    with pytest.raises(qc.ArgumentTypeError, match="dtype"):
        c.allgather(np.ones(4, np.int32))
    with pytest.raises(qc.ArgumentTypeError, match="out: dtype float16"):
        c.broadcast(x, 0, out=np.zeros(12, np.float16))
    with pytest.raises(qc.InvalidArgumentError, match="overlaps the input without being in place"):
        c.reduce_scatter(x, out=x[:4])  # rank 1's own block is x[4:8]
    with pytest.raises(qc.InvalidArgumentError, match="overlaps the input without being in place"):
        big = np.zeros(36, np.float32)
        c.allgather(big[:12], out=big)
    with pytest.raises(qc.InvalidArgumentError, match="x is None on the root"):
        c.broadcast(None, 1, out=x)
    with pytest.raises(qc.InvalidArgumentError, match="both None"):
        c.broadcast(None, 0)
    with pytest.raises(qc.ArgumentTypeError, match="root"):
        c.broadcast(x, "0")
    with pytest.raises(qc.ArgumentTypeError, match="error_buffer"):
        c.reduce_scatter(x, error_buffer="eb")
    # the library's own message: residuals for another element count
    c.set_layer_policy("*", COMPRESSED.replace(error_feedback=True))
    with qc.ErrorBuffer(c, 4) as eb:
        with pytest.raises(qc.Error) as info:
            c.reduce_scatter(x, error_buffer=eb)  # reduce-scatter takes one residual per element of x
    assert "12" in info.value.message and "4" in info.value.message, info.value.message


def test_bad_emulation_arguments():
    x = np.ones(12, np.float32)
    with pytest.raises(qc.InvalidArgumentError, match="not a multiple of 5 ranks"):
        qc.emulate_reduce_scatter([x] * 5, COMPRESSED)
    with pytest.raises(qc.InvalidArgumentError, match="same dtype and element count"):
        qc.emulate_allgather([x, x[:6]], COMPRESSED)
    with pytest.raises(qc.InvalidArgumentError, match="one entry"):
        qc.emulate_allgather([x, x], COMPRESSED, error_buffers=[None])
    with pytest.raises(qc.InvalidArgumentError, match=r"arrays\[1\] is None"):
        qc.emulate_broadcast([x, None], COMPRESSED, 1)
    with pytest.raises(qc.InvalidArgumentError, match="same dtype and element count"):
        qc.emulate_broadcast([x, x[:6]], COMPRESSED, 0)
    with pytest.raises(qc.Error) as info:  # the library's check of the residual count
        qc.emulate_reduce_scatter([x, x], COMPRESSED.replace(error_feedback=True),
                                  error_buffers=[qc.ErrorBuffer(None, 6), None])
    assert "12" in info.value.message, info.value.message


def test_help_is_useful():
    import pydoc

    for fn, words in ((qc.Comm.reduce_scatter, ("op", "error_buffer", "in place", "Returns")),
                      (qc.Comm.allgather, ("bit for bit", "in place", "Returns")),
                      (qc.Comm.broadcast, ("root", "torch", "in place", "None", "Returns"))):
        text = pydoc.render_doc(fn, renderer=pydoc.plaintext)
        for word in words:
            assert word in text, (fn, word)
