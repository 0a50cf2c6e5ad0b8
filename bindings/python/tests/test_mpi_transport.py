"""qc.Comm.from_transport over mpi4py: qc's bytes carried by a transport
written in Python, compared bit for bit with qc's own MPI transport.
Run under mpirun (CTest: python.mpi_transport.np3):

    mpirun -np 3 --oversubscribe /usr/bin/python3 -m pytest -q tests/test_mpi_transport.py
"""

import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI")
import qc  # noqa: E402
from conftest import qc_has_mpi_transport  # noqa: E402

WORLD = MPI.COMM_WORLD
TIMEOUT = 60.0


class Mpi4pyTransport:
    """qc's messages as MPI_BYTE messages on a duplicate of `comm`.

    MPI keeps one sender's messages in order, and qc names each receive's
    exact size, so one tag does. Requests are polled with Test (never
    blocking) or waited on in slices."""

    def __init__(self, comm):
        self.comm = comm.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.aborted = []

    def post_send(self, peer, data):
        return self.comm.Isend([data, MPI.BYTE], dest=peer, tag=11)

    def post_recv(self, peer, data):
        return self.comm.Irecv([data, MPI.BYTE], source=peer, tag=11)

    def test(self, request):
        return request.Test()

    def cancel(self, request):
        request.Cancel()

    def abort(self, status, reason):
        self.aborted.append((status, reason))

    def close(self):
        self.comm.Free()


POLICIES = [
    qc.Policy(codec="minmax", bits=4, bucket_size=64, algorithm="ring", error_feedback=True,
              min_compress_bytes=0),
    qc.Policy(codec="qsgd", bits=4, rounding="stochastic", seed=5, algorithm="sra", min_compress_bytes=0),
    qc.Policy(codec="minmax", bits=8, algorithm="recursive_doubling", min_compress_bytes=0),
    # ring, not auto: auto sends an uncompressed allreduce to MPI_Allreduce on
    # qc's MPI transport, whose summation order is MPI's own
    qc.Policy(codec="none", algorithm="ring"),
]


def run(c, policy, nonblocking):
    c.set_layer_policy("*", policy)
    rank = c.rank
    eb = qc.ErrorBuffer(c, 3000)
    outs = []
    for step in range(2):
        x = np.random.default_rng(10 * step + rank).standard_normal(3000).astype(np.float32)
        if nonblocking:
            c.iallreduce(x, out=x, op="avg", error_buffer=eb).wait()
            outs.append(x.tobytes())
        else:
            outs.append(c.allreduce(x, op="avg", error_buffer=eb).tobytes())
        y = np.random.default_rng(77 + rank).standard_normal(100 * c.size).astype(np.float32)
        outs.append(c.reduce_scatter(y).tobytes())
        outs.append(c.allgather(y[:100]).tobytes())
        outs.append(c.alltoall(y).tobytes())
    eb.close()
    return outs


@pytest.mark.parametrize("policy", POLICIES, ids=["minmax4-ef-ring", "qsgd4-sra", "minmax8-rd", "none-ring"])
@pytest.mark.parametrize("nonblocking", [False, True], ids=["blocking", "nonblocking"])
def test_same_bits_as_qc_mpi_transport(policy, nonblocking):
    if not qc_has_mpi_transport(WORLD, TIMEOUT):
        pytest.skip("libqc built without the MPI transport: nothing to compare with")
    transport = Mpi4pyTransport(WORLD)
    # qc may call MPI from its progress thread only at MPI_THREAD_MULTIPLE
    any_thread = MPI.Query_thread() == MPI.THREAD_MULTIPLE
    with qc.Comm.from_transport(transport, any_thread=any_thread, timeout=TIMEOUT) as c:
        assert (c.rank, c.size) == (WORLD.Get_rank(), WORLD.Get_size())
        got = run(c, policy, nonblocking)
    with qc.Comm.from_mpi(WORLD, timeout=TIMEOUT) as c:
        want = run(c, policy, nonblocking)
    transport.close()
    assert got == want
    assert not transport.aborted
    # and every process reduced to the same bits
    assert all(o == got[0] for o in WORLD.allgather(got[0]))
