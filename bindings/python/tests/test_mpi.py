"""qc over mpi4py communicators. Run under mpirun (CTest: python.mpi.np3):

    mpirun -np 3 --oversubscribe /usr/bin/python3 -m pytest -q tests/test_mpi.py

Every process runs the same tests in the same order, so the collectives line up.
"""


import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI")
import qc  # noqa: E402
from conftest import qc_has_mpi_transport  # noqa: E402

WORLD = MPI.COMM_WORLD
TIMEOUT = 60.0


pytestmark = pytest.mark.skipif(not qc_has_mpi_transport(WORLD, TIMEOUT),
                                reason="libqc built without the MPI transport")


def test_from_world():
    with qc.Comm.from_mpi(WORLD, timeout=TIMEOUT) as c:
        assert (c.rank, c.size) == (WORLD.Get_rank(), WORLD.Get_size())
        assert "mpi" in repr(c)
        x = np.full(1000, c.rank + 1, np.float32)
        out = c.allreduce(x)
        np.testing.assert_array_equal(out, c.size * (c.size + 1) / 2)
        c.allreduce(x, out=x, op="avg")
        np.testing.assert_allclose(x, (c.size + 1) / 2, rtol=1e-6)
        assert c.stats()["calls"] == 2


def test_compressed_equals_emulation():
    policy = qc.Policy(codec="minmax", bits=4, bucket_size=64, algorithm="sra", min_compress_bytes=0)
    rng = np.random.default_rng(100 + WORLD.Get_rank())
    x = rng.standard_normal(5000).astype(np.float32)
    everyone = WORLD.allgather(x)
    with qc.Comm.from_mpi(WORLD, timeout=TIMEOUT) as c:
        c.set_layer_policy("*", policy)
        out = c.allreduce(x, layer="fc.weight")
        assert c.layer_stats("fc.weight")["calls"] == 1
    emulated = qc.emulate_allreduce(everyone, policy)
    assert out.tobytes() == emulated[WORLD.Get_rank()].tobytes()
    # every process got the same bits
    assert all(o.tobytes() == out.tobytes() for o in WORLD.allgather(out))


def test_sharded_collectives_equal_emulation():
    policy = qc.Policy(codec="minmax", bits=4, bucket_size=64, min_compress_bytes=0)
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    x = np.random.default_rng(200 + rank).standard_normal(size * 700).astype(np.float32)
    everyone = WORLD.allgather(x)
    with qc.Comm.from_mpi(WORLD, timeout=TIMEOUT) as c:
        c.set_layer_policy("*", policy)
        shard = c.reduce_scatter(x, op="avg")
        gathered = c.allgather(shard)
        root = size - 1
        sent = c.broadcast(x if rank == root else None, root, out=np.empty_like(x))
    assert shard.tobytes() == qc.emulate_reduce_scatter(everyone, policy, op="avg")[rank].tobytes()
    shards = WORLD.allgather(shard)
    assert gathered.tobytes() == qc.emulate_allgather(shards, policy, call_index=1)[rank].tobytes()
    assert sent.tobytes() == qc.emulate_broadcast(everyone, policy, root, call_index=2)[rank].tobytes()
    for result in (gathered, sent):  # replicas: the same bits on every process
        assert all(o.tobytes() == result.tobytes() for o in WORLD.allgather(result))


@pytest.mark.parametrize("algorithm", ["auto", "sra"])
def test_sparse_allreduce(algorithm):
    rank = WORLD.Get_rank()
    rng = np.random.default_rng(300 + rank)
    idx = np.concatenate([[3], rng.integers(0, 50, 20 + 7 * rank)]).astype(np.int64)  # repeats, nnz per rank
    vals = rng.integers(-8, 9, (len(idx), 16)).astype(np.float32)  # integers: exact sums
    everyone = WORLD.allgather((idx, vals))
    with qc.Comm.from_mpi(WORLD, timeout=TIMEOUT) as c:
        c.set_layer_policy("*", qc.Policy(algorithm=algorithm))
        got_idx, got_vals = c.sparse_allreduce(idx, vals, layer="emb")
        table = c.sparse_allreduce(idx, vals, layer="emb", nrows=50)
        quantized = qc.Policy(codec="minmax", bits=8, algorithm=algorithm, min_compress_bytes=0)
        c.set_layer_policy("*", quantized)
        q_idx, q_vals = c.sparse_allreduce(idx, vals + np.float32(0.3), layer="emb")
    e_idx, e_vals = qc.emulate_sparse_allreduce([(i, v + np.float32(0.3)) for i, v in everyone], quantized,
                                                layer="emb", call_index=2)
    assert e_idx.tobytes() == q_idx.tobytes() and e_vals.tobytes() == q_vals.tobytes()
    want, want_q = np.zeros((50, 16)), np.zeros((50, 16))
    for i, v in everyone:
        np.add.at(want, i, v)
        np.add.at(want_q, i, v + np.float32(0.3))
    union = np.unique(np.concatenate([i for i, _ in everyone]))
    np.testing.assert_array_equal(got_idx, union)
    np.testing.assert_array_equal(got_vals, want[union])
    np.testing.assert_array_equal(table, want)
    np.testing.assert_array_equal(q_idx, union)
    assert 0 < np.abs(q_vals - want_q[union]).max() < 1  # 8 bits over a range of 16, 3 ranks
    for result in (got_vals, q_vals):  # the same bits on every process
        assert all(o.tobytes() == result.tobytes() for o in WORLD.allgather(result))

def test_split_sub_communicator():
    color = WORLD.Get_rank() % 2
    sub = WORLD.Split(color, WORLD.Get_rank())
    try:
        with qc.Comm.from_mpi(sub, timeout=TIMEOUT) as c:
            assert (c.rank, c.size) == (sub.Get_rank(), sub.Get_size())
            x = np.full(300, WORLD.Get_rank(), np.float32)
            out = c.allreduce(x)
            members = [r for r in range(WORLD.Get_size()) if r % 2 == color]
            np.testing.assert_array_equal(out, sum(members))
            blocks = np.arange(c.size * 4, dtype=np.float32) + 1000 * c.rank
            got = c.alltoall(blocks)
            for i in range(c.size):
                np.testing.assert_array_equal(got[4 * i:4 * i + 4], np.arange(4) + 4 * c.rank + 1000 * i)
    finally:
        sub.Free()


def test_error_buffer_checkpoint():
    n = 4096
    policy = qc.Policy(codec="minmax", bits=2, error_feedback=True, min_compress_bytes=0)
    rng = np.random.default_rng(WORLD.Get_rank())
    x = rng.standard_normal(n).astype(np.float32)
    with qc.Comm.from_mpi(WORLD, timeout=TIMEOUT) as c:
        c.set_layer_policy("*", policy)
        with qc.ErrorBuffer(c, n) as eb:
            c.allreduce(x, error_buffer=eb)
            image, norm = eb.save(), eb.norm
        assert norm > 0
        with qc.ErrorBuffer(c, n) as eb2:
            eb2.load(image)
            assert eb2.norm == norm


def test_from_mpi_argument_errors():
    with pytest.raises(qc.ArgumentTypeError):
        qc.Comm.from_mpi(42)
    with pytest.raises(qc.InvalidArgumentError):
        qc.Comm.from_mpi(MPI.COMM_NULL)
    # refused before the collective create, on every rank alike
    for timeout in (float("nan"), float("inf"), 0.0, 10**400):
        with pytest.raises(qc.InvalidArgumentError, match="timeout"):
            qc.Comm.from_mpi(WORLD, timeout=timeout)
    with pytest.raises(qc.ArgumentTypeError, match="timeout"):
        qc.Comm.from_mpi(WORLD, timeout="30")
    with qc.Comm.from_mpi(WORLD, timeout=TIMEOUT) as c:  # still usable afterwards
        assert c.size == WORLD.Get_size()


# After a failed call the MPI transport leaves the failed group's MPI
# communicators to MPI_Finalize (src/core/transports/mpi_transport.cpp): freed,
# their context ids would be reused by the next communicator and the failed
# call's late messages would break it. These tests check both paths and a
# new communicator afterwards.
@pytest.mark.parametrize("algorithm", ["ring", "auto"])
def test_mismatch_raises_on_every_process(algorithm):
    if WORLD.Get_size() < 2:
        pytest.skip("needs 2 processes")
    with qc.Comm.from_mpi(WORLD, timeout=TIMEOUT) as c:
        # ring: qc's own messages detect it; auto with codec none: the
        # agreement before MPI_Allreduce does.
        c.set_layer_policy("*", qc.Policy(algorithm=algorithm))
        with pytest.raises(qc.MismatchError) as info:
            c.allreduce(np.ones(64 + (c.rank == 1), np.float32))
        assert info.value.status == 5 and info.value.message
    WORLD.Barrier()


def test_new_comm_after_mismatch():
    if WORLD.Get_size() < 2:
        pytest.skip("needs 2 processes")
    with qc.Comm.from_mpi(WORLD, timeout=TIMEOUT) as c:
        out = c.allreduce(np.ones(4096, np.float32))
        np.testing.assert_array_equal(out, WORLD.Get_size())
        c.set_layer_policy("*", qc.Policy(algorithm="ring"))
        out = c.allreduce(np.ones(4096, np.float32))
    np.testing.assert_array_equal(out, WORLD.Get_size())
