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
