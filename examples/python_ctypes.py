#!/usr/bin/env python3
"""python_ctypes.py - qc from Python with nothing but ctypes (no compiler).

This example uses libqc.so through its C ABI exactly as a C program sees it
(include/qc.h): growable structs that start with ``struct_size``, the
``*_init`` functions, ``qc_status_t`` return codes and ``qc_last_error()``.
It needs only the Python standard library; numpy is used when it is there
(zero-copy: ``arr.ctypes.data_as(c_void_p)``) and plain ctypes float arrays
otherwise.  The Python package ``qc`` (bindings/python) is the comfortable
API; this file is the "no compiler needed" path, and CTest runs it so that it
keeps working as the ABI grows.

Running it
----------
    /usr/bin/python3 examples/python_ctypes.py [path/to/libqc.so] [--no-numpy]

The library is taken from the first argument, else from the environment
variable ``QC_LIBRARY``, else from ``ctypes.util.find_library("qc")`` (an
installed qc: ldconfig's cache or LD_LIBRARY_PATH).  In a build tree it is
``build/src/libqc.so``; CTest passes ``$<TARGET_FILE:qc>`` (tests
``example_python_ctypes`` and ``example_python_ctypes_nonumpy``, label
``python``).  Use Debian's ``/usr/bin/python3``: it has numpy.  The exit
status is 0 only when every check below passed.

What it shows, in order
-----------------------
1. Loading the library, ``qc_version_string`` / ``qc_version_number``.
2. ABI guard: the ctypes mirrors of ``qc_policy_t``, ``qc_comm_config_t`` and
   ``qc_stats_t`` below are compared with the running library (see "Keeping
   the mirrors in step with qc.h").  A mismatch stops the example with a
   message that says which struct to update.
3. ``qc_policy_init_sized`` and then fields set by hand (codec minmax, 4 bits,
   bucket 128, algorithm SRA, ``min_compress_bytes`` 0 so that a small
   tensor is still compressed); an invalid policy (bits = 0) gives
   ``QC_ERROR_INVALID_ARGUMENT`` and a message from ``qc_last_error``.
4. ``qc_comm_create_local_with_config``: three ranks in this process, each
   driven by its own Python thread.  ctypes releases the GIL for the whole
   foreign call (``ctypes.CDLL``, not ``PyDLL``), so the ranks really run
   at once and meet inside ``qc_allreduce``.
5. ``qc_allreduce`` of float32 data: the result is within the 4-bit minmax
   error bound of the exact sum (docs/fidelity.md, "Per-hop error bound for
   minmax") and bit-identical on every rank.
6. Error feedback: an error buffer per rank (``qc_error_buffer_create``) and
   the same input reduced eight times; the mean of the outputs is much closer
   to the exact sum than one call without error feedback, and the residuals
   are nonzero (``qc_error_buffer_norm``).
7. ``qc_comm_get_stats``: bytes on the wire below the logical bytes.
8. ``qc_comm_destroy`` for every rank.

Writing the ctypes side of a C ABI
----------------------------------
* Every function gets ``argtypes`` and ``restype`` (``_bind`` below).
  Without them ctypes passes Python ints as C ``int`` and truncates 64-bit
  pointers and ``size_t`` counts.  C enums (``qc_status_t``, ``qc_codec_t``,
  ...) are ``int`` in size and calling convention: ``c_int``.  Opaque handles
  (``qc_comm_t``, ``qc_error_buffer_t``) are ``c_void_p``.
* Every status is checked (``check``); on failure the exception carries
  ``qc_status_string(status)`` and ``qc_last_error()``.  The message is per
  thread, so it has to be read by the thread whose call failed: ``check``
  runs right after the call, in that thread.
* A communicator is used by one thread at a time.  The three ranks of a
  local group are three communicators, one per thread; policies are set
  before the threads start.

Keeping the mirrors in step with qc.h
-------------------------------------
The ``Structure`` classes below copy the C structs field by field, in order,
with the same C types (``size_t`` -> ``c_size_t``, ``int`` and enums ->
``c_int``, ``float`` -> ``c_float``, ``double`` -> ``c_double``,
``int64_t``/``uint64_t`` -> ``c_int64``/``c_uint64``, pointers ->
``c_void_p``); ctypes then applies the platform's C alignment and padding.
``struct_size`` is set to ``ctypes.sizeof`` of the mirror, as
``sizeof(qc_policy_t)`` in C.  The library reads and writes only the
``struct_size`` bytes the caller says it has and reports back how many it
filled, so an older mirror keeps working with a newer library; that is the
ABI's promise to programs.  This example, which lives next to the header,
is stricter, and ``check_layout`` fails when:
  * the library rejects the mirror's size with ``QC_ERROR_VERSION`` (the
    mirror is larger than the library's struct: wrong field, or an older
    library), or fills fewer bytes than the mirror has;
  * the library accepts a ``struct_size`` one byte larger than the mirror:
    its struct has grown (a field was appended to qc.h) and the mirror
    here was not updated; the message gives the library's size;
  * the defaults written by ``qc_policy_init_sized`` / ``qc_comm_config_init_sized``
    differ from ``QC_POLICY_INIT`` / ``QC_COMM_CONFIG_INIT`` (a field
    moved or changed type without changing the size).
When qc.h appends a field, append it to the mirror (and to the expected
defaults) and this example passes again.
"""

import argparse
import ctypes
import ctypes.util
import math
import os
import random
import sys
import threading
from ctypes import (POINTER, byref, c_char_p, c_double, c_float, c_int, c_int64,
                    c_size_t, c_uint64, c_void_p)

try:
    import numpy as np
except ImportError:  # numpy is optional: ctypes arrays do the same job
    np = None

# --------------------------------------------------------------------------
# Constants from include/qc.h. Their values are pinned by the header
# ("explicit values, fixed once released"), so copying them is safe.
# --------------------------------------------------------------------------
QC_SUCCESS = 0
QC_ERROR_INVALID_ARGUMENT = 1
QC_ERROR_OUT_OF_MEMORY = 2
QC_ERROR_UNSUPPORTED = 3
QC_ERROR_TRANSPORT = 4
QC_ERROR_MISMATCH = 5
QC_ERROR_TIMEOUT = 6
QC_ERROR_CORRUPT_DATA = 7
QC_ERROR_VERSION = 8
QC_ERROR_INTERNAL = 9

QC_DTYPE_FLOAT32 = 0
QC_OP_SUM = 0

QC_CODEC_NONE = 0
QC_CODEC_MINMAX = 3

QC_ALGO_AUTO = 0
QC_ALGO_SRA = 3

QC_ROUND_AUTO = 2
QC_SCALE_AUTO = 0
QC_TRANSPORT_LOCAL = 0


# --------------------------------------------------------------------------
# Struct mirrors: same fields, same order, same C types as include/qc.h.
# --------------------------------------------------------------------------
class QcPolicy(ctypes.Structure):
    """qc_policy_t."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("codec", c_int),                # qc_codec_t
        ("bits", c_int),
        ("bucket_size", c_int),
        ("rounding", c_int),             # qc_rounding_t
        ("algorithm", c_int),            # qc_algorithm_t
        ("error_feedback", c_int),
        ("group_size", c_int),
        ("topk_ratio", c_float),
        ("scale_update_period", c_int),
        ("seed", c_uint64),
        # appended after the first layout
        ("min_compress_bytes", c_size_t),
        ("scale", c_int),                # qc_scale_t
    ]


class QcCommConfig(ctypes.Structure):
    """qc_comm_config_t."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("transport", c_int),            # qc_transport_t
        ("mpi_comm", c_int64),
        ("nccl_comm", c_void_p),
        ("timeout_seconds", c_double),
    ]


class QcStats(ctypes.Structure):
    """qc_stats_t."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("calls", c_uint64),
        ("logical_bytes", c_uint64),
        ("wire_bytes", c_uint64),
        ("codec_seconds", c_double),
        ("transport_seconds", c_double),
        ("codec_seconds_in_flight", c_double),
    ]


# QC_POLICY_INIT and QC_COMM_CONFIG_INIT, field by field (struct_size aside).
POLICY_DEFAULTS = {
    "codec": QC_CODEC_NONE, "bits": 4, "bucket_size": 128,
    "rounding": QC_ROUND_AUTO, "algorithm": QC_ALGO_AUTO,
    "error_feedback": 0, "group_size": 8, "topk_ratio": c_float(0.01).value,
    "scale_update_period": 1, "seed": 0, "min_compress_bytes": 16384, "scale": QC_SCALE_AUTO,
}
COMM_CONFIG_DEFAULTS = {
    "transport": QC_TRANSPORT_LOCAL, "mpi_comm": 0, "nccl_comm": None,
    "timeout_seconds": 300.0,
}


class QcError(RuntimeError):
    """A qc call that returned something other than QC_SUCCESS."""

    def __init__(self, what, status, name, message):
        super().__init__("%s failed: %s (%d): %s" % (what, name, status, message))
        self.status = status
        self.message = message


class CheckFailed(Exception):
    """A result of this example that is not what qc promises."""


# --------------------------------------------------------------------------
# Loading the library and declaring the functions used here.
# --------------------------------------------------------------------------
def find_library(cli_path):
    """cli argument, then $QC_LIBRARY, then the system's search."""
    if cli_path:
        return cli_path, "command line"
    if os.environ.get("QC_LIBRARY"):
        return os.environ["QC_LIBRARY"], "QC_LIBRARY"
    found = ctypes.util.find_library("qc")
    if found:
        return found, 'ctypes.util.find_library("qc")'
    return None, None


def _bind(lib, name, restype, argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


def declare(lib):
    """argtypes/restype for every function this example calls."""
    status = c_int  # qc_status_t
    comm_t = c_void_p  # qc_comm_t (opaque)
    ebuf_t = c_void_p  # qc_error_buffer_t (opaque)
    _bind(lib, "qc_version_number", c_int, [])
    _bind(lib, "qc_version_string", c_char_p, [])
    _bind(lib, "qc_status_string", c_char_p, [status])
    _bind(lib, "qc_last_error", c_char_p, [])
    # The init calls of a language without macros: the caller's sizeof passed.
    _bind(lib, "qc_policy_init_sized", status, [POINTER(QcPolicy), c_size_t])
    _bind(lib, "qc_comm_config_init_sized", status, [POINTER(QcCommConfig), c_size_t])
    _bind(lib, "qc_comm_create_local_with_config", status,
          [c_int, POINTER(QcCommConfig), POINTER(comm_t)])
    _bind(lib, "qc_comm_destroy", status, [comm_t])
    _bind(lib, "qc_comm_rank", status, [comm_t, POINTER(c_int)])
    _bind(lib, "qc_comm_size", status, [comm_t, POINTER(c_int)])
    _bind(lib, "qc_comm_get_stats", status, [comm_t, POINTER(QcStats)])
    _bind(lib, "qc_comm_set_layer_policy", status, [comm_t, c_char_p, POINTER(QcPolicy)])
    _bind(lib, "qc_comm_get_layer_policy", status, [comm_t, c_char_p, POINTER(QcPolicy)])
    _bind(lib, "qc_allreduce", status,
          [comm_t, c_void_p, c_void_p, c_size_t, c_int, c_int, c_char_p, ebuf_t, c_void_p])
    _bind(lib, "qc_error_buffer_create", status, [comm_t, c_size_t, POINTER(ebuf_t)])
    _bind(lib, "qc_error_buffer_destroy", status, [ebuf_t])
    _bind(lib, "qc_error_buffer_norm", status, [ebuf_t, POINTER(c_double)])
    _bind(lib, "qc_error_buffer_save", status, [ebuf_t, c_void_p, c_size_t, POINTER(c_size_t)])


LIB = None  # set in main()


def status_name(status):
    return LIB.qc_status_string(status).decode()


def check(status, what):
    """Raise QcError for a failed call; run it in the thread that made the call."""
    if status != QC_SUCCESS:
        raise QcError(what, status, status_name(status), LIB.qc_last_error().decode())


def expect_status(status, expected, what):
    """For calls that must fail: return qc_last_error's message."""
    message = LIB.qc_last_error().decode()
    if status != expected:
        raise CheckFailed("%s returned %s, expected %s (last error: %r)" %
                          (what, status_name(status), status_name(expected), message))
    return message


# --------------------------------------------------------------------------
# ABI guard.
# --------------------------------------------------------------------------
def check_layout(struct_type, call, c_name):
    """Compare ctypes.sizeof(struct_type) with what the library accepts.

    call(ptr, size) makes one library call that fills a struct_type of `size`
    bytes through ptr (a c_void_p to at least 4 KiB of zeroed, 8-byte aligned
    memory) and returns its status.  Returns the size the library reported back.
    """
    mine = ctypes.sizeof(struct_type)
    scratch = (c_uint64 * 512)()  # 4 KiB: room for probes past the mirror
    head = ctypes.cast(scratch, POINTER(c_size_t))

    def attempt(size):
        ctypes.memset(scratch, 0, ctypes.sizeof(scratch))
        head[0] = size  # what a getter reads; an init call takes `size` itself
        return call(ctypes.cast(scratch, c_void_p), size), head[0]

    st, reported = attempt(mine)
    if st == QC_ERROR_VERSION:
        raise CheckFailed(
            "ABI drift: libqc rejects struct_size %d for %s (%s): the ctypes mirror in this "
            "example is larger than the library's struct; compare it with include/qc.h, or "
            "the library is older than the header" % (mine, c_name, LIB.qc_last_error().decode()))
    check(st, "%s layout probe" % c_name)
    if reported != mine:
        raise CheckFailed("ABI drift: %s: ctypes.sizeof = %d but libqc reports struct_size %d"
                          % (c_name, mine, reported))

    # One byte more than the mirror: accepted only if the library's struct
    # is larger, i.e. qc.h grew and this mirror did not.
    st, _ = attempt(mine + 1)
    if st == QC_SUCCESS:
        lo, hi = mine + 1, ctypes.sizeof(scratch)  # largest accepted size in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if attempt(mid)[0] == QC_SUCCESS:
                lo = mid
            else:
                hi = mid - 1
        raise CheckFailed(
            "ABI drift: libqc's %s is %d bytes but the ctypes mirror in this example is %d: "
            "a field was appended in include/qc.h; append it to the Structure here"
            % (c_name, lo, mine))
    if st != QC_ERROR_VERSION:
        raise CheckFailed("%s with struct_size %d returned %s, expected QC_ERROR_VERSION"
                          % (c_name, mine + 1, status_name(st)))
    return reported


def check_defaults(obj, expected, c_name, init_macro):
    for field, want in expected.items():
        got = getattr(obj, field)
        if got != want:
            raise CheckFailed("ABI drift: %s.%s after init is %r, but %s in include/qc.h "
                              "(as copied here) says %r: either a field of the ctypes mirror "
                              "is out of order or has the wrong type, or the library's "
                              "defaults changed (update the expected defaults here)"
                              % (c_name, field, got, init_macro, want))


STATUS_NAMES = {value: name for name, value in globals().items()
                if name == "QC_SUCCESS" or name.startswith("QC_ERROR_")}


def abi_guard():
    """Status values, layouts of qc_policy_t and qc_comm_config_t, their defaults."""
    for value, name in sorted(STATUS_NAMES.items()):
        if status_name(value) != name:
            raise CheckFailed("ABI drift: status %d is %s in libqc, %s here"
                              % (value, status_name(value), name))
    size = check_layout(
        QcPolicy, lambda p, n: LIB.qc_policy_init_sized(ctypes.cast(p, POINTER(QcPolicy)), n),
        "qc_policy_t")
    policy = QcPolicy()
    check(LIB.qc_policy_init_sized(byref(policy), ctypes.sizeof(QcPolicy)), "qc_policy_init_sized")
    check_defaults(policy, POLICY_DEFAULTS, "qc_policy_t", "QC_POLICY_INIT")
    first = QcPolicy()  # a program built against the first released layout
    check(LIB.qc_policy_init_sized(byref(first), QcPolicy.min_compress_bytes.offset),
          "qc_policy_init_sized(first layout)")
    print("abi: qc_policy_t %d bytes (first released layout %d), matches libqc"
          % (size, first.struct_size))

    size = check_layout(
        QcCommConfig,
        lambda p, n: LIB.qc_comm_config_init_sized(ctypes.cast(p, POINTER(QcCommConfig)), n),
        "qc_comm_config_t")
    config = QcCommConfig()
    check(LIB.qc_comm_config_init_sized(byref(config), ctypes.sizeof(QcCommConfig)),
          "qc_comm_config_init_sized")
    check_defaults(config, COMM_CONFIG_DEFAULTS, "qc_comm_config_t", "QC_COMM_CONFIG_INIT")
    print("abi: qc_comm_config_t %d bytes, matches libqc" % size)


def abi_guard_stats(comm):
    """Layout of qc_stats_t (written by qc_comm_get_stats: needs a communicator)."""
    size = check_layout(QcStats,
                        lambda p, _: LIB.qc_comm_get_stats(comm, ctypes.cast(p, POINTER(QcStats))),
                        "qc_stats_t")
    print("abi: qc_stats_t %d bytes, matches libqc" % size)


# --------------------------------------------------------------------------
# float32 buffers: numpy when available, ctypes arrays otherwise.
# --------------------------------------------------------------------------
class Floats:
    """A float32 vector whose memory qc reads or writes in place."""

    def __init__(self, values=None, count=None):
        if np is not None:
            if values is None:
                self.data = np.zeros(count, dtype=np.float32)
            else:
                self.data = np.ascontiguousarray(values, dtype=np.float32)
            # qc reads raw memory: it must be C-contiguous float32 (a strided
            # view or a float64 array would be read as garbage).
            assert self.data.dtype == np.float32 and self.data.flags.c_contiguous
        else:
            n = count if values is None else len(values)
            self.data = (c_float * n)()
            if values is not None:
                self.data[:] = list(values)

    def __len__(self):
        return len(self.data)

    def ptr(self):
        # The object must stay alive during the call: self.data holds it.
        if np is not None:
            return self.data.ctypes.data_as(c_void_p)
        return ctypes.cast(self.data, c_void_p)

    def values(self):
        """The contents as float64 (a numpy array or a list)."""
        if np is not None:
            return self.data.astype(np.float64)
        return [float(v) for v in self.data]

    def tobytes(self):
        return self.data.tobytes() if np is not None else bytes(self.data)


def vsum(vectors):
    """Element-wise float64 sum of equal-length vectors."""
    if np is not None:
        return np.sum(np.stack([np.asarray(v, dtype=np.float64) for v in vectors]), axis=0)
    return [math.fsum(column) for column in zip(*vectors)]


def max_abs_diff(a, b):
    if np is not None:
        return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
    return max(abs(x - y) for x, y in zip(a, b))


def value_range(v):
    return float(max(v) - min(v)) if np is None else float(np.max(v) - np.min(v))


# --------------------------------------------------------------------------
# The example.
# --------------------------------------------------------------------------
NRANKS = 3
COUNT = 10000   # not a multiple of the bucket size or of NRANKS: tails included
BITS = 4
EF_CALLS = 8


def make_policy(**fields):
    """qc_policy_init_sized (as qc_policy_init(&p) in C), then the fields given."""
    policy = QcPolicy()
    check(LIB.qc_policy_init_sized(byref(policy), ctypes.sizeof(QcPolicy)), "qc_policy_init_sized")
    for name, value in fields.items():
        setattr(policy, name, value)
    return policy


def rank_inputs(rank):
    rng = random.Random(1234 + rank)
    return [rng.uniform(-1.0, 1.0) for _ in range(COUNT)]


def run_rank(comm, rank, inputs, result):
    """Body of one rank's thread. Every qc call is checked in this thread."""
    r, n = c_int(-1), c_int(-1)
    check(LIB.qc_comm_rank(comm, byref(r)), "qc_comm_rank")
    check(LIB.qc_comm_size(comm, byref(n)), "qc_comm_size")
    if (r.value, n.value) != (rank, NRANKS):
        raise CheckFailed("communicator %d reports rank %d of %d" % (rank, r.value, n.value))

    x = Floats(inputs)
    out = Floats(count=COUNT)
    # Layer "fc1.weight" resolves to the "*" policy: minmax 4-bit, no EF.
    check(LIB.qc_allreduce(comm, x.ptr(), out.ptr(), COUNT, QC_DTYPE_FLOAT32, QC_OP_SUM,
                           b"fc1.weight", None, None), "qc_allreduce")
    result["plain"] = out

    # Error feedback: layer "ef.fc1.weight" resolves to the "ef.*" policy.
    ebuf = c_void_p()
    check(LIB.qc_error_buffer_create(comm, COUNT, byref(ebuf)), "qc_error_buffer_create")
    try:
        outputs = []
        for _ in range(EF_CALLS):
            o = Floats(count=COUNT)
            check(LIB.qc_allreduce(comm, x.ptr(), o.ptr(), COUNT, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                   b"ef.fc1.weight", ebuf, None), "qc_allreduce (error feedback)")
            outputs.append(o)
        norm = c_double()
        check(LIB.qc_error_buffer_norm(ebuf, byref(norm)), "qc_error_buffer_norm")
        image = c_size_t()
        check(LIB.qc_error_buffer_save(ebuf, None, 0, byref(image)), "qc_error_buffer_save")
    finally:
        check(LIB.qc_error_buffer_destroy(ebuf), "qc_error_buffer_destroy")
    result["ef_outputs"] = outputs
    result["ef_norm"] = norm.value
    result["ef_image_bytes"] = image.value

    stats = QcStats()
    stats.struct_size = ctypes.sizeof(QcStats)
    check(LIB.qc_comm_get_stats(comm, byref(stats)), "qc_comm_get_stats")
    result["stats"] = stats


def rank_thread(comm, rank, inputs, result):
    try:
        run_rank(comm, rank, inputs, result)
    except Exception as exc:  # reported by the main thread
        result["error"] = exc


def demo(comms):
    failures = []

    def fail(message):
        failures.append(message)
        print("FAIL: " + message, file=sys.stderr)

    # ---- policies: qc_policy_init, then fields by hand --------------------
    policy = make_policy(codec=QC_CODEC_MINMAX, bits=BITS, bucket_size=128,
                         algorithm=QC_ALGO_SRA, min_compress_bytes=0)
    ef_policy = make_policy(codec=QC_CODEC_MINMAX, bits=BITS, bucket_size=128,
                            algorithm=QC_ALGO_SRA, min_compress_bytes=0, error_feedback=1)
    # Policies are local settings: every rank sets the same ones. Done here,
    # before the threads start, so each communicator has one user at a time.
    for comm in comms:
        check(LIB.qc_comm_set_layer_policy(comm, b"*", byref(policy)), "qc_comm_set_layer_policy(*)")
        check(LIB.qc_comm_set_layer_policy(comm, b"ef.*", byref(ef_policy)),
              "qc_comm_set_layer_policy(ef.*)")
    resolved = QcPolicy(struct_size=ctypes.sizeof(QcPolicy))
    check(LIB.qc_comm_get_layer_policy(comms[0], b"ef.fc1.weight", byref(resolved)),
          "qc_comm_get_layer_policy")
    print("policy: layer 'ef.fc1.weight' resolves to codec %d, %d bits, bucket %d, "
          "algorithm %d, error_feedback %d"
          % (resolved.codec, resolved.bits, resolved.bucket_size, resolved.algorithm,
             resolved.error_feedback))
    if (resolved.codec, resolved.bits, resolved.error_feedback) != (QC_CODEC_MINMAX, BITS, 1):
        fail("qc_comm_get_layer_policy did not return the policy set for 'ef.*'")

    # ---- errors: status + per-thread message -------------------------------
    bad = make_policy(codec=QC_CODEC_MINMAX, bits=0)
    message = expect_status(LIB.qc_comm_set_layer_policy(comms[0], b"*", byref(bad)),
                            QC_ERROR_INVALID_ARGUMENT, "qc_comm_set_layer_policy(bits=0)")
    print("error case: bits = 0 -> %s: %s" % (status_name(QC_ERROR_INVALID_ARGUMENT), message))
    if not message:
        fail("qc_last_error() is empty after a failed call")
    truncated = make_policy()
    # 8: smaller than the first released layout
    message = expect_status(LIB.qc_policy_init_sized(byref(truncated), 8),
                            QC_ERROR_INVALID_ARGUMENT, "qc_policy_init_sized(struct_size 8)")
    print("error case: struct_size 8 -> %s: %s"
          % (status_name(QC_ERROR_INVALID_ARGUMENT), message))
    # A failed qc_comm_set_layer_policy changes nothing: "*" is still 4-bit minmax.
    check(LIB.qc_comm_get_layer_policy(comms[0], None, byref(resolved)), "qc_comm_get_layer_policy")
    if resolved.bits != BITS:
        fail("the failed qc_comm_set_layer_policy changed the '*' policy (bits %d)" % resolved.bits)

    # ---- one thread per rank ----------------------------------------------
    inputs = [rank_inputs(r) for r in range(NRANKS)]
    results = [{} for _ in range(NRANKS)]
    threads = [threading.Thread(target=rank_thread, args=(comms[r], r, inputs[r], results[r]),
                                name="qc-rank-%d" % r) for r in range(NRANKS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [(r, res["error"]) for r, res in enumerate(results) if "error" in res]
    if errors:
        for r, exc in errors:
            fail("rank %d: %s" % (r, exc))
        return failures

    exact = vsum(inputs)  # float64
    plain = [res["plain"] for res in results]

    # ---- allreduce: bit-identical ranks, within the 4-bit bound -----------
    for r in range(1, NRANKS):
        if plain[r].tobytes() != plain[0].tobytes():
            fail("rank %d's allreduce result is not bit-identical to rank 0's" % r)
    levels = 2 ** BITS - 1
    # docs/fidelity.md: an SRA element passes W = 2n - 1 inputs' worth of
    # encodes, each erring by at most range/(2L) per input, range <= R (the
    # largest per-rank bucket range, here bounded by the whole vector's);
    # (1 + 1/L) covers the second-order growth of the server's range, and
    # 1e-5 the float32 rounding of values up to n in magnitude.
    big_r = max(value_range(v) for v in inputs)
    bound = (2 * NRANKS - 1) * big_r / (2 * levels) * (1 + 1.0 / levels) + 1e-5
    error = max_abs_diff(plain[0].values(), exact)
    print("allreduce: %d ranks x %d float32, minmax %d-bit SRA: max |result - exact sum| "
          "= %.4f (bound %.4f), ranks bit-identical"
          % (NRANKS, COUNT, BITS, error, bound))
    if not error <= bound:
        fail("allreduce error %.6f exceeds the %d-bit bound %.6f" % (error, BITS, bound))
    if error == 0.0:
        fail("allreduce result is exact: the data was not quantized")

    # ---- error feedback ----------------------------------------------------
    outs = [res["ef_outputs"] for res in results]
    for t in range(EF_CALLS):
        for r in range(1, NRANKS):
            if outs[r][t].tobytes() != outs[0][t].tobytes():
                fail("error feedback call %d: rank %d differs from rank 0" % (t, r))
    total = vsum([o.values() for o in outs[0]])
    mean = total / EF_CALLS if np is not None else [v / EF_CALLS for v in total]
    ef_error = max_abs_diff(mean, exact)
    norms = [res["ef_norm"] for res in results]
    print("error feedback: mean of %d outputs max |error| = %.5f vs %.5f for one call "
          "without it; residual norms %s; checkpoint image %d bytes"
          % (EF_CALLS, ef_error, error, " ".join("%.3f" % v for v in norms),
             results[0]["ef_image_bytes"]))
    if not ef_error < 0.5 * error:
        fail("error feedback did not reduce the error of the mean output (%.6f vs %.6f)"
             % (ef_error, error))
    if not all(v > 0 for v in norms):
        fail("an error buffer has zero residuals after %d compressed calls" % EF_CALLS)
    if results[0]["ef_image_bytes"] != 56 + 4 * COUNT:
        fail("qc_error_buffer_save size %d, qc.h says 56 + 4 * count = %d"
             % (results[0]["ef_image_bytes"], 56 + 4 * COUNT))

    # ---- statistics ---------------------------------------------------------
    for r, res in enumerate(results):
        s = res["stats"]
        print("stats rank %d: %d calls, logical %d bytes, wire %d bytes (%.1fx less), "
              "codec %.4f s, transport %.4f s"
              % (r, s.calls, s.logical_bytes, s.wire_bytes,
                 s.logical_bytes / max(s.wire_bytes, 1), s.codec_seconds, s.transport_seconds))
        if s.calls != 1 + EF_CALLS or s.logical_bytes != (1 + EF_CALLS) * COUNT * 4:
            fail("rank %d stats: %d calls / %d logical bytes, expected %d / %d"
                 % (r, s.calls, s.logical_bytes, 1 + EF_CALLS, (1 + EF_CALLS) * COUNT * 4))
        if not 0 < s.wire_bytes < s.logical_bytes:
            fail("rank %d: wire bytes %d not below logical bytes %d"
                 % (r, s.wire_bytes, s.logical_bytes))
    return failures


def main(argv=None):
    global LIB, np
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("library", nargs="?", help="path to libqc.so (else $QC_LIBRARY, "
                        "else ctypes.util.find_library('qc'))")
    parser.add_argument("--no-numpy", action="store_true",
                        help="use ctypes arrays even when numpy is installed")
    args = parser.parse_args(argv)
    if args.no_numpy:
        np = None

    path, source = find_library(args.library)
    if path is None:
        print("python_ctypes: libqc not found. Pass its path (e.g. build/src/libqc.so) as the "
              "first argument, set QC_LIBRARY, or install qc where the dynamic loader finds "
              "it (ldconfig, LD_LIBRARY_PATH).", file=sys.stderr)
        return 2
    try:
        LIB = ctypes.CDLL(path)  # CDLL: the GIL is released during every call
    except OSError as exc:
        print("python_ctypes: cannot load %s (from %s): %s" % (path, source, exc),
              file=sys.stderr)
        return 2
    declare(LIB)
    print("python_ctypes: libqc %s (version number %d) from %s (%s); arrays: %s"
          % (LIB.qc_version_string().decode(), LIB.qc_version_number(), path, source,
             "numpy %s" % np.__version__ if np is not None else "ctypes"))

    try:
        abi_guard()
        config = QcCommConfig()
        check(LIB.qc_comm_config_init_sized(byref(config), ctypes.sizeof(QcCommConfig)),
              "qc_comm_config_init_sized")
        config.timeout_seconds = 60.0  # a stuck rank fails in a minute, not 300 s
        comms = (c_void_p * NRANKS)()
        check(LIB.qc_comm_create_local_with_config(NRANKS, byref(config), comms),
              "qc_comm_create_local_with_config")
        failures = []
        try:
            abi_guard_stats(comms[0])
            failures = demo(comms)
        finally:
            for r in range(NRANKS):
                status = LIB.qc_comm_destroy(comms[r])
                if status != QC_SUCCESS:
                    failures.append("qc_comm_destroy(rank %d): %s: %s"
                                    % (r, status_name(status), LIB.qc_last_error().decode()))
    except (QcError, CheckFailed) as exc:
        print("python_ctypes: FAILED: %s" % exc, file=sys.stderr)
        return 1
    if failures:
        print("python_ctypes: FAILED (%d checks)" % len(failures), file=sys.stderr)
        return 1
    print("python_ctypes: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
