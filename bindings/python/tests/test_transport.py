"""qc.Comm.from_transport: a transport written in Python (ranks are threads
here; tests/test_mpi_transport.py carries the bytes over mpi4py).

The mailbox below is as strict as gloo: a receive names its message's exact
size (anything else raises), and a send is done only once its receiver has
copied it, so qc must keep a send's memory alive until then.
"""

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import qc
from conftest import check_ok, run_ranks


class Mailbox:
    """One FIFO per (sender, receiver) pair, shared by the ranks of a group."""

    def __init__(self, size):
        self.size = size
        self.lock = threading.Lock()
        self.queues = {(a, b): [] for a in range(size) for b in range(size)}
        self.failed = None


class _Transfer:
    __slots__ = ("send", "peer", "data", "done")

    def __init__(self, send, peer, data):
        self.send, self.peer, self.data, self.done = send, peer, data, False


class MailboxTransport:
    transfer_type = _Transfer

    def __init__(self, box, rank, fail_send=False, with_wait=False):
        self.box, self.rank, self.size = box, rank, box.size
        self.fail_send = fail_send
        self.aborts = []
        self.tests = 0
        self.cancels = 0
        if with_wait:
            self.wait = self._wait

    def post_send(self, peer, data):
        if self.fail_send:
            raise ConnectionError(f"link to rank {peer} is down")
        t = self.transfer_type(True, peer, data)
        with self.box.lock:
            self.box.queues[(self.rank, peer)].append(t)
        return t

    def post_recv(self, peer, data):
        assert not data.readonly
        return self.transfer_type(False, peer, data)

    def test(self, t):
        self.tests += 1
        with self.box.lock:
            if self.box.failed is not None and not t.done:
                raise ConnectionAbortedError(f"the group was aborted: {self.box.failed}")
            if t.send or t.done:
                return t.done
            queue = self.box.queues[(t.peer, self.rank)]
            if not queue:
                return False
            s = queue[0]
            if s.data.nbytes != t.data.nbytes:
                raise ValueError(f"a message of {s.data.nbytes} bytes for a receive of {t.data.nbytes}")
            t.data[:] = s.data
            queue.pop(0)
            s.done = t.done = True
            return True

    def _wait(self, t, timeout):
        assert 0 < timeout <= 0.1
        end = time.monotonic() + timeout
        while not self.test(t):
            if time.monotonic() >= end:
                return False
            time.sleep(1e-4)
        return True

    def cancel(self, t):
        self.cancels += 1
        with self.box.lock:
            q = self.box.queues[(self.rank, t.peer)]
            if t.send and t in q:
                q.remove(t)

    def abort(self, status, reason):
        self.aborts.append((status, reason))
        with self.box.lock:
            if self.box.failed is None:
                self.box.failed = f"rank {self.rank}: {reason}"


def transport_group(n, timeout=60.0, **kw):
    box = Mailbox(n)
    transports = [MailboxTransport(box, r, **kw) for r in range(n)]
    comms = [qc.Comm.from_transport(t, timeout=timeout, any_thread=kw.get("with_wait", False))
             for t in transports]
    return transports, comms


POLICIES = {
    "mm4": qc.Policy(codec="minmax", bits=4, error_feedback=True, algorithm="ring", min_compress_bytes=0),
    "q4": qc.Policy(codec="qsgd", bits=4, rounding="stochastic", seed=3, algorithm="sra", min_compress_bytes=0),
    "one": qc.Policy(codec="onebit", error_feedback=True, algorithm="recursive_doubling", group_size=2,
                     min_compress_bytes=0),
    "*": qc.Policy(codec="minmax", bits=8, min_compress_bytes=0),
}


def program(c, nonblocking=False):
    """Two steps of every collective; returns the outputs' bytes."""
    for layer, p in POLICIES.items():
        c.set_layer_policy(layer, p)
    n, outs = c.size, []
    ebs = {layer: qc.ErrorBuffer(c, 777) for layer in ("mm4", "one")}
    for step in range(2):
        rng = np.random.default_rng(1000 * step + c.rank)
        for layer in ("mm4", "q4", "one", "plain"):
            x = rng.standard_normal(777).astype(np.float32)
            if nonblocking:
                req = c.iallreduce(x, out=x, op="avg", layer=layer, error_buffer=ebs.get(layer))
                req.wait()
                out = x
            else:
                out = c.allreduce(x, op="avg", layer=layer, error_buffer=ebs.get(layer))
            outs.append(out.tobytes())
        y = rng.standard_normal(333 * n).astype(np.float32)
        outs.append(c.reduce_scatter(y, layer="rs").tobytes())
        outs.append(c.allgather(y[:333], layer="ag").tobytes())
        outs.append(c.alltoall(y, layer="a2a").tobytes())
        outs.append(c.broadcast(y[:500], root=n - 1, layer="bc").tobytes())
    for eb in ebs.values():
        eb.close()
    return outs


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_same_bits_as_local_transport(n):
    transports, comms = transport_group(n)
    over_callbacks = check_ok(run_ranks(comms, program))
    local = qc.Comm.local(n, timeout=60.0)
    over_local = check_ok(run_ranks(local, program))
    assert over_callbacks == over_local
    for c in comms + local:
        assert c.async_error() is None
        c.close()
    if n > 1:
        assert all(t.tests > 0 for t in transports)
        assert all(not t.aborts for t in transports)


def test_nonblocking_on_progress_thread_with_wait():
    _, comms = transport_group(3, with_wait=True)
    got = check_ok(run_ranks(comms, lambda c: program(c, nonblocking=True)))
    local = qc.Comm.local(3, timeout=60.0)
    want = check_ok(run_ranks(local, lambda c: program(c, nonblocking=True)))
    assert got == want
    for c in comms + local:
        c.close()


def test_repr_and_properties():
    _, comms = transport_group(2)
    assert [(c.rank, c.size) for c in comms] == [(0, 2), (1, 2)]
    assert "callbacks" in repr(comms[0])
    for c in comms:
        c.close()


def test_exception_in_a_method_is_a_transport_error():
    box = Mailbox(2)
    transports = [MailboxTransport(box, 0, fail_send=True), MailboxTransport(box, 1)]
    comms = [qc.Comm.from_transport(t, timeout=60.0) for t in transports]
    results = run_ranks(comms, lambda c: c.allreduce(np.ones(4096, np.float32)))
    assert isinstance(results[0], qc.TransportError)
    assert "post_send" in str(results[0]) and "link to rank 1 is down" in str(results[0])
    assert "ConnectionError" in str(results[0])
    # rank 1 hears of it through abort, not after its 60 s timeout
    assert isinstance(results[1], qc.TransportError)
    assert "aborted" in str(results[1])
    assert transports[0].aborts and transports[0].aborts[0][0] == 4  # QC_ERROR_TRANSPORT
    for c in comms:
        c.close()


def test_timeout_aborts_and_cancels():
    transports, comms = transport_group(3, timeout=0.3)
    results = run_ranks(comms[:2], lambda c: c.allreduce(np.ones(4096, np.float32)))
    assert any(isinstance(r, qc.QcTimeoutError) for r in results)
    for r, t in zip(results, transports[:2]):
        assert isinstance(r, (qc.QcTimeoutError, qc.TransportError)), r
        assert len(t.aborts) == 1
        assert t.cancels > 0
    for c in comms:
        c.close()


class _WatchedTransfer(_Transfer):
    __slots__ = ("__weakref__",)


class NoCancelTransport(MailboxTransport):
    """A transport that cannot stop a transfer once posted (as gloo's isend and
    irecv): it has no cancel(). Remembers every transfer it handed out."""

    cancel = None
    transfer_type = _WatchedTransfer

    def __init__(self, box, rank):
        super().__init__(box, rank)
        self.handles = []

    def post_send(self, peer, data):
        t = super().post_send(peer, data)
        self.handles.append(weakref.ref(t))
        return t

    def post_recv(self, peer, data):
        t = super().post_recv(peer, data)
        self.handles.append(weakref.ref(t))
        return t


def test_unfinished_transfers_are_kept_until_close_without_cancel():
    # Without cancel() the transport may still write into a receive's memory
    # after qc's call failed, so qc keeps the transfer and its memory until
    # close instead of freeing them at the failure.
    box = Mailbox(3)
    transports = [NoCancelTransport(box, r) for r in range(3)]
    comms = [qc.Comm.from_transport(t, timeout=0.3) for t in transports]
    results = run_ranks(comms[:2], lambda c: c.allreduce(np.ones(4096, np.float32)))
    assert all(isinstance(r, (qc.QcTimeoutError, qc.TransportError)) for r in results)
    gc.collect()
    refs = [w for t in transports[:2] for w in t.handles]
    pending = [w() for w in refs if w() is not None and not w().send and not w().done]
    assert pending, "qc let go of its unfinished receives when the call failed"
    for t in pending:
        t.data[:] = bytes(t.data.nbytes)  # the late write a transport may do: still qc's memory
    del pending, t
    for c in comms:
        c.close()
    box.queues.clear()  # the sends rank 2 never took
    gc.collect()
    assert all(w() is None for w in refs)  # close let go of every transfer


def test_bad_transports_are_refused():
    class NoTest:
        rank, size = 0, 2

        def post_send(self, peer, data):
            return None

        def post_recv(self, peer, data):
            return None

    with pytest.raises(qc.ArgumentTypeError, match="no method test"):
        qc.Comm.from_transport(NoTest())
    with pytest.raises(qc.ArgumentTypeError, match="rank= and size="):
        qc.Comm.from_transport(object())
    t = MailboxTransport(Mailbox(2), 0)
    with pytest.raises(qc.InvalidArgumentError, match="field 'rank' is 5"):
        qc.Comm.from_transport(t, rank=5)
    with pytest.raises(qc.ArgumentTypeError, match="any_thread"):
        qc.Comm.from_transport(t, any_thread=1)
    with pytest.raises(qc.InvalidArgumentError, match="timeout"):
        qc.Comm.from_transport(t, timeout=-1.0)


def test_transport_is_released_on_close():
    import gc
    import weakref

    t = MailboxTransport(Mailbox(1), 0)
    ref = weakref.ref(t)
    c = qc.Comm.from_transport(t)
    np.testing.assert_array_equal(c.allreduce(np.arange(10, dtype=np.float32)), np.arange(10))
    del t
    gc.collect()
    assert ref() is not None  # the communicator holds it
    c.close()
    gc.collect()
    assert ref() is None
