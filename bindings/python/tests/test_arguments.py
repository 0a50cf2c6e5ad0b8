"""Every bad argument of the Python API gives a qc exception at the call.

The rule (docs/python.md, "Bad arguments"): a value of the right Python type
that qc cannot take (out of range, NaN, a name with a NUL, a size that does
not fit) raises qc.InvalidArgumentError (a ValueError); an argument of the
wrong Python type raises qc.ArgumentTypeError (a TypeError). Both are
qc.Error with status QC_ERROR_INVALID_ARGUMENT, raised by the call that got
the argument: never pybind11's "incompatible function arguments", a
KeyError later, an OverflowError, or a name silently cut at its first NUL.

Table driven: CASES lists (id, call, expected class). No MPI, no torch.
"""

import copy
import math
import pickle

import numpy as np
import pytest

import qc

BAD_VALUE = qc.InvalidArgumentError


class _Missing(Exception):
    """Stands in for qc.ArgumentTypeError where the package lacks it."""


BAD_TYPE = getattr(qc, "ArgumentTypeError", _Missing)
P = qc.Policy(codec="minmax", bits=4, bucket_size=64, min_compress_bytes=0)
P_TUPLE = P._to_tuple()
NAN, INF = float("nan"), float("inf")


class Env:
    """One rank of a local group of 1, an error buffer, an array, a message."""

    def __init__(self):
        (self.comm,) = qc.Comm.local(1, timeout=30.0)
        self.x = np.arange(8, dtype=np.float32)
        self.y = np.zeros(8, dtype=np.float32)
        self.eb = qc.ErrorBuffer(self.comm, 8)
        self.image = self.eb.save()
        self.msg = qc.encode(self.x, P)

    def close(self):
        self.eb.close()
        self.comm.close()


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def _policy_tuple(**fields):
    t = list(P_TUPLE)
    for name, value in fields.items():
        t[qc.POLICY_FIELDS.index(name)] = value
    return tuple(t)


def _bad_pickle():
    # the pickle of a valid policy with its codec renamed on the wire
    data = pickle.dumps(qc.Policy(codec="minmax"))
    assert data.count(b"minmax") == 1
    return data.replace(b"minmax", b"zzzzzz")


class _Transport:
    """A transport with the required methods (never used to send: rows fail first)."""

    def __init__(self, **overrides):
        self.__dict__.update(overrides)

    def post_send(self, peer, data):
        return None

    def post_recv(self, peer, data):
        return None

    def test(self, handle):
        return True


CASES = [
    # ---- names with an embedded NUL (C strings end there) ----
    ("set_layer_policy.pattern.nul", lambda e: e.comm.set_layer_policy("x\0a", P), BAD_VALUE),
    ("get_layer_policy.layer.nul", lambda e: e.comm.get_layer_policy("x\0b"), BAD_VALUE),
    ("policy_preset.name.nul", lambda e: e.comm.policy_preset("cgx\0zz"), BAD_VALUE),
    ("layer_stats.layer.nul", lambda e: e.comm.layer_stats("x\0b"), BAD_VALUE),
    ("allreduce.layer.nul", lambda e: e.comm.allreduce(e.x, layer="y\0z"), BAD_VALUE),
    ("allreduce_segments.layers.nul",
     lambda e: e.comm.allreduce_segments(e.x, [4, 4], ["a", "b\0c"]), BAD_VALUE),
    ("alltoall.layer.nul", lambda e: e.comm.alltoall(e.x, layer="y\0z"), BAD_VALUE),
    ("allreduce.op.nul", lambda e: e.comm.allreduce(e.x, op="sum\0"), BAD_VALUE),
    ("adapt_policies.method.nul", lambda e: e.comm.adapt_policies(method="kmeans\0"), BAD_VALUE),
    ("Policy.codec.nul", lambda e: qc.Policy(codec="minmax\0"), BAD_VALUE),
    ("Policy.rounding.nul", lambda e: qc.Policy(rounding="nearest\0x"), BAD_VALUE),
    ("Policy.algorithm.nul", lambda e: qc.Policy(algorithm="ring\0"), BAD_VALUE),
    ("decode.dtype.nul", lambda e: qc.decode(e.msg, 8, dtype="float32\0"), BAD_TYPE),
    ("_qc.set_layer_policy.nul", lambda e: e.comm._h.set_layer_policy("x\0a", P_TUPLE), BAD_VALUE),
    ("_qc.layer_stats.nul", lambda e: e.comm._h.layer_stats("x\0a"), BAD_VALUE),
    ("set_layer_policy.pattern.surrogate", lambda e: e.comm.set_layer_policy("x\ud800", P), BAD_VALUE),
    ("set_layer_policy.pattern.type", lambda e: e.comm.set_layer_policy(b"x", P), BAD_TYPE),
    ("allreduce.layer.type", lambda e: e.comm.allreduce(e.x, layer=3), BAD_TYPE),
    ("allreduce.op.type", lambda e: e.comm.allreduce(e.x, op=1), BAD_TYPE),
    ("allreduce.op.value", lambda e: e.comm.allreduce(e.x, op="max"), BAD_VALUE),
    ("policy_preset.name.unknown", lambda e: e.comm.policy_preset("nope"), BAD_VALUE),
    ("policy_preset.name.type", lambda e: e.comm.policy_preset(None), BAD_TYPE),
    # ---- ints out of C range, or not ints ----
    ("Comm.from_transport.no_methods", lambda e: qc.Comm.from_transport(object(), rank=0, size=2), BAD_TYPE),
    ("Comm.from_transport.no_rank", lambda e: qc.Comm.from_transport(_Transport(), size=2), BAD_TYPE),
    ("Comm.from_transport.rank.str", lambda e: qc.Comm.from_transport(_Transport(), rank="0", size=2), BAD_TYPE),
    ("Comm.from_transport.rank.past_size", lambda e: qc.Comm.from_transport(_Transport(), rank=2, size=2), BAD_VALUE),
    ("Comm.from_transport.size.0", lambda e: qc.Comm.from_transport(_Transport(), rank=0, size=0), BAD_VALUE),
    ("Comm.from_transport.size.2**40", lambda e: qc.Comm.from_transport(_Transport(), rank=0, size=2**40), BAD_VALUE),
    ("Comm.from_transport.any_thread.int", lambda e: qc.Comm.from_transport(_Transport(), 0, 2, any_thread=1), BAD_TYPE),
    ("Comm.from_transport.timeout.nan", lambda e: qc.Comm.from_transport(_Transport(), 0, 2, timeout=math.nan), BAD_VALUE),
    ("Comm.from_transport.test.not_callable", lambda e: qc.Comm.from_transport(_Transport(test=3), 0, 2), BAD_TYPE),
    ("Comm.local.n.2**40", lambda e: qc.Comm.local(2**40), BAD_VALUE),
    ("Comm.local.n.2**31", lambda e: qc.Comm.local(2**31), BAD_VALUE),
    ("Comm.local.n.np_int64", lambda e: qc.Comm.local(np.int64(2**40)), BAD_VALUE),
    ("Comm.local.n.-1", lambda e: qc.Comm.local(-1), BAD_VALUE),
    ("Comm.local.n.0", lambda e: qc.Comm.local(0), BAD_VALUE),
    ("Comm.local.n.float", lambda e: qc.Comm.local(1.5), BAD_TYPE),
    ("Comm.local.n.str", lambda e: qc.Comm.local("2"), BAD_TYPE),
    ("Comm.local.n.bool", lambda e: qc.Comm.local(True), BAD_TYPE),
    ("_qc.create_local.n.2**40", lambda e: qc._qc.Comm.create_local(2**40, 1.0), BAD_VALUE),
    ("ErrorBuffer.count.2**64", lambda e: qc.ErrorBuffer(e.comm, 2**64), BAD_VALUE),
    ("ErrorBuffer.count.-1", lambda e: qc.ErrorBuffer(e.comm, -1), BAD_VALUE),
    ("ErrorBuffer.count.float", lambda e: qc.ErrorBuffer(e.comm, 1.5), BAD_TYPE),
    ("ErrorBuffer.count.bool", lambda e: qc.ErrorBuffer(e.comm, True), BAD_TYPE),
    ("ErrorBuffer.count.str", lambda e: qc.ErrorBuffer(e.comm, "8"), BAD_TYPE),
    ("ErrorBuffer.comm.type", lambda e: qc.ErrorBuffer("comm", 8), BAD_TYPE),
    ("_qc.ErrorBuffer.count.2**64", lambda e: qc._qc.ErrorBuffer(None, 2**64), BAD_VALUE),
    ("encoded_size.count.-1", lambda e: qc.encoded_size(P, -1), BAD_VALUE),
    ("encoded_size.count.2**64", lambda e: qc.encoded_size(P, 2**64), BAD_VALUE),
    ("encoded_size.count.float", lambda e: qc.encoded_size(P, 1.5), BAD_TYPE),
    ("encoded_size.count.str", lambda e: qc.encoded_size(P, "8"), BAD_TYPE),
    ("encoded_size.policy.type", lambda e: qc.encoded_size("minmax", 8), BAD_TYPE),
    ("decode.count.-1", lambda e: qc.decode(e.msg, -1), BAD_VALUE),
    ("decode.count.2**64", lambda e: qc.decode(e.msg, 2**64), BAD_VALUE),
    ("decode.count.float", lambda e: qc.decode(e.msg, 8.9), BAD_TYPE),
    ("decode.count.huge", lambda e: qc.decode(e.msg, 2**50), qc.Error),
    ("decode.dtype.int8", lambda e: qc.decode(e.msg, 8, dtype="int8"), BAD_TYPE),
    ("segments.counts.float", lambda e: e.comm.allreduce_segments(e.x, [4.7, 3.3], None), BAD_TYPE),
    ("segments.counts.str", lambda e: e.comm.allreduce_segments(e.x, ["4", "4"], None), BAD_TYPE),
    ("segments.counts.-1", lambda e: e.comm.allreduce_segments(e.x, [-1, 9], None), BAD_VALUE),
    ("segments.counts.2**64", lambda e: e.comm.allreduce_segments(e.x, [2**64, 8], None), BAD_VALUE),
    ("segments.counts.int", lambda e: e.comm.allreduce_segments(e.x, 8, None), BAD_TYPE),
    ("segments.counts.sum", lambda e: e.comm.allreduce_segments(e.x, [4, 3], None), BAD_VALUE),
    ("segments.layers.str", lambda e: e.comm.allreduce_segments(e.x, [4, 4], "ab"), BAD_TYPE),
    ("segments.layers.len", lambda e: e.comm.allreduce_segments(e.x, [4, 4], ["a"]), BAD_VALUE),
    ("_qc.segments.counts.2**64",
     lambda e: e.comm._h.allreduce_segments(0, 0, [2**64], [None], 0, 0, None), BAD_VALUE),
    ("adapt_policies.allowed_bits.2**40", lambda e: e.comm.adapt_policies(allowed_bits=[2**40]), BAD_VALUE),
    ("adapt_policies.allowed_bits.float", lambda e: e.comm.adapt_policies(allowed_bits=[2.7]), BAD_TYPE),
    ("adapt_policies.allowed_bits.str", lambda e: e.comm.adapt_policies(allowed_bits="248"), BAD_TYPE),
    ("adapt_policies.allowed_bits.int", lambda e: e.comm.adapt_policies(allowed_bits=4), BAD_TYPE),
    ("adapt_policies.allowed_bits.empty", lambda e: e.comm.adapt_policies(allowed_bits=[]), BAD_VALUE),
    ("adapt_policies.method.type", lambda e: e.comm.adapt_policies(method=5), BAD_TYPE),
    ("adapt_policies.method.value", lambda e: e.comm.adapt_policies(method="max"), BAD_VALUE),
    ("Policy.bits.2**40", lambda e: qc.Policy(bits=2**40), BAD_VALUE),
    ("Policy.seed.2**64", lambda e: qc.Policy(seed=2**64), BAD_VALUE),
    ("Policy.min_compress_bytes.-1", lambda e: qc.Policy(min_compress_bytes=-1), BAD_VALUE),
    ("Policy.bits.float", lambda e: qc.Policy(bits=4.0), BAD_TYPE),
    ("Policy.error_feedback.2", lambda e: qc.Policy(error_feedback=2), BAD_VALUE),
    ("Policy.error_feedback.str", lambda e: qc.Policy(error_feedback="yes"), BAD_TYPE),
    ("Policy.codec.type", lambda e: qc.Policy(codec=None), BAD_TYPE),
    ("Policy.codec.int", lambda e: qc.Policy(codec=99), BAD_VALUE),
    ("error_class.status.str", lambda e: qc.error_class("x"), BAD_TYPE),
    ("_qc.status_string.2**40", lambda e: qc._qc.status_string(2**40), BAD_VALUE),
    ("_qc.policy_check.bits.2**40", lambda e: qc._qc.policy_check(_policy_tuple(bits=2**40)), BAD_VALUE),
    ("_qc.policy_check.seed.-1", lambda e: qc._qc.policy_check(_policy_tuple(seed=-1)), BAD_VALUE),
    ("_qc.policy_check.bits.str", lambda e: qc._qc.policy_check(_policy_tuple(bits="4")), BAD_TYPE),
    ("_qc.policy_check.short", lambda e: qc._qc.policy_check(P_TUPLE[:10]), BAD_VALUE),
    ("_qc.policy_check.list", lambda e: qc._qc.policy_check(list(P_TUPLE)), BAD_TYPE),
    # ---- floats: NaN, inf, out of range, not numbers ----
    ("Comm.local.timeout.nan", lambda e: qc.Comm.local(1, timeout=NAN), BAD_VALUE),
    ("Comm.local.timeout.inf", lambda e: qc.Comm.local(1, timeout=INF), BAD_VALUE),
    ("Comm.local.timeout.0", lambda e: qc.Comm.local(1, timeout=0), BAD_VALUE),
    ("Comm.local.timeout.-1", lambda e: qc.Comm.local(1, timeout=-1.0), BAD_VALUE),
    ("Comm.local.timeout.10**400", lambda e: qc.Comm.local(1, timeout=10**400), BAD_VALUE),
    ("Comm.local.timeout.str", lambda e: qc.Comm.local(1, timeout="5"), BAD_TYPE),
    ("Comm.local.timeout.None", lambda e: qc.Comm.local(1, timeout=None), BAD_TYPE),
    ("Policy.topk_ratio.nan", lambda e: qc.Policy(codec="topk", topk_ratio=NAN), BAD_VALUE),
    ("Policy.topk_ratio.inf", lambda e: qc.Policy(codec="topk", topk_ratio=INF), BAD_VALUE),
    ("Policy.topk_ratio.10**400", lambda e: qc.Policy(codec="topk", topk_ratio=10**400), BAD_VALUE),
    ("Policy.topk_ratio.1e300", lambda e: qc.Policy(codec="topk", topk_ratio=1e300), BAD_VALUE),
    ("Policy.topk_ratio.str", lambda e: qc.Policy(codec="topk", topk_ratio="0.5"), BAD_TYPE),
    ("adapt_policies.alpha.nan", lambda e: e.comm.adapt_policies(alpha=NAN), BAD_VALUE),
    ("adapt_policies.alpha.10**400", lambda e: e.comm.adapt_policies(alpha=10**400), BAD_VALUE),
    ("adapt_policies.alpha.str", lambda e: e.comm.adapt_policies(alpha="2"), BAD_TYPE),
    ("_qc.policy_check.topk.1e300",
     lambda e: qc._qc.policy_check(_policy_tuple(codec=8, topk_ratio=1e300)), BAD_VALUE),
    # ---- bytes and buffers ----
    ("ErrorBuffer.load.int", lambda e: e.eb.load(10), BAD_TYPE),
    ("ErrorBuffer.load.huge_int", lambda e: e.eb.load(2**40), BAD_TYPE),
    ("ErrorBuffer.load.str", lambda e: e.eb.load("abc"), BAD_TYPE),
    ("ErrorBuffer.load.strided", lambda e: e.eb.load(memoryview(e.image + e.image)[::2]), BAD_VALUE),
    ("decode.data.int", lambda e: qc.decode(5, 8), BAD_TYPE),
    ("decode.data.str", lambda e: qc.decode("abc", 8), BAD_TYPE),
    ("decode.data.strided", lambda e: qc.decode(memoryview(e.msg + e.msg)[::2], 8), BAD_VALUE),
    ("_qc.decode.data.int", lambda e: qc._qc.decode(5, 0, 8, 0), BAD_TYPE),
    ("allreduce.x.list", lambda e: e.comm.allreduce([1.0, 2.0]), BAD_TYPE),
    ("allreduce.x.int64", lambda e: e.comm.allreduce(np.ones(3, np.int64)), BAD_TYPE),
    ("allreduce.x.big_endian", lambda e: e.comm.allreduce(np.zeros(8, ">f4")), BAD_TYPE),
    ("allreduce.x.strided", lambda e: e.comm.allreduce(np.ones(6, np.float32)[::2]), BAD_VALUE),
    ("allreduce.x.misaligned",
     lambda e: e.comm.allreduce(np.frombuffer(bytearray(33), np.float32, 8, 1)), BAD_VALUE),
    ("allreduce.out.read_only",
     lambda e: e.comm.allreduce(e.x, out=np.frombuffer(bytes(32), np.float32)), BAD_VALUE),
    ("allreduce.out.dtype", lambda e: e.comm.allreduce(e.x, out=np.zeros(8, np.float16)), BAD_TYPE),
    ("allreduce.out.size", lambda e: e.comm.allreduce(e.x, out=np.zeros(9, np.float32)), BAD_VALUE),
    ("allreduce.out.positional_op", lambda e: e.comm.allreduce(e.x, "avg"), BAD_TYPE),
    ("allreduce.error_buffer.type", lambda e: e.comm.allreduce(e.x, error_buffer="eb"), BAD_TYPE),
    ("alltoall.x.size", lambda e: qc.Comm.local(2)[0].alltoall(np.ones(3, np.float32)), BAD_VALUE),
    ("reduce_scatter.layer.nul", lambda e: e.comm.reduce_scatter(e.x, layer="y\0z"), BAD_VALUE),
    ("reduce_scatter.op.value", lambda e: e.comm.reduce_scatter(e.x, op="max"), BAD_VALUE),
    ("reduce_scatter.x.int64", lambda e: e.comm.reduce_scatter(np.ones(3, np.int64)), BAD_TYPE),
    ("reduce_scatter.x.size", lambda e: qc.Comm.local(2)[0].reduce_scatter(np.ones(3, np.float32)), BAD_VALUE),
    ("reduce_scatter.out.size", lambda e: e.comm.reduce_scatter(e.x, out=np.zeros(9, np.float32)), BAD_VALUE),
    ("reduce_scatter.error_buffer.type", lambda e: e.comm.reduce_scatter(e.x, error_buffer=1), BAD_TYPE),
    ("allgather.layer.type", lambda e: e.comm.allgather(e.x, layer=3), BAD_TYPE),
    ("allgather.x.strided", lambda e: e.comm.allgather(np.ones(6, np.float32)[::2]), BAD_VALUE),
    ("allgather.out.dtype", lambda e: e.comm.allgather(e.x, out=np.zeros(8, np.float16)), BAD_TYPE),
    ("broadcast.root.range", lambda e: e.comm.broadcast(e.x, 1), BAD_VALUE),
    ("broadcast.root.2**40", lambda e: e.comm.broadcast(e.x, 2**40), BAD_VALUE),
    ("broadcast.root.float", lambda e: e.comm.broadcast(e.x, 0.0), BAD_TYPE),
    ("broadcast.x.none_on_root", lambda e: e.comm.broadcast(None, 0, out=e.x), BAD_VALUE),
    ("broadcast.out.read_only",
     lambda e: e.comm.broadcast(e.x, 0, out=np.frombuffer(bytes(32), np.float32)), BAD_VALUE),
    ("ibroadcast.root.range", lambda e: e.comm.ibroadcast(e.x, -1), BAD_VALUE),
    ("ireduce_scatter.op.type", lambda e: e.comm.ireduce_scatter(e.x, op=1), BAD_TYPE),
    ("iallgather.layer.nul", lambda e: e.comm.iallgather(e.x, layer="a\0b"), BAD_VALUE),
    ("_qc.broadcast.root.2**31", lambda e: e.comm._h.broadcast(0, 0, 0, 0, 2**31, None), BAD_VALUE),
    ("_qc.reduce_scatter.recvcount.2**64",
     lambda e: e.comm._h.reduce_scatter(0, 0, 2**64, 0, 0, None, None), BAD_VALUE),
    ("emulate.arrays.empty", lambda e: qc.emulate_allreduce([], P), BAD_VALUE),
    ("emulate.arrays.1d", lambda e: qc.emulate_allreduce(e.x, P), BAD_VALUE),
    ("emulate.arrays.mixed",
     lambda e: qc.emulate_allreduce([e.x, np.zeros(8, np.float16)], P), BAD_VALUE),
    ("emulate.op.value", lambda e: qc.emulate_allreduce([e.x, e.x], P, op="max"), BAD_VALUE),
    ("emulate.error_buffers.type",
     lambda e: qc.emulate_allreduce([e.x, e.x], P, error_buffers=[1, None]), BAD_TYPE),
    ("emulate.error_buffers.len",
     lambda e: qc.emulate_allreduce([e.x, e.x], P, error_buffers=[None]), BAD_VALUE),
    ("emulate.policy.type", lambda e: qc.emulate_alltoall([e.x, e.x], "minmax"), BAD_TYPE),
    ("emulate.layer.type", lambda e: qc.emulate_allreduce([e.x, e.x], P, layer=3), BAD_TYPE),
    ("emulate.layer.nul", lambda e: qc.emulate_alltoall([e.x, e.x], P, layer="a\0b"), BAD_VALUE),
    ("emulate.call_index.-1", lambda e: qc.emulate_allreduce([e.x, e.x], P, call_index=-1), BAD_VALUE),
    ("emulate.call_index.str", lambda e: qc.emulate_alltoall([e.x, e.x], P, call_index="4"), BAD_TYPE),
    ("emulate_reduce_scatter.op.value", lambda e: qc.emulate_reduce_scatter([e.x, e.x], P, op="max"), BAD_VALUE),
    ("emulate_reduce_scatter.arrays.size",
     lambda e: qc.emulate_reduce_scatter([e.x, e.x, e.x], P), BAD_VALUE),
    ("emulate_allgather.error_buffers.type",
     lambda e: qc.emulate_allgather([e.x, e.x], P, error_buffers=[1, None]), BAD_TYPE),
    ("emulate_allgather.call_index.-1", lambda e: qc.emulate_allgather([e.x, e.x], P, call_index=-1), BAD_VALUE),
    ("emulate_broadcast.root.range", lambda e: qc.emulate_broadcast([e.x, e.x], P, 2), BAD_VALUE),
    ("emulate_broadcast.root.str", lambda e: qc.emulate_broadcast([e.x, e.x], P, "0"), BAD_TYPE),
    ("emulate_broadcast.arrays.none", lambda e: qc.emulate_broadcast([None, None], P, 0), BAD_VALUE),
    ("emulate_broadcast.layer.nul", lambda e: qc.emulate_broadcast([e.x, None], P, 0, layer="a\0b"), BAD_VALUE),
    ("emulate.out.len", lambda e: qc.emulate_allreduce([e.x, e.x], P, out=[e.x.copy()]), BAD_VALUE),
    ("emulate.out.type", lambda e: qc.emulate_allreduce([e.x, e.x], P, out=3), BAD_TYPE),
    ("emulate.out.dtype",
     lambda e: qc.emulate_allreduce([e.x, e.x], P, out=[np.zeros(8, np.float16)] * 2), BAD_TYPE),
    ("emulate.out.count",
     lambda e: qc.emulate_allreduce([e.x, e.x], P, out=[np.zeros(9, np.float32) for _ in "ab"]), BAD_VALUE),
    ("emulate.out.shared", lambda e: qc.emulate_allreduce([e.x, e.x], P, out=[e.y, e.y]), BAD_VALUE),
    ("emulate.out.readonly", lambda e: qc.emulate_allreduce(
        [e.x, e.x], P, out=[np.frombuffer(bytes(32), np.float32), e.y]), BAD_VALUE),
    ("emulate.out.other_input",
     lambda e: qc.emulate_allreduce([e.x, e.y], P, out=[e.y, e.x.copy()]), BAD_VALUE),
    ("emulate_alltoall.out.in_place", lambda e: qc.emulate_alltoall([e.x, e.y], P, out=[e.x, e.y]), BAD_VALUE),
    ("emulate_reduce_scatter.out.count",
     lambda e: qc.emulate_reduce_scatter([e.x, e.x], P, out=[e.y, e.y.copy()]), BAD_VALUE),
    ("emulate_broadcast.out.root_input",
     lambda e: qc.emulate_broadcast([e.x, None], P, 0, out=[e.y, e.x[:8]]), BAD_VALUE),
    ("_qc.emulate_broadcast.sends.len",
     lambda e: qc._qc.emulate_broadcast(2, [0], [0, 0], 0, 0, 0, None, 0, P_TUPLE), BAD_VALUE),
    ("sparse_allreduce.values.1d", lambda e: e.comm.sparse_allreduce(np.arange(8), e.x), BAD_VALUE),
    ("sparse_allreduce.indices.float",
     lambda e: e.comm.sparse_allreduce(e.x, e.x.reshape(8, 1)), BAD_TYPE),
    ("sparse_allreduce.indices.negative",
     lambda e: e.comm.sparse_allreduce(np.arange(8) - 1, e.x.reshape(8, 1)), BAD_VALUE),
    ("sparse_allreduce.layer.nul",
     lambda e: e.comm.sparse_allreduce(np.arange(8), e.x.reshape(8, 1), layer="a\0b"), BAD_VALUE),
    ("sparse_allreduce.op.value",
     lambda e: e.comm.sparse_allreduce(np.arange(8), e.x.reshape(8, 1), op="max"), BAD_VALUE),
    ("sparse_allreduce.nrows.small",
     lambda e: e.comm.sparse_allreduce(np.arange(8), e.x.reshape(8, 1), nrows=4), BAD_VALUE),
    ("sparse_allreduce.nrows.str",
     lambda e: e.comm.sparse_allreduce(np.arange(8), e.x.reshape(8, 1), nrows="8"), BAD_TYPE),
    ("_qc.sparse_allreduce.row_len.2**64",
     lambda e: e.comm._h.sparse_allreduce(0, 0, 0, 2**64, 0, 0, None), BAD_VALUE),
    ("_qc.SparseResult.closed",
     lambda e: _closed(e.comm._h.sparse_allreduce(0, 0, 0, 1, 0, 0, None)).nnz(), BAD_VALUE),
    ("isparse_allreduce.values.3d",
     lambda e: e.comm.isparse_allreduce(np.arange(2), e.x.reshape(2, 2, 2)), BAD_VALUE),
    ("isparse_allreduce.out.dtype",
     lambda e: e.comm.isparse_allreduce(np.arange(8), e.x.reshape(8, 1), out=np.zeros(8, np.float16)), BAD_TYPE),
    ("emulate_sparse_allreduce.inputs.pair",
     lambda e: qc.emulate_sparse_allreduce([(np.arange(8),)], P), BAD_TYPE),
    ("emulate_sparse_allreduce.inputs.row_len",
     lambda e: qc.emulate_sparse_allreduce([(np.arange(8), e.x.reshape(8, 1)),
                                            (np.arange(4), e.x.reshape(4, 2))], P), BAD_VALUE),
    ("emulate_sparse_allreduce.call_index.-1",
     lambda e: qc.emulate_sparse_allreduce([(np.arange(8), e.x.reshape(8, 1))], P, call_index=-1), BAD_VALUE),
    ("_qc.emulate_sparse_allreduce.nnz.len",
     lambda e: qc._qc.emulate_sparse_allreduce(2, [0, 0], [0, 0], [0], 1, 0, 0, None, 0, P_TUPLE), BAD_VALUE),
    ("load_state.int", lambda e: e.comm.load_state(10), BAD_TYPE),
    ("load_state.strided", lambda e: e.comm.load_state(memoryview(e.image + e.image)[::2]), BAD_VALUE),
    ("Comm.handle.type", lambda e: qc.Comm(1, "local"), BAD_TYPE),
    # ---- keyword misuse the package sees (an unknown keyword of a def is Python's own TypeError) ----
    ("Policy.replace.unknown", lambda e: P.replace(bitz=2), BAD_TYPE),
    ("allreduce.positional_layer", lambda e: e.comm.allreduce(e.x, None, "sum", 5), BAD_TYPE),
    # ---- pickling and copying ----
    ("pickle.Comm", lambda e: pickle.dumps(e.comm), BAD_TYPE),
    ("copy.Comm", lambda e: copy.copy(e.comm), BAD_TYPE),
    ("deepcopy.Comm", lambda e: copy.deepcopy(e.comm), BAD_TYPE),
    ("pickle.ErrorBuffer", lambda e: pickle.dumps(e.eb), BAD_TYPE),
    ("copy.ErrorBuffer", lambda e: copy.copy(e.eb), BAD_TYPE),
    ("deepcopy.ErrorBuffer", lambda e: copy.deepcopy(e.eb), BAD_TYPE),
    ("pickle._qc.Comm", lambda e: pickle.dumps(e.comm._h), BAD_TYPE),
    ("copy._qc.ErrorBuffer", lambda e: copy.copy(e.eb._h), BAD_TYPE),
    ("copy._qc.SparseResult", lambda e: copy.copy(e.comm._h.sparse_allreduce(0, 0, 0, 1, 0, 0, None)), BAD_TYPE),
    ("unpickle.Policy.codec", lambda e: pickle.loads(_bad_pickle()), BAD_VALUE),
    ("setstate.Policy.bits", lambda e: qc.Policy().__setstate__(dict(qc.Policy().to_dict(), bits=99)),
     BAD_VALUE),
    ("setstate.Policy.unknown", lambda e: qc.Policy().__setstate__({"bitz": 4}), BAD_VALUE),
    ("setstate.Policy.type", lambda e: qc.Policy().__setstate__([("bits", 4)]), BAD_TYPE),
]


def _closed(handle):
    handle.close()
    return handle


@pytest.mark.parametrize("call, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_raises_qc_error_at_the_call(env, call, expected):
    with pytest.raises(Exception) as info:
        call(env)
    e = info.value
    assert isinstance(e, expected), f"{type(e).__module__}.{type(e).__name__}: {e}"
    assert isinstance(e, qc.Error), f"not a qc.Error: {type(e).__name__}: {e}"
    text = str(e)
    assert "incompatible function arguments" not in text and "Unable to cast" not in text, text
    if expected is BAD_VALUE:
        assert isinstance(e, ValueError) and not isinstance(e, TypeError)
        assert e.status == 1 and e.status_name == "QC_ERROR_INVALID_ARGUMENT"
    if expected is BAD_TYPE:
        assert isinstance(e, TypeError) and not isinstance(e, ValueError)
        assert e.status == 1 and e.status_name == "QC_ERROR_INVALID_ARGUMENT"


def test_every_entry_point_has_a_case():
    """A public callable added without a row in CASES fails here."""
    covered = " ".join(c[0] for c in CASES)
    names = ["Comm.local", "set_layer_policy", "get_layer_policy", "policy_preset", "layer_stats",
             "allreduce", "segments", "alltoall", "reduce_scatter", "allgather", "broadcast",
             "ireduce_scatter", "iallgather", "ibroadcast", "emulate_reduce_scatter", "emulate_allgather",
             "emulate_broadcast", "sparse_allreduce", "isparse_allreduce",
             "emulate_sparse_allreduce", "adapt_policies", "ErrorBuffer", "encoded_size",
             "decode", "emulate", "Policy", "error_class", "pickle", "copy", "load_state"]
    for name in names:
        assert name in covered, name
    public = {n for n in qc.__all__ if callable(getattr(qc, n)) and not isinstance(getattr(qc, n), type)}
    assert public <= {"library_version", "error_class", "encode", "decode", "encoded_size",
                      "emulate_allreduce", "emulate_alltoall", "emulate_reduce_scatter", "emulate_allgather",
                      "emulate_broadcast", "emulate_sparse_allreduce"}, public


def test_nul_names_are_not_cut(env):
    """'x\\0a' and 'x\\0b' used to both act on layer 'x': nothing of the kind happens."""
    c = env.comm
    with pytest.raises(qc.InvalidArgumentError, match="NUL"):
        c.set_layer_policy("x\0a", P)
    assert c.get_layer_policy("x") == qc.Policy()  # "x" was not set
    with pytest.raises(qc.InvalidArgumentError, match="NUL"):
        c.allreduce(env.x, layer="y\0z")
    assert "y" not in c.layer_names()
    with pytest.raises(qc.InvalidArgumentError, match="NUL"):
        c.policy_preset("cgx\0zz")
    assert c.get_layer_policy("fc.bias") == qc.Policy()  # the cgx preset was not applied
    # the message names the argument and where the NUL is
    with pytest.raises(qc.InvalidArgumentError, match=r"argument 'pattern'.*NUL.*index 1"):
        c.set_layer_policy("x\0a", P)


def test_unpickled_policy_is_validated_at_load():
    with pytest.raises(qc.InvalidArgumentError, match="codec"):
        pickle.loads(_bad_pickle())


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_policy_pickle_and_copy_round_trip(protocol):
    p = qc.Policy(codec="topk", topk_ratio=0.25, seed=2**64 - 1, error_feedback=True, algorithm="sra")
    for q in (pickle.loads(pickle.dumps(p, protocol)), copy.copy(p), copy.deepcopy(p)):
        assert q == p and q is not p
        q.bits = 2
        assert p.bits == 4


def test_error_with_only_a_message():
    e = qc.InvalidArgumentError("bad thing")
    assert e.status == 1 and e.message == "bad thing" and str(e) == "bad thing [QC_ERROR_INVALID_ARGUMENT]"


def test_error_classes_pickle():
    for cls in (qc.Error, qc.InvalidArgumentError, BAD_TYPE, qc.MismatchError):
        e = cls(1, "message")
        f = pickle.loads(pickle.dumps(e))
        assert type(f) is cls and f.message == "message" and f.status == e.status


def test_good_buffers_still_accepted(env):
    """bytes-like arguments: bytes, bytearray, memoryview, uint8 arrays."""
    for data in (env.image, bytearray(env.image), memoryview(env.image), np.frombuffer(env.image, np.uint8)):
        env.eb.load(data)
    for data in (env.msg, bytearray(env.msg), memoryview(env.msg)):
        np.testing.assert_array_equal(qc.decode(data, 8), qc.decode(env.msg, 8))
    # numpy integers are ints
    assert qc.encoded_size(P, np.uint64(8)) == qc.encoded_size(P, 8)
    env.comm.allreduce_segments(env.x, [np.int64(4), 4], [None, "a"], out=env.x)
    assert qc.Comm.local(np.int32(1))[0].size == 1


def test_torch_tensor_arguments():
    torch = pytest.importorskip("torch")
    (c,) = qc.Comm.local(1)
    with c:
        raw = torch.zeros(9, dtype=torch.float32)
        misaligned = torch.frombuffer(bytearray(33), dtype=torch.float32, count=8, offset=1)
        with pytest.raises(BAD_VALUE, match="aligned"):
            c.allreduce(misaligned)
        with pytest.raises(BAD_TYPE, match="dtype"):
            c.allreduce(torch.zeros(4, dtype=torch.int32))
        with pytest.raises(BAD_VALUE, match="contiguous"):
            c.allreduce(raw[::2])
        c.allreduce(raw[1:], out=raw[1:])  # a view at an element offset is fine
