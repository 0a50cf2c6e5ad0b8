"""The qc Python API over Comm.local ranks driven by threads (no MPI, no torch)."""

import pickle
import pydoc

import numpy as np
import pytest

import qc
from conftest import check_ok, run_ranks

COMPRESSED = qc.Policy(codec="minmax", bits=4, bucket_size=64, min_compress_bytes=0)


# ---- package ------------------------------------------------------------------


def test_version_and_exports():
    assert qc.__version__ == qc.library_version()
    assert qc.__version__.count(".") == 2
    for name in qc.__all__:
        assert hasattr(qc, name), name


def test_help_is_useful():
    text = pydoc.render_doc(qc.Comm.allreduce, renderer=pydoc.plaintext)
    for word in ("op", "layer", "error_buffer", "in place", "GIL", "MismatchError", "Returns"):
        assert word in text, word
    assert "x: ArrayLike" in text or "x:" in text


# ---- Policy -------------------------------------------------------------------


def test_policy_defaults_match_the_library():
    p = qc.Policy()
    assert p == qc.Policy._from_tuple(qc._qc.policy_defaults())
    assert (p.codec, p.bits, p.bucket_size, p.rounding, p.algorithm) == ("none", 4, 128, "auto", "auto")
    assert p.scale == "auto" and qc.SCALES == {"auto": 0, "l2": 1, "max_abs": 2}
    assert qc.Policy(scale="MAX_ABS").scale == "max_abs"
    assert qc.Policy._from_tuple(qc.Policy(scale="l2")._to_tuple()).scale == "l2"
    assert p.error_feedback is False and p.min_compress_bytes == 16384 and p.seed == 0


def test_policy_repr_eq_copy():
    p = qc.Policy(codec="minmax", bits=4, bucket_size=128, algorithm="sra", error_feedback=True, topk_ratio=0.25)
    r = repr(p)
    assert r.startswith("qc.Policy(codec='minmax', bits=4")
    assert "algorithm='sra'" in r and "error_feedback=True" in r and "topk_ratio=0.25" in r
    assert eval(r, {"qc": qc}) == p
    q = p.copy()
    assert q == p and q is not p
    q.bits = 2
    assert q != p and p.bits == 4
    assert p.replace(bits=2) == q
    assert pickle.loads(pickle.dumps(p)) == p
    assert p != "policy"
    with pytest.raises(TypeError):
        hash(p)


def test_policy_accepts_case_and_enum_values():
    assert qc.Policy(codec="MinMax", rounding="STOCHASTIC").codec == "minmax"
    assert qc.Policy(codec=qc.CODECS["qsgd"]).codec == "qsgd"
    assert qc.Policy(topk_ratio=0.01).topk_ratio == float(np.float32(0.01))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(bits=9), "bits"),
        (dict(bits=0), "bits"),
        (dict(codec="qsgd", bits=1), "bits"),
        (dict(bucket_size=0), "bucket_size"),
        (dict(group_size=0), "group_size"),
        (dict(topk_ratio=0.0), "topk_ratio"),
        (dict(topk_ratio=1.5), "topk_ratio"),
        (dict(scale_update_period=0), "scale_update_period"),
        (dict(codec="zip"), "codec"),
        (dict(rounding="up"), "rounding"),
        (dict(scale="rms"), "scale"),
        (dict(scale=3), "scale"),
        (dict(algorithm="butterfly"), "algorithm"),
        (dict(seed=-1), "seed"),
        (dict(min_compress_bytes=-1), "min_compress_bytes"),
    ],
)
def test_policy_invalid_values_raise_value_error(kwargs, field):
    with pytest.raises(ValueError) as info:
        qc.Policy(**kwargs)
    assert isinstance(info.value, qc.InvalidArgumentError)
    assert info.value.status == 1 and info.value.status_name == "QC_ERROR_INVALID_ARGUMENT"
    assert field in str(info.value)


def test_policy_wrong_types_raise_type_error():
    for kwargs in (dict(bits="4"), dict(codec=None), dict(bucket_size=1.5), dict(error_feedback="yes"),
                   dict(topk_ratio="0.1"), dict(bits=True)):
        with pytest.raises(TypeError):
            qc.Policy(**kwargs)


def test_policy_assignment_is_validated():
    p = qc.Policy(codec="minmax")
    p.bits = 8
    assert p.bits == 8
    with pytest.raises(qc.InvalidArgumentError, match="bits"):
        p.bits = 12
    assert p.bits == 8  # unchanged on failure
    with pytest.raises(AttributeError):
        p.bitz = 3
    with pytest.raises(ValueError):
        p.codec = "qsgd2"


# ---- allreduce over local ranks ----------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["sum", "avg"])
def test_allreduce_threads_numpy(local3, dtype, op):
    n = 1000
    inputs = [np.arange(n, dtype=dtype) % 7 + r for r in range(3)]  # exact in float16 too
    outs = check_ok(run_ranks(local3, lambda c: c.allreduce(inputs[c.rank], op=op)))
    expected = sum(i.astype(np.float32) for i in inputs)
    if op == "avg":
        expected = expected * np.float32(1.0 / 3.0)
    for r, o in enumerate(outs):
        assert o.dtype == dtype and o.shape == (n,) and o is not inputs[r]
        np.testing.assert_array_equal(o, expected.astype(dtype))
    assert all(np.array_equal(o, outs[0]) for o in outs)


def test_allreduce_in_place_and_shapes(local3):
    xs = [np.full((4, 5, 6), r + 1, np.float32) for r in range(3)]
    ids = [id(x) for x in xs]
    res = check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank], out=xs[c.rank])))
    assert [id(x) for x in res] == ids
    for x in xs:
        assert x.shape == (4, 5, 6)
        np.testing.assert_array_equal(x, 6.0)
    # an explicit out array of another shape, same count and dtype
    outs = [np.zeros(120, np.float32) for _ in range(3)]
    check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank], out=outs[c.rank])))
    for o in outs:
        np.testing.assert_array_equal(o, 18.0)


def test_allreduce_read_only_input_is_fine(local3):
    xs = []
    for r in range(3):
        x = np.full(10, r, np.float32)
        x.setflags(write=False)
        xs.append(x)
    outs = check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank])))
    np.testing.assert_array_equal(outs[0], 3.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("algorithm", ["auto", "ring", "recursive_doubling", "sra", "tree"])
def test_emulate_equals_local_bit_for_bit(algorithm, dtype):
    rng = np.random.default_rng(7)
    n = 3000
    policy = COMPRESSED.replace(algorithm=algorithm, rounding="stochastic", seed=11)
    inputs = [rng.standard_normal(n).astype(dtype) for _ in range(3)]
    emulated = qc.emulate_allreduce(inputs, policy, op="avg")
    comms = qc.Comm.local(3, timeout=30.0)
    try:
        for c in comms:
            c.set_layer_policy("*", policy)
        outs = check_ok(run_ranks(comms, lambda c: c.allreduce(inputs[c.rank], op="avg")))
    finally:
        for c in comms:
            c.close()
    for e, o in zip(emulated, outs):
        assert isinstance(e, np.ndarray)
        assert e.tobytes() == o.tobytes()
    exact = sum(i.astype(np.float32) for i in inputs) / 3
    assert outs[0].dtype == dtype
    assert 0 < np.abs(outs[0].astype(np.float32) - exact).max() < 0.5  # compressed, but close


def test_emulate_reproduces_a_layers_later_call_and_state_resumes_it():
    """Call 2 of layer "A", other layers called in between, is
    emulate_allreduce(layer="A", call_index=2); a fresh group that loads the
    saved state draws the same bits for A's next call."""
    rng = np.random.default_rng(3)
    policy = COMPRESSED.replace(rounding="stochastic", seed=5)
    x = [rng.standard_normal(2000).astype(np.float32) for _ in range(2)]

    def group():
        comms = qc.Comm.local(2, timeout=30.0)
        for c in comms:
            c.set_layer_policy("*", policy)
        return comms

    comms = group()
    try:
        for _ in range(2):
            check_ok(run_ranks(comms, lambda c: c.allreduce(x[c.rank], layer="A")))
            check_ok(run_ranks(comms, lambda c: c.allreduce(x[c.rank], layer="B")))
        states = [c.save_state() for c in comms]
        third = check_ok(run_ranks(comms, lambda c: c.allreduce(x[c.rank], layer="A")))
    finally:
        for c in comms:
            c.close()
    assert states[0] == states[1]
    emulated = qc.emulate_allreduce(x, policy, layer="A", call_index=2)
    assert all(e.tobytes() == o.tobytes() for e, o in zip(emulated, third))
    first = qc.emulate_allreduce(x, policy, layer="A")
    assert first[0].tobytes() != third[0].tobytes()

    resumed = group()
    try:
        for c in resumed:
            c.load_state(states[0])
        again = check_ok(run_ranks(resumed, lambda c: c.allreduce(x[c.rank], layer="A")))
        with pytest.raises(qc.CorruptDataError):
            resumed[0].load_state(states[0][:-1])
    finally:
        for c in resumed:
            c.close()
    assert all(a.tobytes() == o.tobytes() for a, o in zip(again, third))


def test_compressed_allreduce_sends_fewer_bytes():
    n = 1 << 15

    def wire(policy):
        comms = qc.Comm.local(3)
        for c in comms:
            c.set_layer_policy("*", policy)
        xs = [np.ones(n, np.float32) for _ in range(3)]
        check_ok(run_ranks(comms, lambda c: c.allreduce(xs[c.rank], layer="w")))
        stats = [c.stats() for c in comms]
        for c in comms:
            c.close()
        return stats[0]["wire_bytes"]

    assert wire(COMPRESSED) * 4 < wire(qc.Policy())


# ---- argument errors ------------------------------------------------------------------


def test_dtype_and_contiguity_errors():
    (c,) = qc.Comm.local(1)
    with c:
        for bad in (np.zeros(8, np.float64), np.zeros(8, np.int32), np.zeros(8, np.complex64)):
            with pytest.raises(TypeError, match="dtype"):
                c.allreduce(bad)
        with pytest.raises(TypeError, match="byte order"):
            c.allreduce(np.zeros(8, ">f4"))
        with pytest.raises(ValueError, match="aligned"):
            c.allreduce(np.frombuffer(bytes(33), np.uint8)[1:].view(np.float32))
        with pytest.raises(TypeError, match="numpy array or a torch"):
            c.allreduce([1.0, 2.0])
        with pytest.raises(ValueError, match="contiguous"):
            c.allreduce(np.zeros(16, np.float32)[::2])
        with pytest.raises(ValueError, match="contiguous"):
            c.allreduce(np.zeros((4, 4), np.float32).T)
        x = np.zeros(8, np.float32)
        with pytest.raises(TypeError, match="out: dtype float16"):
            c.allreduce(x, out=np.zeros(8, np.float16))
        with pytest.raises(ValueError, match="elements"):
            c.allreduce(x, out=np.zeros(9, np.float32))
        ro = np.zeros(8, np.float32)
        ro.setflags(write=False)
        with pytest.raises(ValueError, match="read-only"):
            c.allreduce(x, out=ro)
        big = np.zeros(16, np.float32)
        with pytest.raises(ValueError, match="overlaps"):
            c.allreduce(big[:8], out=big[4:12])
        with pytest.raises(ValueError, match="op"):
            c.allreduce(x, op="max")
        with pytest.raises(TypeError, match="layer"):
            c.allreduce(x, layer=3)
        with pytest.raises(TypeError, match="error_buffer"):
            c.allreduce(x, error_buffer="eb")
        # a one-rank group: the result is the input
        np.testing.assert_array_equal(c.allreduce(np.arange(5, dtype=np.float32)), np.arange(5))


def test_mismatched_counts_raise_on_every_rank(local3):
    def body(c):
        return c.allreduce(np.ones(100 + (c.rank == 1), np.float32))

    results = run_ranks(local3, body)
    for r in results:
        assert isinstance(r, qc.MismatchError), r
        assert isinstance(r, qc.Error)
        assert r.status == 5 and r.status_name == "QC_ERROR_MISMATCH"
        assert r.message and r.message in str(r)
    # the communicators are broken: later calls fail the same way
    again = run_ranks(local3, lambda c: c.allreduce(np.ones(4, np.float32)))
    assert all(isinstance(r, qc.MismatchError) for r in again)


def test_library_errors_carry_status_and_message():
    (c,) = qc.Comm.local(1)
    with c:
        with pytest.raises(qc.InvalidArgumentError) as info:
            c.policy_preset("no-such-preset")
        assert info.value.status == 1
        assert "cgx" in info.value.message  # the library lists the known presets
    with pytest.raises(qc.InvalidArgumentError, match="'n'"):
        qc.Comm.local(0)


def test_timeout_and_departed_peer():
    a, b = qc.Comm.local(2, timeout=0.3)
    with pytest.raises(qc.QcTimeoutError) as info:
        a.allreduce(np.ones(8, np.float32))
    assert isinstance(info.value, TimeoutError) and info.value.status == 6
    a.close()
    b.close()
    a, b = qc.Comm.local(2, timeout=30.0)
    b.close()
    with pytest.raises(qc.TransportError):
        a.allreduce(np.ones(8, np.float32))
    a.close()


def test_async_error_reports_the_broken_group():
    a, b = qc.Comm.local(2, timeout=0.3)
    assert a.async_error() is None and b.async_error() is None
    with pytest.raises(qc.QcTimeoutError):
        a.allreduce(np.ones(8, np.float32))
    # b never called, yet learns that its group broke, with the message
    err = b.async_error()
    assert isinstance(err, qc.QcTimeoutError) and err.status == 6
    assert "qc_comm_get_async_error" in err.message
    a.close()
    b.close()
    with pytest.raises(qc.InvalidArgumentError, match="closed"):
        b.async_error()


def test_error_classes_one_per_status():
    failures = [s for s in qc.STATUS_NAMES if s != 0]  # generated from qc.h
    classes = {qc.error_class(s) for s in failures}
    assert len(classes) == len(failures) and all(issubclass(k, qc.Error) for k in classes)
    assert qc.Error not in classes, "a status of qc.h has no exception class in _errors.py"
    for s in failures:
        assert qc.error_class(s).STATUS == s
        assert qc.STATUS_NAMES[s] == qc._qc.status_string(s)  # the generated names are the library's
    assert qc.error_class(5) is qc.MismatchError and qc.error_class(6) is qc.QcTimeoutError
    assert qc.error_class(99) is qc.Error
    e = qc.CorruptDataError(7, "bad header")
    assert pickle.loads(pickle.dumps(e)).message == "bad header"
    assert set(qc._qc.STATUSES.values()) == set(range(10))  # the Python table matches qc.h


# ---- policies on a communicator ---------------------------------------------------------


def test_layer_policies_and_preset():
    (c,) = qc.Comm.local(1)
    with c:
        assert c.get_layer_policy() == qc.Policy()
        p = qc.Policy(codec="qsgd", bits=3, rounding="stochastic", seed=5)
        c.set_layer_policy("fc*", p)
        assert c.get_layer_policy("fc1.weight") == p
        assert c.get_layer_policy("conv") == qc.Policy()
        c.policy_preset("cgx", COMPRESSED)
        assert c.get_layer_policy("fc.bias").codec == "none"
        assert c.get_layer_policy("layer1.weight").codec == "minmax"
        with pytest.raises(TypeError):
            c.set_layer_policy("*", {"codec": "minmax"})


# ---- statistics -------------------------------------------------------------------------


def test_stats_move(local3):
    before = [c.stats() for c in local3]
    assert set(before[0]) == {"calls", "logical_bytes", "wire_bytes", "codec_seconds", "transport_seconds",
                              "codec_seconds_in_flight"}
    xs = [np.ones(4096, np.float32) for _ in range(3)]
    check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank], layer="fc.weight")))
    check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank])))
    for b, c in zip(before, local3):
        s = c.stats()
        assert s["calls"] == b["calls"] + 2
        assert s["wire_bytes"] > b["wire_bytes"]
        assert s["logical_bytes"] == b["logical_bytes"] + 2 * 4096 * 4
        layers = c.layer_stats()
        assert set(layers) == {"fc.weight", "*"}
        assert c.layer_names() == ["*", "fc.weight"]
        one = c.layer_stats("fc.weight")
        assert one == layers["fc.weight"]
        assert one["calls"] == 1 and one["count"] == 4096 and one["wire_bytes"] > 0
        assert c.layer_stats("unused")["calls"] == 0


# ---- error buffers --------------------------------------------------------------------


def test_error_feedback_and_buffer_round_trip(local3):
    n = 2048
    policy = qc.Policy(codec="minmax", bits=2, bucket_size=64, error_feedback=True, min_compress_bytes=0)
    for c in local3:
        c.set_layer_policy("*", policy)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    ebs = [qc.ErrorBuffer(c, n) for c in local3]
    assert all(e.norm == 0.0 and e.count == n for e in ebs)
    check_ok(run_ranks(local3, lambda c: c.allreduce(xs[c.rank], error_buffer=ebs[c.rank])))
    norms = [e.norm for e in ebs]
    assert all(v > 0 for v in norms)
    images = [e.save() for e in ebs]
    assert all(isinstance(i, bytes) and len(i) == 56 + 4 * n for i in images)
    fresh = [qc.ErrorBuffer(c, n) for c in local3]
    for f, img, v in zip(fresh, images, norms):
        f.load(bytearray(img))
        assert f.norm == v
        assert f.save() == img
    # damaged image, another count, another rank: refused, buffer unchanged
    damaged = bytearray(images[0])
    damaged[-1] ^= 0xFF
    with pytest.raises(qc.CorruptDataError) as info:
        fresh[0].load(bytes(damaged))
    assert info.value.status == 7 and info.value.message
    with qc.ErrorBuffer(local3[0], n + 1) as other:
        with pytest.raises(qc.MismatchError):
            other.load(images[0])
    with pytest.raises(qc.MismatchError):
        fresh[1].load(images[0])
    assert fresh[0].norm == norms[0]
    fresh[0].reset()
    assert fresh[0].norm == 0.0
    for e in ebs + fresh:
        e.close()
        e.close()  # idempotent
    with pytest.raises(qc.InvalidArgumentError, match="closed"):
        ebs[0].norm


def test_emulate_with_error_buffers_matches_local():
    n = 1024
    policy = qc.Policy(codec="onebit", bucket_size=128, error_feedback=True, min_compress_bytes=0)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    ebs = [qc.ErrorBuffer(None, n) for _ in range(3)]
    emulated = qc.emulate_allreduce(xs, policy, error_buffers=ebs)
    comms = qc.Comm.local(3)
    for c in comms:
        c.set_layer_policy("*", policy)
    local_ebs = [qc.ErrorBuffer(c, n) for c in comms]
    outs = check_ok(run_ranks(comms, lambda c: c.allreduce(xs[c.rank], error_buffer=local_ebs[c.rank])))
    for e, o in zip(emulated, outs):
        assert e.tobytes() == o.tobytes()
    for a, b in zip(ebs, local_ebs):
        assert a.norm == b.norm > 0
    for c in comms:
        c.close()


# ---- codecs on their own ------------------------------------------------------------------


def test_encode_decode_round_trip():
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    data = qc.encode(x, qc.Policy())
    assert isinstance(data, bytes) and data[:4] == b"QCWF"
    np.testing.assert_array_equal(qc.decode(data, x.size), x)
    small = qc.encode(x, COMPRESSED)
    assert len(small) < len(data) // 4
    assert len(small) <= qc.encoded_size(COMPRESSED, x.size)
    y = qc.decode(small, x.size)
    assert y.dtype == np.float32 and np.abs(y - x).max() < 0.1
    h = qc.decode(small, x.size, dtype="float16")
    assert h.dtype == np.float16
    assert qc.decode(small, x.size, dtype=np.float16).dtype == np.float16
    assert qc.decode(small, x.size, dtype=np.dtype("float32")).dtype == np.float32
    out = np.empty_like(x)
    assert qc.decode(small, x.size, out=out) is out
    np.testing.assert_array_equal(out, y)
    x16 = x.astype(np.float16)
    np.testing.assert_array_equal(qc.decode(qc.encode(x16, qc.Policy()), x.size, "float16"), x16)
    with pytest.raises(qc.MismatchError):
        qc.decode(small, x.size + 1)
    bad = bytearray(small)
    bad[0:4] = b"XXXX"
    with pytest.raises(qc.CorruptDataError):
        qc.decode(bytes(bad), x.size)
    with pytest.raises(TypeError):
        qc.decode(small, x.size, dtype="int8")


# ---- alltoall and segments -----------------------------------------------------------------


def test_alltoall(local3):
    m = 50
    # rank r's block j holds 100*r + j
    xs = [np.concatenate([np.full(m, 100 * r + j, np.float32) for j in range(3)]) for r in range(3)]
    outs = check_ok(run_ranks(local3, lambda c: c.alltoall(xs[c.rank])))
    for r, o in enumerate(outs):
        for i in range(3):
            np.testing.assert_array_equal(o[i * m:(i + 1) * m], 100 * i + r)
    emulated = qc.emulate_alltoall(xs, qc.Policy())
    for e, o in zip(emulated, outs):
        assert e.tobytes() == o.tobytes()
    check_ok(run_ranks(local3, lambda c: c.alltoall(xs[c.rank], out=xs[c.rank], layer="experts")))
    for r in range(3):
        assert xs[r].tobytes() == outs[r].tobytes()
    with pytest.raises(ValueError, match="multiple"):
        local3[0].alltoall(np.zeros(10, np.float32))


def test_allreduce_segments(local3):
    counts, layers = [300, 20, 100], ["fc.weight", "fc.bias", None]
    for c in local3:
        c.set_layer_policy("fc.weight", COMPRESSED)
    xs = [np.full(420, r + 1, np.float32) for r in range(3)]
    outs = check_ok(run_ranks(local3, lambda c: c.allreduce_segments(xs[c.rank], counts, layers)))
    for o in outs:
        np.testing.assert_allclose(o, 6.0, rtol=1e-2)
        np.testing.assert_array_equal(o[300:], 6.0)  # codec none segments are exact
    assert {"fc.weight", "fc.bias", "*"} <= set(local3[0].layer_stats())
    with pytest.raises(ValueError, match="sum"):
        local3[0].allreduce_segments(xs[0], [1, 2], None)
    with pytest.raises(ValueError, match="entries"):
        local3[0].allreduce_segments(xs[0], [420], ["a", "b"])


# ---- lifetime -------------------------------------------------------------------------------


def test_close_and_context_manager():
    comms = qc.Comm.local(2)
    with comms[0] as c0, comms[1] as c1:
        assert (c0.rank, c0.size, c1.rank) == (0, 2, 1)
        assert "rank 0 of 2, open" in repr(c0)
    assert c0.closed and c1.closed and "closed" in repr(c0)
    c0.close()  # idempotent
    for call in (lambda: c0.allreduce(np.ones(4, np.float32)), c0.stats,
                 lambda: c0.set_layer_policy("*", qc.Policy()), lambda: qc.ErrorBuffer(c0, 4)):
        with pytest.raises(qc.InvalidArgumentError, match="closed"):
            call()
    assert c0.rank == 0  # cached, still readable


def test_unclosed_objects_are_collected_quietly():
    import gc

    comms = qc.Comm.local(3)
    eb = qc.ErrorBuffer(comms[0], 10)
    del comms, eb
    gc.collect()


def test_gil_released_and_one_thread_per_comm():
    import threading
    import time

    a, b = qc.Comm.local(2, timeout=30.0)
    x = np.ones(1000, np.float32)
    result = {}

    def rank0():
        result["out"] = a.allreduce(x)  # blocks until rank 1 arrives, GIL released

    t = threading.Thread(target=rank0, daemon=True)
    t.start()
    # While rank 0 waits inside qc, this thread runs Python code, and rank 0's
    # communicator refuses a second user instead of racing.
    deadline = time.monotonic() + 10
    while True:
        try:
            a.stats()
        except qc.InvalidArgumentError as e:
            assert "in use by another thread" in e.message
            break
        assert time.monotonic() < deadline, "rank 0 never entered the allreduce"
        time.sleep(0.01)
    with pytest.raises(qc.InvalidArgumentError, match="another thread"):
        a.close()
    b.allreduce(x)
    t.join(10)
    np.testing.assert_array_equal(result["out"], 2.0)
    a.close()
    b.close()


def test_adapt_policies(local3):
    for c in local3:
        c.set_layer_policy("*", COMPRESSED)
    rng = np.random.default_rng(9)
    a = [rng.standard_normal(4096).astype(np.float32) for _ in range(3)]
    b = [0.01 * rng.standard_normal(1024).astype(np.float32) for _ in range(3)]

    def body(c):
        c.allreduce(a[c.rank], layer="big")
        c.allreduce(b[c.rank], layer="small")
        return c.adapt_policies("kmeans", alpha=2.0, allowed_bits=[2, 4, 8])

    reports = check_ok(run_ranks(local3, body))
    assert reports[0] == reports[1] == reports[2]
    assert reports[0]["layers"] == 2 and reports[0]["predicted_error"] <= reports[0]["error_budget"]
    assert local3[0].get_layer_policy("big").bits in (2, 4, 8)
    with pytest.raises(ValueError, match="method"):
        local3[0].adapt_policies("random")


def test_emulate_writes_into_out_as_into_new_arrays():
    """out= gives the same bits as new outputs, reused across calls, as rows
    of one 2-D array and in place (out[i] is arrays[i])."""
    rng = np.random.default_rng(3)
    n, count = 5, 640
    xs = rng.standard_normal((n, count), dtype=np.float32)
    policy = qc.Policy(codec="minmax", bits=4, bucket_size=64, min_compress_bytes=0, algorithm="ring")
    fresh = qc.emulate_allreduce(list(xs), policy)
    out = np.full((n, count), np.nan, np.float32)
    for _ in range(2):  # the second call overwrites the first's values
        got = qc.emulate_allreduce(list(xs), policy, out=out)
        assert all(np.shares_memory(g, o) for g, o in zip(got, out))
        for f, g in zip(fresh, got):
            np.testing.assert_array_equal(f, g)
    inplace = xs.copy()
    got = qc.emulate_allreduce(list(inplace), policy, out=list(inplace))
    for f, g in zip(fresh, got):
        np.testing.assert_array_equal(f, g)
    np.testing.assert_array_equal(inplace[n - 1], fresh[n - 1])

    cases = [
        (qc.emulate_alltoall, {}, count),
        (qc.emulate_reduce_scatter, {}, count // n),
        (qc.emulate_allgather, {}, count * n),
        (qc.emulate_broadcast, {"root": 2}, count),
    ]
    for fn, kw, out_count in cases:
        new = fn(list(xs), policy, **kw)
        outs = [np.full(out_count, np.nan, np.float32) for _ in range(n)]
        got = fn(list(xs), policy, out=outs, **kw)
        for a, b, o in zip(new, got, outs):
            assert b is o
            np.testing.assert_array_equal(a.reshape(-1), b)


def test_emulate_accepts_a_2d_array_and_checks_inputs():
    xs = np.arange(12, dtype=np.float32).reshape(3, 4)
    outs = qc.emulate_allreduce(xs, qc.Policy())
    assert len(outs) == 3
    np.testing.assert_array_equal(outs[2], xs.sum(axis=0))
    with pytest.raises(ValueError, match="same dtype"):
        qc.emulate_allreduce([np.zeros(4, np.float32), np.zeros(5, np.float32)], qc.Policy())
    with pytest.raises(ValueError):
        qc.emulate_allreduce([], qc.Policy())
    with pytest.raises(TypeError, match="qc.Policy"):
        qc.emulate_allreduce([np.zeros(4, np.float32)], "minmax")
