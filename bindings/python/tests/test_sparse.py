"""Sparse allreduce (Comm.sparse_allreduce, its dense form, isparse_allreduce
and qc.emulate_sparse_allreduce) over Comm.local ranks driven by threads:
numpy (indices, values) pairs and torch sparse COO tensors."""

import numpy as np
import pytest

import qc
from conftest import check_ok, run_ranks

try:
    import torch
except ImportError:  # the torch cases skip
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

NROWS = 40
MINMAX8 = qc.Policy(codec="minmax", bits=8, min_compress_bytes=0)


def _run(nranks, fn, policy=None, timeout=30.0):
    """fn(comm) on a fresh group of nranks (policy everywhere); the results in
    rank order, exceptions included."""
    comms = qc.Comm.local(nranks, timeout=timeout)
    try:
        if policy is not None:
            for c in comms:
                c.set_layer_policy("*", policy)
        return run_ranks(comms, fn)
    finally:
        for c in comms:
            c.close()


def _indices(pattern, rank, nranks, rng):
    if pattern == "overlapping":  # row 7 on every rank, the rest drawn
        return np.concatenate([[7], rng.choice(NROWS, 9, replace=False)]).astype(np.int64)
    if pattern == "disjoint":
        return rng.permutation(np.arange(rank * 8, rank * 8 + 8)).astype(np.int64)
    if pattern == "empty":  # every other rank has no rows; one rank alone has none
        return np.arange(rank, rank + 5, dtype=np.int64) if rank % 2 else np.zeros(0, np.int64)
    if pattern == "duplicates":
        return rng.integers(0, 6, 12).astype(np.int64)
    raise AssertionError(pattern)


def _inputs(pattern, nranks, row_len, dtype=np.float32, seed=0):
    """Every rank's (indices, values); integer values, so float32 and float16
    sums are exact and any order of addition gives the same bits."""
    out = []
    for r in range(nranks):
        rng = np.random.default_rng(seed + 101 * r)
        idx = _indices(pattern, r, nranks, rng)
        out.append((idx, rng.integers(-8, 9, (len(idx), row_len)).astype(dtype)))
    return out


def _reference(inputs, row_len):
    """The union of the indices (ascending) and the float64 sums of their rows."""
    sums = {}
    for idx, vals in inputs:
        for i, row in zip(idx.tolist(), vals.astype(np.float64)):
            sums[i] = sums.get(i, 0.0) + row
    keys = sorted(sums)
    rows = np.array([sums[k] for k in keys]).reshape(len(keys), row_len)
    return np.array(keys, np.int64), rows


def _scatter(indices, values, nrows):
    table = np.zeros((nrows,) + values.shape[1:], values.dtype)
    table[indices] = values
    return table


def _same_bits(results):
    return all(all(a.tobytes() == b.tobytes() for a, b in zip(r, results[0])) for r in results)


# ---- codec none: exact --------------------------------------------------------------


@pytest.mark.parametrize("nranks", [1, 2, 3, 5])
@pytest.mark.parametrize("pattern", ["overlapping", "disjoint", "empty", "duplicates"])
@pytest.mark.parametrize("row_len", [1, 64])
@pytest.mark.parametrize("algorithm", ["auto", "sra"])
def test_sum_is_exact(nranks, pattern, row_len, algorithm):
    inputs = _inputs(pattern, nranks, row_len)
    policy = qc.Policy(algorithm=algorithm)
    results = check_ok(_run(nranks, lambda c: c.sparse_allreduce(*inputs[c.rank]), policy))
    want_idx, want_rows = _reference(inputs, row_len)
    for idx, vals in results:
        assert isinstance(idx, np.ndarray) and idx.dtype == np.int64 and idx.shape == want_idx.shape
        assert vals.dtype == np.float32 and vals.shape == (len(want_idx), row_len)
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_array_equal(vals, want_rows)
    assert _same_bits(results)
    # the inputs are read, not written
    for (idx, vals), again in zip(inputs, _inputs(pattern, nranks, row_len)):
        np.testing.assert_array_equal(idx, again[0])
        np.testing.assert_array_equal(vals, again[1])


def test_float16_and_avg():
    inputs = _inputs("overlapping", 3, 16, np.float16)
    want_idx, want_rows = _reference(inputs, 16)
    sums = check_ok(_run(3, lambda c: c.sparse_allreduce(*inputs[c.rank])))
    for idx, vals in sums:
        assert vals.dtype == np.float16
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_array_equal(vals, want_rows.astype(np.float16))
    avgs = check_ok(_run(3, lambda c: c.sparse_allreduce(*inputs[c.rank], op="avg")))
    for idx, vals in avgs:
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_allclose(vals.astype(np.float64), want_rows / 3, rtol=1e-3, atol=1e-3)
    assert _same_bits(avgs)


def test_nobody_has_rows():
    empty = (np.zeros(0, np.int64), np.zeros((0, 4), np.float32))
    for idx, vals in check_ok(_run(3, lambda c: c.sparse_allreduce(*empty))):
        assert idx.shape == (0,) and vals.shape == (0, 4)
    tables = check_ok(_run(3, lambda c: c.sparse_allreduce(*empty, nrows=5)))
    for t in tables:
        np.testing.assert_array_equal(t, np.zeros((5, 4), np.float32))


def test_index_types_and_layouts():
    # int32 indices, a strided view: converted; the result is int64 all the same
    idx = np.array([9, 0, 3, 0, 5, 2], np.int32)[::2]  # [9, 3, 5]
    vals = np.arange(6, dtype=np.float32).reshape(3, 2)
    for i, v in check_ok(_run(2, lambda c: c.sparse_allreduce(idx, vals))):
        assert i.dtype == np.int64
        np.testing.assert_array_equal(i, [3, 5, 9])
        np.testing.assert_array_equal(v, 2 * vals[[1, 2, 0]])


# ---- the dense form -------------------------------------------------------------------


# With a lossy codec only the same schedule gives the same bits: the dense
# form may choose to densify (an allreduce of the table); sra is forced here.
@pytest.mark.parametrize("policy", [None, MINMAX8.replace(algorithm="sra")], ids=["none", "minmax8-sra"])
def test_dense_form_is_the_sparse_result_scattered(policy):
    nranks, row_len = 3, 8
    inputs = _inputs("overlapping", nranks, row_len)
    if policy is not None:
        inputs = [(i, (v + 0.37 * i[:, None]).astype(np.float32)) for i, v in inputs]  # not exact in 8 bits

    def body(c):
        sparse = c.sparse_allreduce(*inputs[c.rank], layer="emb")
        dense = c.sparse_allreduce(*inputs[c.rank], layer="emb", nrows=NROWS)
        table = np.full((NROWS, row_len), np.nan, np.float32)
        filled = c.sparse_allreduce(*inputs[c.rank], layer="emb", out=table)
        assert filled is table
        return sparse, dense, table

    results = check_ok(_run(nranks, body, policy))
    for (idx, vals), dense, table in results:
        assert dense.shape == (NROWS, row_len) and dense.dtype == np.float32
        want = _scatter(idx, vals, NROWS)
        assert dense.tobytes() == want.tobytes()
        assert table.tobytes() == want.tobytes()
    assert all(r[1].tobytes() == results[0][1].tobytes() for r in results)


def test_dense_index_out_of_range_is_refused_on_every_rank():
    inputs = _inputs("disjoint", 3, 4)  # rank 2 has rows 16..23

    def body(c):
        with pytest.raises(qc.Error) as info:
            c.sparse_allreduce(*inputs[c.rank], nrows=20)
        # the communicator stays usable
        ok = c.sparse_allreduce(*inputs[c.rank], nrows=24)
        return info.value, ok

    results = check_ok(_run(3, body))
    assert isinstance(results[2][0], qc.InvalidArgumentError) and "entry" in str(results[2][0])
    assert all(isinstance(r[0], qc.MismatchError) for r in results[:2])
    np.testing.assert_array_equal(results[0][1], _scatter(*_reference(inputs, 4), 24))


# ---- a quantized codec --------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["auto", "sra"])
def test_minmax8_within_bound_and_identical(algorithm):
    nranks, row_len = 5, 64
    rng = np.random.default_rng(3)
    inputs = []
    for r in range(nranks):
        idx = rng.choice(NROWS, 12, replace=False).astype(np.int64)
        inputs.append((idx, rng.standard_normal((12, row_len)).astype(np.float32)))
    policy = MINMAX8.replace(algorithm=algorithm)
    results = check_ok(_run(nranks, lambda c: c.sparse_allreduce(*inputs[c.rank]), policy))
    want_idx, want_rows = _reference(inputs, row_len)
    assert _same_bits(results)
    idx, vals = results[0]
    np.testing.assert_array_equal(idx, want_idx)
    err = np.abs(vals.astype(np.float64) - want_rows).max()
    # each row is quantized with its own scale: range/255 per level; a sum
    # crosses at most two quantizations per rank (sra's partial sums)
    level = max(np.ptp(v, axis=1).max() for _, v in inputs) / 255
    assert 0 < err <= 2 * nranks * level


# ---- torch sparse tensors ----------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(NROWS, 8), (NROWS,), (NROWS, 2, 3)])
def test_torch_sparse_round_trip(dtype, shape):
    nranks = 3
    tdtype = getattr(torch, dtype)
    row_shape = shape[1:]

    def make(r):  # uncoalesced: repeated rows, out of order
        g = torch.Generator().manual_seed(r)
        idx = torch.randint(0, 10, (7,), generator=g) * (r + 1)
        vals = torch.randint(-4, 5, (7,) + row_shape, generator=g).to(tdtype)
        return torch.sparse_coo_tensor(idx.unsqueeze(0), vals, shape)

    tensors = [make(r) for r in range(nranks)]
    assert not tensors[0].is_coalesced()
    results = check_ok(_run(nranks, lambda c: c.sparse_allreduce(tensors[c.rank])))
    want = sum(t.to_dense().double() for t in tensors)
    for out in results:
        assert out.layout == torch.sparse_coo and out.is_coalesced()
        assert tuple(out.shape) == shape and out.dtype == tdtype
        assert out.sparse_dim() == 1
        assert torch.equal(out.to_dense().double(), want)
        assert torch.equal(out._indices(), results[0]._indices())
        assert torch.equal(out._values(), results[0]._values())
        # exactly the rows some rank had
        assert out._indices()[0].tolist() == sorted(set(torch.cat([t._indices()[0] for t in tensors]).tolist()))
    # the dense form: a dense tensor of the input's shape
    tables = check_ok(_run(nranks, lambda c: c.sparse_allreduce(tensors[c.rank], nrows=NROWS)))
    for t in tables:
        assert t.layout == torch.strided and tuple(t.shape) == shape and t.dtype == tdtype
        assert torch.equal(t.double(), want)


@needs_torch
def test_torch_pairs_and_mixed_kinds():
    # torch (indices, values): a torch pair back; numpy indices with torch values too
    idx = torch.tensor([4, 1, 4])
    vals = torch.ones(3, 5, dtype=torch.bfloat16)
    for i, v in check_ok(_run(2, lambda c: c.sparse_allreduce(idx.numpy() if c.rank else idx, vals))):
        assert isinstance(i, torch.Tensor) and i.dtype == torch.int64 and isinstance(v, torch.Tensor)
        assert i.tolist() == [1, 4]
        assert v.dtype == torch.bfloat16 and v.float().tolist() == [[2.0] * 5, [4.0] * 5]


@needs_torch
def test_torch_errors():
    (c,) = qc.Comm.local(1, timeout=5.0)
    with c:
        x = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.ones(2), (2, 2))
        with pytest.raises(ValueError, match="sparse_dim 2"):
            c.sparse_allreduce(x)
        row = x.to_dense().to_sparse(1)
        with pytest.raises(TypeError, match="values must be None"):
            c.sparse_allreduce(row, torch.ones(2, 2))
        with pytest.raises(TypeError, match="float64"):
            c.sparse_allreduce(row.double())
        with pytest.raises(ValueError, match="nrows"):
            c.sparse_allreduce(row, nrows=3)
        with pytest.raises(TypeError, match="integer"):
            c.sparse_allreduce(torch.tensor([0.0]), torch.ones(1, 2))


# ---- bad arguments ----------------------------------------------------------------------


def test_row_len_mismatch_fails_every_rank():
    inputs = _inputs("overlapping", 3, 4)
    inputs[1] = (inputs[1][0], np.ones((len(inputs[1][0]), 5), np.float32))
    results = _run(3, lambda c: c.sparse_allreduce(*inputs[c.rank]))
    assert all(isinstance(r, qc.MismatchError) for r in results), results


def test_negative_index_is_an_invalid_argument():
    inputs = _inputs("overlapping", 3, 4)
    inputs[0][0][3] = -2
    results = _run(3, lambda c: c.sparse_allreduce(*inputs[c.rank]))
    assert isinstance(results[0], qc.InvalidArgumentError) and "-2" in str(results[0])
    assert all(isinstance(r, qc.MismatchError) for r in results[1:]), results


@pytest.mark.parametrize("args, kwargs, error, words", [
    ((np.arange(3), np.ones(3, np.float32)), {}, ValueError, "expected 2-D"),
    ((np.arange(3), np.ones((3, 2, 2), np.float32)), {}, ValueError, "expected 2-D"),
    ((np.arange(4).reshape(2, 2), np.ones((4, 2), np.float32)), {}, ValueError, "1-D"),
    ((np.arange(3), np.ones((4, 2), np.float32)), {}, ValueError, "one row per index"),
    ((np.arange(3.0), np.ones((3, 2), np.float32)), {}, TypeError, "integer"),
    (([0, 1], np.ones((2, 2), np.float32)), {}, TypeError, "numpy array or a torch tensor"),
    ((np.arange(2), np.ones((2, 2), np.float64)), {}, TypeError, "float64"),
    ((np.arange(2), np.ones((4, 2), np.float32)[::2]), {}, ValueError, "C-contiguous"),
    ((np.arange(2),), {}, TypeError, "values is missing"),
    ((np.arange(2), np.ones((2, 2), np.float32)), {"out": np.zeros((5, 3), np.float32)}, ValueError, "needs 10"),
    ((np.arange(2), np.ones((2, 2), np.float32)), {"out": np.zeros((5, 2), np.float16)}, TypeError, "dtype"),
    ((np.arange(2), np.ones((2, 2), np.float32)), {"nrows": 4, "out": np.zeros((5, 2), np.float32)},
     ValueError, "out has 5 rows"),
    ((np.arange(2), np.ones((2, 2), np.float32)), {"nrows": -1}, ValueError, "nrows"),
    ((np.arange(2), np.ones((2, 2), np.float32)), {"op": "max"}, ValueError, "op"),
])
def test_bad_arguments_raise_before_the_call(args, kwargs, error, words):
    # Rank 1 never calls: reaching the library would wait for it and time out.
    comms = qc.Comm.local(2, timeout=5.0)
    try:
        with pytest.raises(error, match=words):
            comms[0].sparse_allreduce(*args, **kwargs)
    finally:
        for c in comms:
            c.close()


# ---- non-blocking and emulated forms ---------------------------------------------------


@pytest.mark.parametrize("policy", [None, MINMAX8], ids=["none", "minmax8"])
def test_nonblocking_equals_blocking(policy):
    nranks, row_len = 3, 16
    inputs = _inputs("duplicates", nranks, row_len)

    def body(c):
        blocking = c.sparse_allreduce(*inputs[c.rank], layer="emb"), \
            c.sparse_allreduce(*inputs[c.rank], layer="emb", nrows=NROWS)
        table = np.zeros((NROWS, row_len), np.float32)
        requests = [c.isparse_allreduce(*inputs[c.rank], layer="emb"),
                    c.isparse_allreduce(*inputs[c.rank], layer="emb", out=table)]
        sparse = requests[0].wait()
        assert requests[0].wait() is sparse  # made once
        assert requests[1].wait() is table
        return blocking, sparse, table

    for (blocking, blocking_table), sparse, table in check_ok(_run(nranks, body, policy)):
        assert all(a.tobytes() == b.tobytes() for a, b in zip(blocking, sparse))
        assert table.tobytes() == blocking_table.tobytes()


def test_nonblocking_failure_raises_on_every_rank():
    inputs = _inputs("overlapping", 2, 4)
    inputs[0] = (inputs[0][0], np.ones((len(inputs[0][0]), 5), np.float32))

    def body(c):
        request = c.isparse_allreduce(*inputs[c.rank])
        for _ in range(2):  # the same error again
            with pytest.raises(qc.MismatchError):
                request.wait()
        return True

    assert check_ok(_run(2, body)) == [True, True]


def test_dropped_request_still_runs():
    inputs = _inputs("overlapping", 2, 4)

    def body(c):
        c.isparse_allreduce(*inputs[c.rank]).close()  # its peers need it: it still runs
        return c.sparse_allreduce(*inputs[c.rank])

    for idx, vals in check_ok(_run(2, body)):
        np.testing.assert_array_equal(vals, _reference(inputs, 4)[1])


@pytest.mark.parametrize("nranks", [1, 3, 5])
@pytest.mark.parametrize("policy", [qc.Policy(), MINMAX8.replace(rounding="stochastic", seed=9)],
                         ids=["none", "minmax8-stochastic"])
def test_emulation_equals_the_threaded_run(nranks, policy):
    row_len = 8
    inputs = _inputs("overlapping", nranks, row_len)
    inputs = [(i, v + np.float32(0.37)) for i, v in inputs]

    def body(c):  # two calls of one layer: call_index 0 and 1
        return c.sparse_allreduce(*inputs[c.rank], layer="emb"), \
            c.sparse_allreduce(*inputs[c.rank], layer="emb", nrows=NROWS)

    results = check_ok(_run(nranks, body, policy))
    idx, vals = qc.emulate_sparse_allreduce(inputs, policy, layer="emb")
    table = qc.emulate_sparse_allreduce(inputs, policy, layer="emb", call_index=1, nrows=NROWS)
    for (ridx, rvals), rtable in results:
        assert ridx.tobytes() == idx.tobytes() and rvals.tobytes() == vals.tobytes()
        assert rtable.tobytes() == table.tobytes()


@needs_torch
def test_emulation_of_torch_sparse_tensors():
    tensors = [torch.sparse_coo_tensor(torch.tensor([[2, 0, 2]]), torch.ones(3, 4), (6, 4)),
               torch.sparse_coo_tensor(torch.tensor([[5]]), torch.full((1, 4), 3.0), (6, 4))]
    out = qc.emulate_sparse_allreduce(tensors, qc.Policy())
    assert out.is_coalesced() and tuple(out.shape) == (6, 4)
    assert torch.equal(out.to_dense(), tensors[0].to_dense() + tensors[1].to_dense())


def test_emulation_bad_inputs():
    ok = (np.arange(2), np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="same dtype and row length"):
        qc.emulate_sparse_allreduce([ok, (np.arange(2), np.ones((2, 4), np.float32))], qc.Policy())
    with pytest.raises(TypeError, match=r"inputs\[1\]"):
        qc.emulate_sparse_allreduce([ok, np.ones(3)], qc.Policy())
    with pytest.raises(ValueError, match="non-empty"):
        qc.emulate_sparse_allreduce([], qc.Policy())
    with pytest.raises(qc.InvalidArgumentError, match="entry"):
        qc.emulate_sparse_allreduce([(np.array([0, -1]), ok[1]), ok], qc.Policy())
