"""Non-blocking collectives (Comm.iallreduce, iallreduce_segments, ialltoall
-> qc.Request) over Comm.local ranks driven by threads."""

import gc
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import qc
from conftest import check_ok, run_ranks

N = 3000
SEGMENTS = [1000, 500, 1500]
SEGMENT_LAYERS = ["w", "b", None]


def _policies(comm):
    # One policy per layer name, so the outstanding requests mix codecs,
    # algorithms and error feedback.
    comm.set_layer_policy("*", qc.Policy(codec="minmax", bits=4, bucket_size=64, min_compress_bytes=0))
    comm.set_layer_policy("w", qc.Policy(codec="onebit", bucket_size=128, error_feedback=True,
                                         min_compress_bytes=0))
    comm.set_layer_policy("b", qc.Policy(codec="none"))
    comm.set_layer_policy("q8", qc.Policy(codec="qsgd", bits=8, algorithm="ring", min_compress_bytes=0))


def _inputs(rank, rounds=2):
    g = np.random.default_rng(10 + rank)
    return [[g.standard_normal(N).astype(np.float32) for _ in range(5)] for _ in range(rounds)]


def _blocking(c, inputs, ebs):
    out = []
    for xs in inputs:
        out.append(c.allreduce(xs[0]))
        out.append(c.allreduce(xs[1], op="avg", layer="q8"))
        out.append(c.allreduce_segments(xs[2], SEGMENTS, SEGMENT_LAYERS, error_buffer=ebs[0]))
        out.append(c.alltoall(xs[3]))
        out.append(c.allreduce(xs[4], layer="w", error_buffer=ebs[1]))
    return out


def _nonblocking(c, inputs, ebs):
    # Everything outstanding at once: 2 rounds x 5 requests, the second use
    # of each error buffer only after its first request is done (a buffer
    # serves one outstanding request).
    reqs = []
    for k, xs in enumerate(inputs):
        if k:
            for i in (2, 4):
                reqs[i].wait()
        reqs.append(c.iallreduce(xs[0]))
        reqs.append(c.iallreduce(xs[1], op="avg", layer="q8"))
        reqs.append(c.iallreduce_segments(xs[2], SEGMENTS, SEGMENT_LAYERS, error_buffer=ebs[0]))
        reqs.append(c.ialltoall(xs[3]))
        reqs.append(c.iallreduce(xs[4], layer="w", error_buffer=ebs[1]))
    return [r.wait() for r in reqs]


@pytest.mark.parametrize("nranks", [1, 2, 3, 5])
def test_outstanding_requests_give_the_blocking_bits(nranks):
    results = {}
    for name, run in (("blocking", _blocking), ("nonblocking", _nonblocking)):
        comms = qc.Comm.local(nranks, timeout=60.0)
        for c in comms:
            _policies(c)
        n = N - N % nranks  # alltoall needs a multiple of the group size

        def rank(c):
            inputs = [[x[:n] if i == 3 else x for i, x in enumerate(xs)] for xs in _inputs(c.rank)]
            ebs = [qc.ErrorBuffer(c, N), qc.ErrorBuffer(c, N)]
            out = run(c, inputs, ebs)
            return out, [eb.save() for eb in ebs]

        results[name] = check_ok(run_ranks(comms, rank))
        for c in comms:
            c.close()
    for r in range(nranks):
        (want, want_eb), (got, got_eb) = results["blocking"][r], results["nonblocking"][r]
        assert len(got) == len(want) == 10
        for i, (a, b) in enumerate(zip(want, got)):
            assert a.dtype == b.dtype and a.shape == b.shape, i
            assert a.tobytes() == b.tobytes(), f"rank {r}, request {i}"
        assert want_eb == got_eb, f"rank {r}: residuals differ"


def test_wait_returns_out_and_test_says_done():
    a, b = qc.Comm.local(2, timeout=30.0)
    x0, x1 = np.full(100, 1.0, np.float32), np.full(100, 2.0, np.float32)
    out0 = np.zeros(100, np.float32)
    r0 = a.iallreduce(x0, out=out0)
    assert r0.test() is False and r0.done is False, "rank 1 has not started"
    assert repr(r0) == "<qc.Request running>"
    r1 = b.iallreduce(x1, out=x1)  # in place
    assert r0.wait() is out0
    assert r1.wait() is x1
    assert r0.test() is True and r0.done is True and r1.test() is True
    assert r0.wait() is out0, "waiting twice gives the result again"
    np.testing.assert_array_equal(out0, 3.0)
    np.testing.assert_array_equal(x1, 3.0)
    assert repr(r0) == "<qc.Request done>"
    # out=None: a new array like x
    with a.ialltoall(np.arange(4, dtype=np.float16)) as q0, b.ialltoall(np.arange(4, 8, dtype=np.float16)) as q1:
        got0, got1 = q0.wait(), q1.wait()
    assert got0.dtype == np.float16 and got0.tolist() == [0, 1, 4, 5] and got1.tolist() == [2, 3, 6, 7]
    assert q0.closed and repr(q0) == "<qc.Request closed>"
    with pytest.raises(qc.InvalidArgumentError, match="closed"):
        q0.wait()
    with pytest.raises(qc.InvalidArgumentError, match="closed"):
        q0.test()
    q0.close()  # idempotent
    a.close()
    b.close()


def test_a_failed_request_raises_from_wait_and_test_and_fails_the_next():
    a, b = qc.Comm.local(2, timeout=30.0)
    ra = [a.iallreduce(np.ones(10, np.float32)), a.iallreduce(np.ones(10, np.float32))]
    rb = [b.iallreduce(np.ones(12, np.float32)), b.iallreduce(np.ones(10, np.float32))]
    for reqs in (ra, rb):
        with pytest.raises(qc.MismatchError):
            reqs[0].wait()
        with pytest.raises(qc.MismatchError):
            reqs[0].test()  # raises again once done
        assert reqs[0].done
        with pytest.raises(qc.MismatchError, match="did not run"):
            reqs[1].wait()
    a.close()
    b.close()


def test_a_peer_that_never_starts_times_out():
    a, b = qc.Comm.local(2, timeout=0.5)
    req = a.iallreduce(np.ones(10, np.float32))
    with pytest.raises(qc.QcTimeoutError):
        req.wait()
    a.close()
    b.close()


def test_request_on_a_destroyed_comm():
    a, b = qc.Comm.local(2, timeout=0.5)
    x = np.ones(10, np.float32)
    reqs = [a.iallreduce(x), a.iallreduce(x)]
    a.close()  # gives them the timeout, then ends them
    for req in reqs:
        assert req.done
        with pytest.raises((qc.TransportError, qc.QcTimeoutError)):
            req.wait()
        req.close()
    with pytest.raises(qc.InvalidArgumentError, match="closed"):
        a.iallreduce(x)
    # the peer learns that its group is broken (by the timeout, or by the
    # destroy that ended a's requests)
    with pytest.raises((qc.TransportError, qc.QcTimeoutError)):
        b.iallreduce(x).wait()
    b.close()


def test_a_dropped_request_still_runs_and_keeps_its_arrays():
    a, b = qc.Comm.local(2, timeout=30.0)
    out = np.zeros(50000, np.float32)
    a.iallreduce(np.full(50000, 1.0, np.float32), out=out)  # dropped at once, input with it
    gc.collect()
    np.full(50000, 7.0, np.float32)  # memory the input might be reused for
    b.allreduce(np.full(50000, 2.0, np.float32))
    # a blocking call waits for the requests started before it
    b_done = threading.Thread(target=lambda: b.allreduce(np.ones(1, np.float32)))
    b_done.start()
    a.allreduce(np.ones(1, np.float32))
    b_done.join(10)
    np.testing.assert_array_equal(out, 3.0)
    # dropped unfinished, then the communicator closed: ended, nothing freed under it
    a.iallreduce(np.ones(10, np.float32))
    a.close()
    b.close()


def test_error_buffer_belongs_to_its_request_until_done():
    a, b = qc.Comm.local(2, timeout=30.0)
    for c in (a, b):
        c.set_layer_policy("*", qc.Policy(codec="minmax", bits=4, error_feedback=True, min_compress_bytes=0))
    eb = qc.ErrorBuffer(a, 1000)
    x = np.full(1000, 0.3, np.float32)
    req = a.iallreduce(x, error_buffer=eb)
    with pytest.raises(qc.InvalidArgumentError, match="in use"):
        eb.close()
    assert not eb.closed, "a refused close leaves the buffer open"
    with pytest.raises(qc.InvalidArgumentError, match="in use"):
        eb.norm
    with pytest.raises(qc.InvalidArgumentError, match="in use"):
        a.iallreduce(x, error_buffer=eb)
    b.allreduce(x)
    req.wait()
    assert eb.norm >= 0.0
    eb.close()
    a.close()
    b.close()


def test_wait_releases_the_gil():
    # Rank 1 starts only once rank 0 is inside wait(): were the GIL held
    # there, this thread could not run and rank 0 would time out.
    a, b = qc.Comm.local(2, timeout=30.0)
    x = np.ones(1000, np.float32)
    req = a.iallreduce(x)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("out", req.wait()), daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            req.close()
        except qc.InvalidArgumentError as e:
            assert "waits on it" in e.message
            break
        assert not req.closed, "closed before rank 0 waited"
        assert time.monotonic() < deadline, "rank 0 never entered wait()"
        time.sleep(0.01)
    b.iallreduce(x).wait()
    t.join(10)
    np.testing.assert_array_equal(result["out"], 2.0)
    a.close()
    b.close()


def test_ranks_as_threads_start_and_wait():
    # Every rank starts and waits on its own thread: one wait holding the GIL
    # would stall the others' starts.
    comms = qc.Comm.local(4, timeout=30.0)
    xs = [np.full(20000, r + 1, np.float32) for r in range(4)]
    outs = check_ok(run_ranks(comms, lambda c: [c.iallreduce(xs[c.rank]) for _ in range(3)][-1].wait()))
    for o in outs:
        np.testing.assert_array_equal(o, 10.0)
    for c in comms:
        c.close()


def test_bad_arguments_raise_at_the_start():
    (c,) = qc.Comm.local(1)
    x = np.ones(8, np.float32)
    with pytest.raises(TypeError):
        c.iallreduce([1.0, 2.0])
    with pytest.raises(ValueError, match="out"):
        c.iallreduce(x, out=np.ones(9, np.float32))
    with pytest.raises(ValueError, match="sum\\(counts\\)"):
        c.iallreduce_segments(x, [4, 5], None)
    with pytest.raises(qc.InvalidArgumentError, match="NUL"):
        c.iallreduce(x, layer="a\0b")
    with pytest.raises(TypeError, match="pickled"):
        import pickle
        pickle.dumps(c.iallreduce(x))
    with pytest.raises(TypeError):
        qc.Request(None, None)
    c.close()


def test_without_a_progress_thread_the_start_runs_the_call():
    code = (
        "import numpy as np, qc\n"
        "(c,) = qc.Comm.local(1)\n"
        "r = c.iallreduce(np.ones(8, np.float32))\n"
        "assert r.done\n"
        "assert r.wait().tolist() == [1.0] * 8\n"
        "c.close()\n"
        "print('ok')\n"
    )
    env = dict(os.environ, QC_PROGRESS_THREAD="0")
    proc = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout
