"""qc: quantized collective communication for Python.

The Python face of libqc (qc.h): allreduce, alltoall, reduce-scatter,
allgather and broadcast that compress what they send (8, 4, 2 or 1 bit per
value, top-k, half precision) with error feedback, over ranks that are
threads of this process (``Comm.local``) or MPI processes
(``Comm.from_mpi`` with mpi4py).

Quick start::

    import threading, numpy as np, qc

    comms = qc.Comm.local(2)                      # two ranks in this process
    policy = qc.Policy(codec="minmax", bits=4, min_compress_bytes=0)
    for c in comms:
        c.set_layer_policy("*", policy)
    data = [np.full(1000, r + 1, np.float32) for r in range(2)]

    def rank(c):                                  # one thread per rank
        c.allreduce(data[c.rank], out=data[c.rank], op="avg")

    ts = [threading.Thread(target=rank, args=(c,)) for c in comms]
    [t.start() for t in ts]; [t.join() for t in ts]
    [c.close() for c in comms]

Arrays are numpy arrays (float32, float16) or torch CPU or CUDA tensors
(float32, float16, bfloat16), C-contiguous; they are passed to the library
without a copy, and ``out=x`` works in place (CUDA tensors are staged
through host memory by a CUDA build of the library). The GIL is released while qc works.
Failures raise ``qc.Error`` subclasses carrying ``.status`` and the library's
message; a bad argument raises at the call: ``qc.InvalidArgumentError`` (a
``ValueError``) for a wrong value, ``qc.ArgumentTypeError`` (a ``TypeError``)
for a wrong Python type. See docs/python.md.
"""

from __future__ import annotations

import atexit
import bisect
import contextlib
import math
import operator
import sys
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _qc
from ._errors import (
    STATUS_NAMES,
    ArgumentTypeError,
    CorruptDataError,
    Error,
    InternalError,
    InvalidArgumentError,
    MismatchError,
    OutOfMemoryError,
    QcTimeoutError,
    TransportError,
    UnsupportedError,
    VersionError,
    error_class,
)

__all__ = [
    "__version__",
    "library_version",
    "Error",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "OutOfMemoryError",
    "UnsupportedError",
    "TransportError",
    "MismatchError",
    "QcTimeoutError",
    "CorruptDataError",
    "VersionError",
    "InternalError",
    "error_class",
    "STATUS_NAMES",
    "Policy",
    "POLICY_FIELDS",
    "Comm",
    "Request",
    "ErrorBuffer",
    "encode",
    "decode",
    "encoded_size",
    "emulate_allreduce",
    "emulate_alltoall",
    "emulate_reduce_scatter",
    "emulate_allgather",
    "emulate_broadcast",
    "emulate_sparse_allreduce",
    "CODECS",
    "ROUNDINGS",
    "SCALES",
    "ALGORITHMS",
    "DTYPES",
    "OPS",
]

#: Version of this package (the qc project version it was built from).
__version__: str = _qc.PACKAGE_VERSION

#: Anything the collectives accept: a numpy array or a torch CPU or CUDA tensor.
ArrayLike = Any


def library_version() -> str:
    """Version ("M.m.p") of the libqc that is loaded (qc_version_string)."""
    return _qc.version_string()


# ---------------------------------------------------------------------------
# Arguments. The rule (docs/python.md, "Bad arguments"): a wrong value is
# InvalidArgumentError (a ValueError), a wrong Python type ArgumentTypeError
# (a TypeError), raised by the call that got it. Values passed straight to
# the extension are checked there (src/qc_module.cpp, same rule and wording);
# these helpers check what this layer uses itself.
# ---------------------------------------------------------------------------

_SIZE_MAX = 2**64 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _bad_value(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(1, message)


def _bad_type(message: str) -> ArgumentTypeError:
    return ArgumentTypeError(1, message)


def _int_arg(value: Any, what: str, lo: int, hi: int) -> int:
    """An int (or numpy integer; not a bool, float or str) in [lo, hi]."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise _bad_type(f"{what} must be an int, not {type(value).__name__}")
    number = operator.index(value)
    if not lo <= number <= hi:
        raise _bad_value(f"{what} is {number}; expected an int in {lo}..{hi}")
    return number


def _list_arg(value: Any, what: str) -> list:
    """The items of a list, tuple or other iterable; a str or bytes (whose
    characters would pass for names or numbers) is refused."""
    if isinstance(value, (str, bytes, bytearray, dict)) or not hasattr(type(value), "__iter__"):
        raise _bad_type(f"{what} must be a list or tuple, not {type(value).__name__}")
    return list(value)


def _name_arg(value: Any, what: str) -> Optional[str]:
    """None or a str without NUL (as the extension's name_arg)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad_type(f"{what} must be a str or None, not {type(value).__name__}")
    if "\0" in value:
        raise _bad_value(f"{what} {value!r} contains a NUL character at index {value.index(chr(0))}; "
                         "qc names are C strings, which would end there")
    return value


def _bytes_arg(value: Any, what: str) -> bytes:
    """A copy of a bytes-like value (bytes, bytearray, contiguous memoryview)."""
    try:
        view = memoryview(value)
    except TypeError:
        raise _bad_type(f"{what} must be bytes-like (bytes, bytearray, memoryview), "
                        f"not {type(value).__name__}") from None
    if not view.contiguous:
        raise _bad_value(f"{what} is not a contiguous buffer; pass bytes(...) of it")
    return view.tobytes()


def _choice_arg(value: Any, table: Dict[str, int], what: str) -> int:
    """A name from table (any case), e.g. op="avg"."""
    if not isinstance(value, str):
        raise _bad_type(f"{what} must be a str ({' or '.join(repr(k) for k in table)}), not {type(value).__name__}")
    key = value.lower()
    if key not in table:
        raise _bad_value(f"{what} is {value!r}; expected {' or '.join(repr(k) for k in table)}")
    return table[key]


# ---------------------------------------------------------------------------
# Enumerations (values of qc.h; names as strings)
# ---------------------------------------------------------------------------

# The names are the library's (qc_codec_name and friends in qc.h), so Python
# spells them as the C API, the QC_* environment and the tools do.
#: codec name -> qc_codec_t
CODECS: Dict[str, int] = dict(_qc.ENUM_NAMES["codec"])
#: rounding name -> qc_rounding_t
ROUNDINGS: Dict[str, int] = dict(_qc.ENUM_NAMES["rounding"])
#: Names of the global codecs' shared scale (qc_scale_t): "auto", "l2", "max_abs".
SCALES: Dict[str, int] = dict(_qc.ENUM_NAMES["scale"])
#: algorithm name -> qc_algorithm_t
ALGORITHMS: Dict[str, int] = dict(_qc.ENUM_NAMES["algorithm"])
#: dtype name -> qc_dtype_t
DTYPES: Dict[str, int] = dict(_qc.ENUM_NAMES["dtype"])
#: reduction name -> qc_reduce_op_t
OPS: Dict[str, int] = dict(_qc.ENUM_NAMES["reduce_op"])
_ADAPT_METHODS: Dict[str, int] = dict(_qc.ENUM_NAMES["adapt_method"])

_CODEC_NAMES = {v: k for k, v in CODECS.items()}
_ROUNDING_NAMES = {v: k for k, v in ROUNDINGS.items()}
_SCALE_NAMES = {v: k for k, v in SCALES.items()}
_ALGORITHM_NAMES = {v: k for k, v in ALGORITHMS.items()}
_ENUM_TABLES: Dict[str, Dict[str, int]] = {"codec": CODECS, "rounding": ROUNDINGS, "scale": SCALES,
                                           "algorithm": ALGORITHMS}


def _enum_value(value: Any, kind: str, field: str) -> int:
    table = _ENUM_TABLES[kind]
    if isinstance(value, str):
        # The library's lookup: canonical names and aliases ("rd"); any case here.
        try:
            return _qc.from_name(kind, value.lower())
        except InvalidArgumentError as e:
            raise InvalidArgumentError(1, f"qc.Policy: {field}: {e.message}") from None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if int(value) not in table.values():
            raise InvalidArgumentError(1, f"qc.Policy: {field} {int(value)} is not a valid value")
        return int(value)
    raise _bad_type(f"qc.Policy: {field} must be a str (one of {', '.join(table)}), not {type(value).__name__}")


# ---------------------------------------------------------------------------
# Policy
# ---------------------------------------------------------------------------

#: Policy fields in qc_policy_t order (the tuple the extension takes).
POLICY_FIELDS: Tuple[str, ...] = (
    "codec",
    "bits",
    "bucket_size",
    "rounding",
    "algorithm",
    "error_feedback",
    "group_size",
    "topk_ratio",
    "scale_update_period",
    "seed",
    "min_compress_bytes",
    "scale",
)
_INT32_MAX = 2**31 - 1
_UINT64_MAX = 2**64 - 1


def _check_int(value: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise _bad_type(f"qc.Policy: {field} must be an int, not {type(value).__name__}")
    value = int(value)
    if not lo <= value <= hi:
        raise _bad_value(f"qc.Policy: {field} {value} is out of range [{lo}, {hi}]")
    return value


def _check_policy(fields: tuple) -> None:
    """Validate with the library's rules (qc_codec_encoded_size validates its policy)."""
    try:
        _qc.policy_check(fields)
    except InvalidArgumentError as e:
        text = e.message.replace("qc_codec_encoded_size: argument 'policy': ", "")
        raise InvalidArgumentError(e.status, f"qc.Policy: {text}") from None


class Policy:
    """How one layer's data is compressed and reduced (qc_policy_t).

    Args:
        codec: "none", "fp16", "bf16", "minmax", "qsgd", "global_linear",
            "global_exp", "onebit", "topk", or a block-scaled format
            (docs/wire-format.md): "mxfp8" (E4M3), "mxfp8_e5m2", "mxfp6"
            (E2M3), "mxfp6_e3m2", "mxfp4", "mxint8" or "nvfp4", whose element
            width and block size are the format's (bits and bucket_size
            do not apply).
        bits: code width 1..8 (minmax; qsgd and global_* need 2..8).
        bucket_size: elements per bucket (one scale each), >= 1.
        rounding: "auto" (the codec's own: stochastic for global_linear and
            global_exp, nearest for the rest), "nearest" (round to nearest
            even) or "stochastic".
        algorithm: "auto", "ring", "recursive_doubling", "sra", "tree" or
            "native" ("auto" chooses per call; docs/algorithms.md).
        error_feedback: keep residuals in an ErrorBuffer between calls.
        group_size: recursive doubling intra-group size, >= 1.
        topk_ratio: fraction kept by topk, in (0, 1] (stored as float32).
        scale_update_period: recompute the scales every K-th call, >= 1.
        seed: stochastic rounding seed (uint64).
        min_compress_bytes: messages smaller than this go uncompressed
            (codec none); 0 always compresses.
        scale: the global codecs' shared scale: "auto" (max-abs), "l2"
            (the L2 norm, paper 002) or "max_abs".

    Every field is checked by the library's own rules (those of
    qc_comm_set_layer_policy) at construction and on every assignment: a wrong
    value raises ``qc.InvalidArgumentError`` (a ``ValueError``) with the
    library's message, a wrong type ``TypeError``. Policies compare equal
    when all fields are equal.

    Example::

        p = qc.Policy(codec="minmax", bits=4, algorithm="sra", error_feedback=True)
        p.bits = 2
    """

    __slots__ = POLICY_FIELDS
    __hash__ = None  # mutable

    codec: str
    bits: int
    bucket_size: int
    rounding: str
    algorithm: str
    error_feedback: bool
    group_size: int
    topk_ratio: float
    scale_update_period: int
    seed: int
    min_compress_bytes: int
    scale: str

    def __init__(
        self,
        codec: str = "none",
        bits: int = 4,
        bucket_size: int = 128,
        rounding: str = "auto",
        algorithm: str = "auto",
        error_feedback: bool = False,
        group_size: int = 8,
        topk_ratio: float = 0.01,
        scale_update_period: int = 1,
        seed: int = 0,
        min_compress_bytes: int = 16384,
        scale: str = "auto",
    ) -> None:
        values = dict(
            codec=codec,
            bits=bits,
            bucket_size=bucket_size,
            rounding=rounding,
            algorithm=algorithm,
            error_feedback=error_feedback,
            group_size=group_size,
            topk_ratio=topk_ratio,
            scale_update_period=scale_update_period,
            seed=seed,
            min_compress_bytes=min_compress_bytes,
            scale=scale,
        )
        for name, value in values.items():
            object.__setattr__(self, name, self._normalize(name, value))
        _check_policy(self._to_tuple())

    @staticmethod
    def _normalize(name: str, value: Any) -> Any:
        if name == "codec":
            return _CODEC_NAMES[_enum_value(value, "codec", name)]
        if name == "rounding":
            return _ROUNDING_NAMES[_enum_value(value, "rounding", name)]
        if name == "scale":
            return _SCALE_NAMES[_enum_value(value, "scale", name)]
        if name == "algorithm":
            return _ALGORITHM_NAMES[_enum_value(value, "algorithm", name)]
        if name == "error_feedback":
            if isinstance(value, (bool, np.bool_)):
                return bool(value)
            if isinstance(value, (int, np.integer)):
                if int(value) in (0, 1):
                    return bool(value)
                raise _bad_value(f"qc.Policy: error_feedback {int(value)} is not a bool (True, False, 1 or 0)")
            raise _bad_type(f"qc.Policy: error_feedback must be a bool, not {type(value).__name__}")
        if name == "topk_ratio":
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise _bad_type(f"qc.Policy: topk_ratio must be a float, not {type(value).__name__}")
            try:
                ratio = float(value)
            except OverflowError:
                raise _bad_value(f"qc.Policy: topk_ratio {value} is beyond the range of a float") from None
            if math.isfinite(ratio) and abs(ratio) > _FLOAT32_MAX:
                raise _bad_value(f"qc.Policy: topk_ratio {ratio!r} is beyond the float32 range; "
                                 "expected a ratio in (0, 1]")
            # qc_policy_t holds a float: keep exactly what the library sees.
            return float(np.float32(ratio))
        if name == "seed":
            return _check_int(value, name, 0, _UINT64_MAX)
        if name == "min_compress_bytes":
            return _check_int(value, name, 0, _UINT64_MAX)
        if name in ("bits", "bucket_size", "group_size", "scale_update_period"):
            return _check_int(value, name, -(2**31), _INT32_MAX)
        raise AttributeError(f"Policy has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in POLICY_FIELDS:
            raise AttributeError(f"Policy has no field {name!r} (fields: {', '.join(POLICY_FIELDS)})")
        value = self._normalize(name, value)
        _check_policy(self._to_tuple(**{name: value}))
        object.__setattr__(self, name, value)

    def _to_tuple(self, **override: Any) -> tuple:
        def get(name: str) -> Any:
            return override[name] if name in override else getattr(self, name)

        return (
            CODECS[get("codec")],
            get("bits"),
            get("bucket_size"),
            ROUNDINGS[get("rounding")],
            ALGORITHMS[get("algorithm")],
            int(get("error_feedback")),
            get("group_size"),
            get("topk_ratio"),
            get("scale_update_period"),
            get("seed"),
            get("min_compress_bytes"),
            SCALES[get("scale")],
        )

    @classmethod
    def _from_tuple(cls, t: Sequence[Any]) -> "Policy":
        p = cls.__new__(cls)
        values = dict(zip(POLICY_FIELDS, t))
        values["codec"] = _CODEC_NAMES[values["codec"]]
        values["rounding"] = _ROUNDING_NAMES[values["rounding"]]
        values["scale"] = _SCALE_NAMES[values["scale"]]
        values["algorithm"] = _ALGORITHM_NAMES[values["algorithm"]]
        values["error_feedback"] = bool(values["error_feedback"])
        values["topk_ratio"] = float(np.float32(values["topk_ratio"]))
        for name, value in values.items():
            object.__setattr__(p, name, value)
        return p

    def to_dict(self) -> Dict[str, Any]:
        """The fields as a dict (keyword arguments of Policy)."""
        return {name: getattr(self, name) for name in POLICY_FIELDS}

    def replace(self, **changes: Any) -> "Policy":
        """A copy with some fields changed: ``p.replace(bits=2)``."""
        unknown = [name for name in changes if name not in POLICY_FIELDS]
        if unknown:
            raise _bad_type(f"qc.Policy.replace: no field {unknown[0]!r} (fields: {', '.join(POLICY_FIELDS)})")
        values = self.to_dict()
        values.update(changes)
        return Policy(**values)

    def copy(self) -> "Policy":
        """An independent copy."""
        return Policy._from_tuple(self._to_tuple())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Policy):
            return NotImplemented
        return self._to_tuple() == other._to_tuple()

    def __repr__(self) -> str:
        parts = []
        for name in POLICY_FIELDS:
            value = getattr(self, name)
            if name == "topk_ratio":
                parts.append(f"{name}={np.float32(value)!s}")
            else:
                parts.append(f"{name}={value!r}")
        return f"qc.Policy({', '.join(parts)})"

    def __getstate__(self) -> Dict[str, Any]:
        return self.to_dict()

    def __setstate__(self, state: Dict[str, Any]) -> None:
        # pickle.loads and copy come here, not through __init__: validate the
        # same way, so a damaged or hand-made pickle fails at load, not later.
        if not isinstance(state, dict):
            raise _bad_type(f"qc.Policy: pickled state must be a dict, not {type(state).__name__}")
        unknown = [name for name in state if name not in POLICY_FIELDS]
        if unknown:
            raise _bad_value(f"qc.Policy: pickled state has unknown fields {unknown} "
                             f"(fields: {', '.join(POLICY_FIELDS)})")
        Policy.__init__(self, **state)  # fields left out get their defaults


def _policy_tuple(policy: Any, what: str = "policy") -> tuple:
    if not isinstance(policy, Policy):
        raise _bad_type(f"{what} must be a qc.Policy, not {type(policy).__name__}")
    return policy._to_tuple()


# ---------------------------------------------------------------------------
# Arrays: numpy arrays and torch CPU or CUDA tensors, zero copy
# ---------------------------------------------------------------------------


class _Buffer:
    """Address, element count and dtype of an array (which it keeps alive)."""

    __slots__ = ("obj", "ptr", "count", "dtype", "itemsize", "is_torch", "cuda_device", "stream")

    def __init__(self, obj: Any, ptr: int, count: int, dtype: int, itemsize: int, is_torch: bool,
                 cuda_device: Optional[int] = None, stream: int = 0) -> None:
        self.obj = obj
        self.ptr = ptr
        self.count = count
        self.dtype = dtype
        self.itemsize = itemsize
        self.is_torch = is_torch
        #: the CUDA device index of a torch CUDA tensor, None for host memory
        self.cuda_device = cuda_device
        #: its device's current stream (a cudaStream_t as int), 0 for host memory
        self.stream = stream

    @property
    def nbytes(self) -> int:
        return self.count * self.itemsize


def _torch_module() -> Any:
    # torch is never imported by qc: a tensor can only exist once it is.
    return sys.modules.get("torch")


# numpy dtype -> its name, for the dtypes _as_buffer has seen: dtype.name
# is computed in Python on every access (~4 us), which an emulation of 128
# ranks pays 256 times a call. Only native dtypes are kept, so the cache
# stays a handful of entries; a race adds the same entry twice, harmlessly.
_NUMPY_DTYPE_NAMES: Dict[Any, str] = {}


def _numpy_dtype_name(dtype: Any) -> str:
    name = _NUMPY_DTYPE_NAMES.get(dtype)
    if name is None:
        name = dtype.name
        if dtype.isnative:
            _NUMPY_DTYPE_NAMES[dtype] = name
    return name


def _as_buffer(x: Any, what: str, writable: bool = False) -> _Buffer:
    if isinstance(x, np.ndarray):
        name = _numpy_dtype_name(x.dtype)
        if name not in ("float32", "float16", "bfloat16") or x.dtype.kind == "c":
            raise _bad_type(
                f"{what}: unsupported dtype {x.dtype} (qc takes float32 or float16 numpy arrays; "
                "bfloat16 through torch tensors)"
            )
        if not x.dtype.isnative:
            raise _bad_type(f"{what}: byte order of dtype {x.dtype.str} is not native; use x.astype(np.{name})")
        if not x.flags.c_contiguous:
            raise _bad_value(
                f"{what}: the numpy array is not C-contiguous (strides {x.strides}); qc does not copy "
                "silently: pass np.ascontiguousarray(...)"
            )
        if not x.flags.aligned:
            raise _bad_value(f"{what}: the numpy array's data is not aligned to its dtype; pass a copy")
        if writable and not x.flags.writeable:
            raise _bad_value(f"{what}: the numpy array is read-only")
        return _Buffer(x, int(x.__array_interface__["data"][0]), int(x.size), DTYPES[name], x.itemsize, False)
    torch = _torch_module()
    if torch is not None and isinstance(x, torch.Tensor):
        codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
        if x.dtype not in codes:
            raise _bad_type(
                f"{what}: unsupported dtype {x.dtype} (qc takes torch.float32, torch.float16 or torch.bfloat16)"
            )
        if x.device.type not in ("cpu", "cuda"):
            raise _bad_value(f"{what}: the tensor is on {x.device}; qc takes CPU and CUDA tensors")
        if x.layout != torch.strided:
            raise _bad_value(f"{what}: the tensor has layout {x.layout}; qc takes dense (strided) tensors")
        if x.data_ptr() % x.element_size():
            raise _bad_value(f"{what}: the tensor's data is not aligned to its dtype; pass x.clone()")
        if not x.is_contiguous():
            raise _bad_value(
                f"{what}: the tensor is not contiguous (strides {tuple(x.stride())}); qc does not copy "
                "silently: pass x.contiguous()"
            )
        if x.device.type == "cuda":
            # The collective is ordered after the work already queued on the
            # device's current stream (which produced x), as torch's own
            # collectives are; qc stages it through host memory (qc.h).
            stream = int(torch.cuda.current_stream(x.device).cuda_stream)
            return _Buffer(x, int(x.data_ptr()), int(x.numel()), codes[x.dtype], int(x.element_size()),
                           True, int(x.device.index), stream)
        return _Buffer(x, int(x.data_ptr()), int(x.numel()), codes[x.dtype], int(x.element_size()), True)
    raise _bad_type(f"{what}: expected a numpy array or a torch tensor, not {type(x).__name__}")


def _device_scope(buf: _Buffer) -> Any:
    """The CUDA device of a CUDA tensor made current for the call (qc's
    copies run on the current device), else nothing."""
    if buf.cuda_device is None:
        return contextlib.nullcontext()
    return _torch_module().cuda.device(buf.cuda_device)


def _empty_like(src: _Buffer) -> Any:
    if src.is_torch:
        torch = _torch_module()
        return torch.empty_like(src.obj, memory_format=torch.contiguous_format)
    return np.empty_like(src.obj, order="C")


def _output(src: _Buffer, out: Any, count: Optional[int] = None,
            in_place: Tuple[int, str] = (0, "out is x")) -> Tuple[Any, _Buffer]:
    """The output array (new when out is None) and its buffer, checked against src.
    in_place: the byte offset of out from x that runs in place (the library's
    in-place form) and how to say it; any other overlap is refused."""
    if out is None:
        out = _empty_like(src)
    dst = _as_buffer(out, "out", writable=True)
    if dst.cuda_device != src.cuda_device:
        def where(b: _Buffer) -> str:
            return "host memory" if b.cuda_device is None else f"cuda:{b.cuda_device}"
        raise _bad_value(f"out is in {where(dst)} but x in {where(src)}; qc needs both in one place")
    if dst.dtype != src.dtype:
        raise _bad_type(
            f"out: dtype {_dtype_name(dst.dtype)} differs from the input's {_dtype_name(src.dtype)}"
        )
    expected = src.count if count is None else count
    if dst.count != expected:
        raise _bad_value(f"out: {dst.count} elements, expected {expected}")
    if dst.ptr - src.ptr != in_place[0] and dst.count and src.count:
        if dst.ptr < src.ptr + src.nbytes and src.ptr < dst.ptr + dst.nbytes:
            raise _bad_value(f"out overlaps the input without being in place (in place means {in_place[1]})")
    return out, dst


def _new_shaped(src: _Buffer, shape: Tuple[int, ...]) -> Any:
    """A new C-contiguous array of src's kind, dtype and device, of the given shape."""
    if src.is_torch:
        return _torch_module().empty(shape, dtype=src.obj.dtype, device=src.obj.device)
    return np.empty(shape, dtype=src.obj.dtype)


def _shard_shape(shape: Sequence[int], nranks: int, count: int) -> Tuple[int, ...]:
    """The shape of one rank's share of an array of `shape` (reduce_scatter's
    output): shape[1:] when the leading dimension is the rank count (what
    allgather returns), else flat."""
    if len(shape) >= 2 and shape[0] == nranks:
        return tuple(shape[1:])
    return (count // nranks,)


def _dtype_name(code: int) -> str:
    return {v: k for k, v in DTYPES.items()}[code]


def _op(op: str) -> int:
    return _choice_arg(op, OPS, "argument 'op'")


def _layer(layer: Optional[str]) -> Optional[str]:
    # Checked by the extension (a str without NUL, or None), which names it
    # "argument 'layer'".
    return layer


# ---------------------------------------------------------------------------
# Communicators
# ---------------------------------------------------------------------------

# MPI communicators still open at interpreter exit are closed before mpi4py
# finalizes MPI (qc needs MPI alive to release its duplicates).
_open_mpi_comms: "weakref.WeakSet[Comm]" = weakref.WeakSet()
_open_lock = threading.Lock()


@atexit.register
def _close_mpi_comms() -> None:
    with _open_lock:
        comms = list(_open_mpi_comms)
    for c in comms:
        try:
            c.close()
        except Error:
            pass


class Comm:
    """A qc communicator: one rank of a group (qc_comm_t).

    Create them with ``Comm.local(n)`` (n ranks in this process, one thread
    each) or ``Comm.from_mpi(mpi4py_comm)``. A communicator is used by one
    thread at a time; different communicators (the ranks of a local group)
    may be driven from different threads at once, since the GIL is released
    while qc works. Release it with ``close()`` or a ``with`` block; closing
    is local (it never waits for peers) and idempotent, and any use after it
    raises ``qc.InvalidArgumentError``.
    """

    __slots__ = ("_h", "_rank", "_size", "_transport", "__weakref__")

    def __init__(self, handle: Any, transport: str) -> None:
        if not isinstance(handle, _qc.Comm):
            raise _bad_type("create communicators with qc.Comm.local(n), qc.Comm.from_mpi(comm) "
                            "or qc.Comm.from_transport(transport)")
        self._h = handle
        self._rank: int = handle.rank
        self._size: int = handle.size
        self._transport = transport

    # ---- creation ----
    @classmethod
    def local(cls, n: int, timeout: float = 300.0) -> List["Comm"]:
        """Create an in-process group of n ranks; returns [rank 0, ..., rank n-1].

        Drive each rank from its own thread: a collective blocks until every
        rank of the group has made the same call, or until ``timeout``
        seconds pass (``qc.QcTimeoutError`` on every waiting rank).
        """
        return [cls(h, "local") for h in _qc.Comm.create_local(n, timeout)]

    @classmethod
    def from_mpi(cls, comm: Any, timeout: float = 300.0) -> "Comm":
        """Create a communicator over an mpi4py communicator (e.g. MPI.COMM_WORLD).

        Collective over ``comm``: every process of it must call. qc
        duplicates the communicator; the caller keeps its own. Needs a libqc
        built with MPI (else ``qc.UnsupportedError``) and the same MPI library
        as mpi4py. Close it before MPI is finalized (qc closes the ones still
        open at interpreter exit).
        """
        if not hasattr(comm, "py2f"):
            raise _bad_type(f"comm must be an mpi4py communicator, not {type(comm).__name__}")
        MPI = sys.modules.get("mpi4py.MPI")
        if MPI is not None:
            if MPI.Is_finalized():
                raise TransportError(4, "Comm.from_mpi: MPI is already finalized")
            if not MPI.Is_initialized():
                raise TransportError(4, "Comm.from_mpi: MPI is not initialized")
            if comm == MPI.COMM_NULL:
                raise InvalidArgumentError(1, "Comm.from_mpi: comm is MPI.COMM_NULL")
        c = cls(_qc.Comm.create_mpi(comm.py2f(), timeout), "mpi")
        with _open_lock:
            _open_mpi_comms.add(c)
        return c

    @classmethod
    def from_transport(cls, transport: Any, rank: Optional[int] = None, size: Optional[int] = None,
                       any_thread: bool = False, timeout: float = 300.0) -> "Comm":
        """Create this rank's communicator over a transport you bring (qc_comm_create_callbacks).

        ``transport`` carries qc's messages over your own communication library
        (mpi4py, torch.distributed, sockets...) through its methods:

        - ``post_send(peer, data) -> handle``: start sending ``data`` (a read-only
          ``memoryview`` of qc's memory) to rank ``peer``;
        - ``post_recv(peer, data) -> handle``: start receiving the next message from
          ``peer`` into ``data`` (a writable ``memoryview`` of exactly its size);
        - ``test(handle) -> bool``: whether the transfer is done, never blocking long;
        - optional ``wait(handle, timeout) -> bool``: as test, but may block up to
          ``timeout`` seconds (at most 0.1: qc checks its deadline in between);
        - optional ``cancel(handle)``: qc gives up on the transfer (its call failed);
          after it returns the transport must not touch the memoryview again.
          Without it qc keeps such a transfer (its handle and its memory) until
          ``close()``, since the transport may still be moving its bytes;
        - optional ``abort(status, reason)``: this rank's call failed and the group is
          broken; tell the peers so that they fail promptly.

        Messages between two ranks must arrive in the order they were posted, and
        a receive names the exact size of its message. The memoryviews are valid
        until ``test``/``wait`` said done or ``cancel`` returned. An exception in a
        method fails the collective with ``qc.TransportError`` carrying its text.
        ``rank`` and ``size`` default to ``transport.rank`` and ``transport.size``.
        ``any_thread=True`` lets qc call the methods from its progress thread (so
        ``iallreduce`` and friends run while you compute; the methods then run on
        another thread than yours, with the GIL); leave it False for a library that
        must be called from one thread. A local call: nothing is sent. See
        docs/transports.md.
        """
        if rank is None:
            rank = getattr(transport, "rank", None)
        if size is None:
            size = getattr(transport, "size", None)
        if rank is None or size is None:
            raise _bad_type("Comm.from_transport: pass rank= and size=, or give the transport "
                            "rank and size attributes")
        return cls(_qc.Comm.create_callbacks(transport, rank, size, any_thread, timeout), "callbacks")

    # ---- properties ----
    @property
    def rank(self) -> int:
        """This rank's index in the group, 0..size-1."""
        return self._rank

    @property
    def size(self) -> int:
        """Number of ranks in the group."""
        return self._size

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._h.closed

    def close(self) -> None:
        """Release the communicator (local, idempotent; peers waiting on this
        rank fail with qc.TransportError). Not allowed while another thread
        is inside a call on it. Requests still outstanding get up to the
        timeout to complete, then end with an error (the GIL is released
        meanwhile)."""
        self._h.close()

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<qc.Comm {self._transport} rank {self._rank} of {self._size}, {state}>"

    def __reduce__(self) -> Any:
        # pickle, copy and deepcopy: a second Python object on one handle (or
        # a handle in another process) would be a rank nobody created.
        raise _bad_type("a qc.Comm cannot be pickled or copied: it is one rank of a live group; create "
                        "communicators in each process (Comm.local, Comm.from_mpi) and pass policies "
                        "(qc.Policy pickles) instead")

    # ---- collectives ----
    def allreduce(
        self,
        x: ArrayLike,
        out: Optional[ArrayLike] = None,
        op: str = "sum",
        layer: Optional[str] = None,
        error_buffer: Optional["ErrorBuffer"] = None,
    ) -> ArrayLike:
        """Reduce x over all ranks; every rank gets the same result, bit for bit.

        Args:
            x: numpy array (float32, float16) or torch CPU or CUDA tensor
                (float32, float16, bfloat16), C-contiguous; any shape
                (flattened). Not copied. A CUDA tensor (in a CUDA build of
                qc) is read after the work queued on its device's current
                stream and staged through host memory; the call returns with
                the result in out, as for host memory.
            out: where the result goes: None (a new array/tensor like x),
                x itself (in place), or an array of the same dtype and
                element count that does not overlap x.
            op: "sum", or "avg" (sum times 1/size, in float32).
            layer: layer name whose policy applies (set_layer_policy);
                None means "*".
            error_buffer: residuals for error feedback (used when the layer's
                policy has error_feedback=True); made for this rank and
                x's element count.

        Returns:
            out (the new array when out was None).

        Raises:
            TypeError: unsupported dtype, or out's dtype differs.
            ValueError: non-contiguous or read-only out, size mismatch, overlap.
            qc.MismatchError: ranks disagree (count, dtype, op, layer, policy);
                raised on every rank. The communicator is then broken.
            qc.QcTimeoutError: a peer did not arrive in time.
            qc.Error: any other failure, with .status and the library message.

        Every rank of the group must make the same call. The GIL is released
        while the call runs.
        """
        src = _as_buffer(x, "x")
        out, dst = _output(src, out)
        eb = _error_buffer_handle(error_buffer)
        with _device_scope(src):
            self._h.allreduce(src.ptr, dst.ptr, src.count, src.dtype, _op(op), _layer(layer), eb, src.stream)
        return out

    def allreduce_segments(
        self,
        x: ArrayLike,
        counts: Sequence[int],
        layers: Optional[Sequence[Optional[str]]],
        out: Optional[ArrayLike] = None,
        op: str = "sum",
        error_buffer: Optional["ErrorBuffer"] = None,
    ) -> ArrayLike:
        """One allreduce over a flat buffer made of several layers (a fused
        bucket, as in DDP): segment i is ``counts[i]`` elements of layer
        ``layers[i]`` (None, or a None entry, for "*"), back to back in x.

        Each segment keeps its own policy; buckets never straddle segments.
        ``sum(counts)`` must equal x's element count. error_buffer covers the
        whole buffer. Otherwise as allreduce.
        """
        counts = [_int_arg(c, f"argument 'counts[{i}]'", 0, _SIZE_MAX)
                  for i, c in enumerate(_list_arg(counts, "argument 'counts'"))]
        layers = [None] * len(counts) if layers is None else _list_arg(layers, "argument 'layers'")
        if len(layers) != len(counts):
            raise _bad_value(f"argument 'layers' has {len(layers)} entries but 'counts' {len(counts)}; "
                             "one per segment")
        src = _as_buffer(x, "x")
        if sum(counts) != src.count:
            raise _bad_value(f"sum(counts) = {sum(counts)} but x has {src.count} elements")
        out, dst = _output(src, out)
        eb = _error_buffer_handle(error_buffer)
        with _device_scope(src):
            self._h.allreduce_segments(src.ptr, dst.ptr, counts, layers, src.dtype, _op(op), eb, src.stream)
        return out

    def alltoall(self, x: ArrayLike, out: Optional[ArrayLike] = None, layer: Optional[str] = None) -> ArrayLike:
        """All-to-all exchange: x holds ``size`` blocks of equal length; block j
        goes to rank j, and out's block i comes from rank i. Each block is
        encoded with the layer's codec by its sender. out=None gives a new
        array like x; out may be x (in place). Otherwise as allreduce.
        """
        src = _as_buffer(x, "x")
        if src.count % self._size:
            raise _bad_value(f"x has {src.count} elements, not a multiple of the group size {self._size}")
        out, dst = _output(src, out)
        with _device_scope(src):
            self._h.alltoall(src.ptr, dst.ptr, src.count // self._size, src.dtype, _layer(layer), src.stream)
        return out

    def reduce_scatter(
        self,
        x: ArrayLike,
        out: Optional[ArrayLike] = None,
        op: str = "sum",
        layer: Optional[str] = None,
        error_buffer: Optional["ErrorBuffer"] = None,
    ) -> ArrayLike:
        """Reduce x over all ranks and keep this rank's share (qc_reduce_scatter),
        as a sharded optimizer (FSDP, ZeRO) does with gradients.

        x holds ``size`` blocks of equal length (its element count is a
        multiple of the group size); rank r gets the sum (or average) over
        all ranks of their block r. Only what crosses to another rank is
        encoded with the layer's codec: a rank's own block enters its sum
        exactly. The algorithm follows the layer's policy ("ring": a ring of
        partial sums; otherwise direct, each value quantized once).

        Args:
            x: as allreduce; ``size`` * n elements.
            out: None (a new array of n elements: of shape x.shape[1:] when
                x.shape[0] is the group size, as allgather returns, else 1-D),
                an array of x's dtype with n elements, or x's own block
                (in place: ``x.reshape(size, -1)[rank]``); no other overlap.
            op: "sum", or "avg".
            layer: as allreduce.
            error_buffer: residuals for error feedback, one per element of x
                (``qc.ErrorBuffer(comm, size * n)``): each block this rank
                encodes sends value + residual and keeps the new error.

        Returns:
            out (the new array when out was None).

        Raises: as allreduce; qc.MismatchError also when the ranks disagree
        on n. Every rank must make the same call; the GIL is released.
        """
        src, out, dst, eb = self._reduce_scatter_args(x, out, error_buffer)
        with _device_scope(src):
            self._h.reduce_scatter(src.ptr, dst.ptr, dst.count, src.dtype, _op(op), _layer(layer), eb, src.stream)
        return out

    def allgather(
        self,
        x: ArrayLike,
        out: Optional[ArrayLike] = None,
        layer: Optional[str] = None,
        error_buffer: Optional["ErrorBuffer"] = None,
    ) -> ArrayLike:
        """Gather every rank's x into one array on every rank (qc_allgather),
        as a sharded model does with parameters before a layer runs.

        Block r of the result is rank r's x, encoded once by rank r with the
        layer's codec and decoded by every rank from the same bytes, rank r
        too: every rank's result is the same, bit for bit (a rank's own block
        is the decoded value, not a copy of x). The algorithm follows the
        layer's policy ("ring", "recursive_doubling"; otherwise direct).

        Args:
            x: as allreduce; n elements, the same n on every rank.
            out: None (a new array of shape (size, *x.shape): out[r] is rank
                r's block), an array of x's dtype with size * n elements, or
                an array whose own block x is (in place:
                ``x`` is ``out.reshape(size, -1)[rank]``); no other overlap.
            layer: as allreduce.
            error_buffer: residuals for error feedback on this rank's encode,
                one per element of x (``qc.ErrorBuffer(comm, n)``).

        Returns:
            out (the new array when out was None).

        Raises: as allreduce; qc.MismatchError also when the ranks disagree
        on n. Every rank must make the same call; the GIL is released.
        """
        src, out, dst, eb = self._allgather_args(x, out, error_buffer)
        with _device_scope(src):
            self._h.allgather(src.ptr, dst.ptr, src.count, src.dtype, _layer(layer), eb, src.stream)
        return out

    def broadcast(
        self, x: Optional[ArrayLike], root: int, out: Optional[ArrayLike] = None, layer: Optional[str] = None
    ) -> ArrayLike:
        """Send the root's x to every rank (qc_broadcast), as
        torch.distributed.broadcast(tensor, src) and mpi4py's Bcast do.

        The root encodes x once with the layer's codec; every rank decodes
        the same bytes, the root too, so every rank's result is the same, bit
        for bit (with a lossy codec the root's result differs from its x).
        The algorithm follows the layer's policy ("tree": a binomial tree;
        "ring" and the others: a pipelined chain; "auto": the tree below
        64 KiB). No error feedback (a broadcast value is not summed again).

        Args:
            x: on the root, the values to send (read, not written unless out
                is x). On the other ranks x is not read: it gives the result's
                shape and dtype when out is None, and may be None when out is
                given.
            root: the rank whose x is sent, 0..size-1, the same on every rank.
            out: None (a new array like x), x itself (in place, as torch's
                broadcast: ``comm.broadcast(t, root, out=t)`` leaves the
                root's values in t on every rank), or an array of x's dtype
                and element count that does not overlap x.
            layer: as allreduce.

        Returns:
            out (the new array when out was None).

        Raises: as allreduce; qc.InvalidArgumentError for a root out of range,
        qc.MismatchError when the ranks disagree on the root or the element
        count. Every rank must make the same call; the GIL is released.
        """
        dst, out, send, keep = self._broadcast_args(x, root, out)
        with _device_scope(dst):
            self._h.broadcast(send, dst.ptr, dst.count, dst.dtype, root, _layer(layer), dst.stream)
        del keep  # the input (or its staged copy) was held for the call
        return out

    def sparse_allreduce(
        self,
        indices: ArrayLike,
        values: Optional[ArrayLike] = None,
        *,
        op: str = "sum",
        layer: Optional[str] = None,
        nrows: Optional[int] = None,
        out: Optional[ArrayLike] = None,
    ) -> Any:
        """Sum row-sparse tensors over all ranks (qc_sparse_allreduce), as
        the gradients of an ``nn.Embedding(sparse=True)``: only the rows a
        rank has travel, and the result is the union of every rank's rows,
        each summed, the same bits on every rank.

        Args:
            indices: a torch sparse COO tensor of shape (nrows, ...) with
                sparse_dim 1 (values must then be None), coalesced or not;
                or the row indices, a 1-D integer numpy array or torch
                tensor (int64; other integer types are converted), >= 0, in
                any order: repeated indices add their rows.
            values: with indices: a 2-D array (nnz, row_len), numpy float32
                or float16, or a torch tensor float32, float16 or bfloat16,
                C-contiguous: row k holds the values of indices[k].
            op: "sum", or "avg" (the sum times 1/size).
            layer: layer name whose policy applies (one scale per row;
                codecs none, fp16, bf16, minmax, qsgd, onebit); None is "*".
            nrows: the rows of a dense result: given (or out given), the
                result is a dense table (nrows, row_len) (of the sparse
                tensor's shape) with every summed row at its index and
                zeros elsewhere (qc_sparse_allreduce_dense); every index
                must be < nrows.
            out: the dense table to fill instead of a new one: an array of
                the values' dtype, nrows = out.shape[0] rows of row_len
                elements each.

        Returns:
            for a torch sparse tensor, a coalesced torch sparse COO tensor of
            its shape and dtype; for indices and values, a pair (indices,
            values) of the values' kind: int64 indices, ascending and unique,
            and their (nnz, row_len) summed rows; with nrows or out, the
            dense table.

        Raises:
            TypeError: an unsupported dtype; values for a sparse tensor.
            ValueError: indices not 1-D, values not 2-D, their lengths
                differ, a sparse tensor with sparse_dim other than 1, out
                of the wrong size; qc.InvalidArgumentError (a ValueError)
                for a negative index or one >= nrows.
            qc.UnsupportedError: a CUDA tensor (host memory only), a codec
                without a per-row form.
            qc.MismatchError: the ranks disagree on row_len, dtype, op,
                layer or nrows (nnz may differ); raised on every rank.

        Every rank must make the same call; the GIL is released while it runs.
        """
        rows = _sparse.rows_arg(indices, values)
        table = _sparse.dense_arg(rows, nrows, out)
        if table is None:
            handle = self._h.sparse_allreduce(rows.index_ptr, rows.values.ptr, rows.nnz, rows.row_len,
                                              rows.values.dtype, _op(op), _layer(layer))
            return _sparse.result(handle, rows)
        out, dst, table_rows = table
        self._h.sparse_allreduce_dense(rows.index_ptr, rows.values.ptr, rows.nnz, rows.row_len, table_rows,
                                       dst.ptr, rows.values.dtype, _op(op), _layer(layer))
        return out

    def _block_count(self, src: _Buffer) -> int:
        if src.count % self._size:
            raise _bad_value(f"x has {src.count} elements, not a multiple of the group size {self._size}")
        return src.count // self._size

    def _reduce_scatter_args(self, x: ArrayLike, out: Optional[ArrayLike],
                             error_buffer: Optional["ErrorBuffer"]) -> Tuple[_Buffer, Any, _Buffer, Any]:
        src = _as_buffer(x, "x")
        n = self._block_count(src)
        if out is None:
            out = _new_shaped(src, _shard_shape(tuple(src.obj.shape), self._size, src.count))
        out, dst = _output(src, out, n, (self._rank * n * src.itemsize, "out is x's own block"))
        return src, out, dst, _error_buffer_handle(error_buffer)

    def _allgather_args(self, x: ArrayLike, out: Optional[ArrayLike],
                        error_buffer: Optional["ErrorBuffer"]) -> Tuple[_Buffer, Any, _Buffer, Any]:
        src = _as_buffer(x, "x")
        if out is None:
            out = _new_shaped(src, (self._size,) + tuple(src.obj.shape))
        out, dst = _output(src, out, self._size * src.count,
                           (-self._rank * src.nbytes, "x is out's own block"))
        return src, out, dst, _error_buffer_handle(error_buffer)

    def _broadcast_args(self, x: Optional[ArrayLike], root: int,
                        out: Optional[ArrayLike]) -> Tuple[_Buffer, Any, int, Any]:
        """The output's buffer, the output, the address sent (0 off the root)
        and the array it belongs to (held for the call)."""
        root = _int_arg(root, "argument 'root'", -(2**31), 2**31 - 1)  # its range: checked by the library
        if x is None:
            if root == self._rank:
                raise _bad_value(f"x is None on the root (rank {root}), whose x is broadcast")
            if out is None:
                raise _bad_value("x and out are both None: give x (the result's shape and dtype) or out")
            dst = _as_buffer(out, "out", writable=True)
            return dst, out, 0, None
        src = _as_buffer(x, "x")
        out, dst = _output(src, out)
        if root != self._rank:
            return dst, out, 0, src.obj
        if dst.ptr == src.ptr and src.count:
            # The root decodes its own message into out, so it must keep the
            # values to send apart: a copy of x (qc.h: they must not overlap).
            staged = src.obj.clone() if src.is_torch else src.obj.copy()
            return dst, out, _as_buffer(staged, "x").ptr, staged
        return dst, out, src.ptr, src.obj

    # ---- non-blocking collectives ----
    def iallreduce(
        self,
        x: ArrayLike,
        out: Optional[ArrayLike] = None,
        op: str = "sum",
        layer: Optional[str] = None,
        error_buffer: Optional["ErrorBuffer"] = None,
    ) -> "Request":
        """Start allreduce(x, ...) and return at once with a qc.Request.

        The arguments are allreduce's; ``request.wait()`` returns what
        allreduce returns (out, or the new array when out was None),
        bit for bit, and raises what it would raise. Host memory only: a
        CUDA tensor raises qc.UnsupportedError (allreduce of a CUDA tensor
        is already ordered on its stream).

        Until the request has completed, x, out and error_buffer belong to
        it: do not write x or out, nor read out, before wait() (or a test()
        that returns True); each outstanding request needs its own
        error_buffer. The request keeps them alive, also if it is dropped
        unfinished (it then still runs: its peers need it).

        Requests on one communicator run one after another in the order
        they were started, which must be the same on every rank; a blocking
        call or a policy change waits for those started before it. They run
        on the communicator's progress thread while this thread goes on;
        with QC_PROGRESS_THREAD=0, or on MPI below MPI_THREAD_MULTIPLE, the
        start runs the whole call (the GIL is released meanwhile). A failed
        request fails every later one on the communicator.
        """
        src = _as_buffer(x, "x")
        _host_only(src, "iallreduce")
        out, dst = _output(src, out)
        eb = _error_buffer_handle(error_buffer)
        handle = self._h.iallreduce(src.ptr, dst.ptr, src.count, src.dtype, _op(op), _layer(layer), eb,
                                    (src.obj, out))
        return Request(handle, out)

    def iallreduce_segments(
        self,
        x: ArrayLike,
        counts: Sequence[int],
        layers: Optional[Sequence[Optional[str]]],
        out: Optional[ArrayLike] = None,
        op: str = "sum",
        error_buffer: Optional["ErrorBuffer"] = None,
    ) -> "Request":
        """Start allreduce_segments(x, counts, layers, ...) and return a
        qc.Request whose wait() returns its result; as iallreduce."""
        counts = [_int_arg(c, f"argument 'counts[{i}]'", 0, _SIZE_MAX)
                  for i, c in enumerate(_list_arg(counts, "argument 'counts'"))]
        layers = [None] * len(counts) if layers is None else _list_arg(layers, "argument 'layers'")
        if len(layers) != len(counts):
            raise _bad_value(f"argument 'layers' has {len(layers)} entries but 'counts' {len(counts)}; "
                             "one per segment")
        src = _as_buffer(x, "x")
        _host_only(src, "iallreduce_segments")
        if sum(counts) != src.count:
            raise _bad_value(f"sum(counts) = {sum(counts)} but x has {src.count} elements")
        out, dst = _output(src, out)
        eb = _error_buffer_handle(error_buffer)
        handle = self._h.iallreduce_segments(src.ptr, dst.ptr, counts, layers, src.dtype, _op(op), eb,
                                             (src.obj, out))
        return Request(handle, out)

    def ialltoall(self, x: ArrayLike, out: Optional[ArrayLike] = None, layer: Optional[str] = None) -> "Request":
        """Start alltoall(x, ...) and return a qc.Request whose wait()
        returns its result; as iallreduce."""
        src = _as_buffer(x, "x")
        _host_only(src, "ialltoall")
        if src.count % self._size:
            raise _bad_value(f"x has {src.count} elements, not a multiple of the group size {self._size}")
        out, dst = _output(src, out)
        handle = self._h.ialltoall(src.ptr, dst.ptr, src.count // self._size, src.dtype, _layer(layer),
                                   (src.obj, out))
        return Request(handle, out)

    def ireduce_scatter(
        self,
        x: ArrayLike,
        out: Optional[ArrayLike] = None,
        op: str = "sum",
        layer: Optional[str] = None,
        error_buffer: Optional["ErrorBuffer"] = None,
    ) -> "Request":
        """Start reduce_scatter(x, ...) and return a qc.Request whose wait()
        returns its result; as iallreduce."""
        src, out, dst, eb = self._reduce_scatter_args(x, out, error_buffer)
        _host_only(src, "ireduce_scatter")
        handle = self._h.ireduce_scatter(src.ptr, dst.ptr, dst.count, src.dtype, _op(op), _layer(layer), eb,
                                         (src.obj, out))
        return Request(handle, out)

    def iallgather(
        self,
        x: ArrayLike,
        out: Optional[ArrayLike] = None,
        layer: Optional[str] = None,
        error_buffer: Optional["ErrorBuffer"] = None,
    ) -> "Request":
        """Start allgather(x, ...) and return a qc.Request whose wait()
        returns its result; as iallreduce."""
        src, out, dst, eb = self._allgather_args(x, out, error_buffer)
        _host_only(src, "iallgather")
        handle = self._h.iallgather(src.ptr, dst.ptr, src.count, src.dtype, _layer(layer), eb, (src.obj, out))
        return Request(handle, out)

    def ibroadcast(
        self, x: Optional[ArrayLike], root: int, out: Optional[ArrayLike] = None, layer: Optional[str] = None
    ) -> "Request":
        """Start broadcast(x, root, ...) and return a qc.Request whose wait()
        returns its result; as iallreduce (x, out and the root's staged copy
        of x belong to the request until it completes)."""
        dst, out, send, keep = self._broadcast_args(x, root, out)
        _host_only(dst, "ibroadcast")
        handle = self._h.ibroadcast(send, dst.ptr, dst.count, dst.dtype, root, _layer(layer), (keep, out))
        return Request(handle, out)

    def isparse_allreduce(
        self,
        indices: ArrayLike,
        values: Optional[ArrayLike] = None,
        *,
        op: str = "sum",
        layer: Optional[str] = None,
        nrows: Optional[int] = None,
        out: Optional[ArrayLike] = None,
    ) -> "Request":
        """Start sparse_allreduce(indices, values, ...) and return a
        qc.Request whose wait() returns its result (the sparse tensor, the
        (indices, values) pair or the dense table); as iallreduce: the
        input's arrays and out belong to the request until it completes.
        Host memory only."""
        rows = _sparse.rows_arg(indices, values)
        table = _sparse.dense_arg(rows, nrows, out)
        if table is None:
            result, handle = self._h.isparse_allreduce(rows.index_ptr, rows.values.ptr, rows.nnz, rows.row_len,
                                                       rows.values.dtype, _op(op), _layer(layer), rows.keep())
            return Request(handle, None, lambda: _sparse.result(result, rows))
        out, dst, table_rows = table
        handle = self._h.isparse_allreduce_dense(rows.index_ptr, rows.values.ptr, rows.nnz, rows.row_len,
                                                 table_rows, dst.ptr, rows.values.dtype, _op(op), _layer(layer),
                                                 rows.keep() + (out,))
        return Request(handle, out)

    # ---- policies ----
    def set_layer_policy(self, pattern: str, policy: Policy) -> None:
        """Set the policy of the layers whose name matches pattern (an exact
        name, or a glob with * and ?; "*" is the default). Exact names beat
        globs; among globs the one with most literal characters wins. Every
        rank must set the same policies. Applies from the next collective."""
        self._h.set_layer_policy(pattern, _policy_tuple(policy))  # pattern: checked by the extension

    def get_layer_policy(self, layer: Optional[str] = None) -> Policy:
        """The policy that layer name ``layer`` resolves to (None: "*")."""
        return Policy._from_tuple(self._h.get_layer_policy(_layer(layer)))

    def policy_preset(self, name: str, base: Optional[Policy] = None) -> None:
        """Apply a named group of layer policies (qc_comm_apply_preset), e.g.
        "cgx": everything with ``base`` (default: the current "*" policy),
        biases and normalisations in full precision."""
        self._h.policy_preset(name, None if base is None else _policy_tuple(base, "base"))  # name: ditto

    def adapt_policies(
        self, method: str = "kmeans", alpha: float = 2.0, allowed_bits: Sequence[int] = (2, 3, 4, 8)
    ) -> Dict[str, Any]:
        """Adaptive bit widths from the collected layer statistics
        (qc_comm_adapt_policies; collective). Returns the report as a dict."""
        return self._h.adapt_policies(_choice_arg(method, _ADAPT_METHODS, "argument 'method'"), alpha,
                                      _list_arg(allowed_bits, "argument 'allowed_bits'"))

    def async_error(self) -> Optional[Error]:
        """The failure that broke this communicator's group, or None while it
        is healthy (qc_comm_get_async_error). Returned, not raised: the
        qc.Error subclass of the status, with the library's message. It may
        be called from another thread while a collective is blocked (a
        watchdog); a broken group stays broken, so close the communicator
        and create a new one."""
        status, message = self._h.async_error()
        return None if status == 0 else error_class(status)(status, message)

    # ---- statistics ----
    def stats(self) -> Dict[str, Union[int, float]]:
        """Counters of this rank since creation: calls, logical_bytes,
        wire_bytes, codec_seconds, transport_seconds, codec_seconds_in_flight
        (qc_stats_t; the last is the codec time that overlapped transfers)."""
        return self._h.stats()

    def layer_names(self) -> List[str]:
        """Names of the layers seen so far, in byte order ("*" for layer=None)."""
        return self._h.layer_names()

    def layer_stats(self, layer: Optional[str] = None) -> Dict[str, Any]:
        """Per-layer counters (qc_layer_stats_t: calls, count, logical_bytes,
        wire_bytes, codec_seconds, transport_seconds, last_rel_error,
        mean_sq_norm). With a name: that layer's dict (all zeros if unused);
        with None: {name: dict} for every layer seen so far."""
        if layer is None:
            return {name: self._h.layer_stats(name) for name in self._h.layer_names()}
        return self._h.layer_stats(_layer(layer))

    # ---- checkpoints ----
    def save_state(self) -> bytes:
        """How many calls each layer has run, as bytes, for a checkpoint
        (qc_comm_save_state): call k of a layer draws the stochastic-rounding
        bits of emulate_allreduce(..., call_index=k). Waits for the requests
        started before it."""
        return self._h.save_state()

    def load_state(self, data: Union[bytes, bytearray, memoryview]) -> None:
        """Restore save_state()'s counts (qc_comm_load_state), on every rank
        of a resumed run, so its next calls draw the bits the saved run's
        would have. qc.CorruptDataError for a damaged or foreign image; the
        communicator is unchanged on failure."""
        self._h.load_state(data)


def _host_only(buf: _Buffer, what: str) -> None:
    if buf.cuda_device is not None:
        raise UnsupportedError(
            3, f"Comm.{what}: x is a CUDA tensor; the non-blocking collectives take host memory "
               "(a blocking collective of CUDA tensors is already ordered on the tensor's stream)")


class Request:
    """A non-blocking collective in flight (qc_request_t), from
    Comm.iallreduce, Comm.iallreduce_segments, Comm.ialltoall,
    Comm.ireduce_scatter, Comm.iallgather, Comm.ibroadcast or
    Comm.isparse_allreduce.

    ``wait()`` blocks until it has completed and returns the collective's
    result (or raises its qc.Error); ``test()`` says whether it has
    completed without blocking (and raises its error once it has);
    ``done`` is test() without the raise. wait() and test() may be called
    again: they give the same result or error. The GIL is released while
    waiting, so other Python threads (the other ranks of a local group)
    run meanwhile.

    ``close()`` (or the end of a ``with`` block, or dropping the object)
    releases the handle only: a request that has not completed still runs,
    and qc keeps its arrays alive until it has. Closing the communicator
    gives outstanding requests up to its timeout, then ends them
    (qc.TransportError or qc.QcTimeoutError from wait()).
    """

    __slots__ = ("_h", "_result", "_finish")

    def __init__(self, handle: Any, result: Any, finish: Optional[Any] = None) -> None:
        if not isinstance(handle, _qc.Request):
            raise _bad_type("requests are started by Comm.iallreduce, Comm.iallreduce_segments, "
                            "Comm.ialltoall, Comm.ireduce_scatter, Comm.iallgather, Comm.ibroadcast "
                            "and Comm.isparse_allreduce")
        self._h = handle
        self._result = result
        # Makes the result once the request has completed (a sparse result
        # is copied out of its handle then).
        self._finish = finish

    def wait(self) -> ArrayLike:
        """Block until the request has completed (without the GIL); return
        the collective's result (its out array), or raise its qc.Error."""
        self._h.wait()
        if self._finish is not None:
            self._result = self._finish()
            self._finish = None
        return self._result

    def test(self) -> bool:
        """True once the request has completed (raising its qc.Error if it
        failed), False while it runs or waits its turn. Never blocks."""
        return self._h.test()

    @property
    def done(self) -> bool:
        """Whether the request has completed (successfully or not). Never blocks."""
        return self._h.done

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._h.closed

    def close(self) -> None:
        """Release the handle (idempotent). An unfinished request still runs;
        wait() and test() raise qc.InvalidArgumentError afterwards."""
        self._h.close()

    def __enter__(self) -> "Request":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            state = "closed"
        else:
            state = "done" if self.done else "running"
        return f"<qc.Request {state}>"

    def __reduce__(self) -> Any:
        raise _bad_type("a qc.Request cannot be pickled or copied: it is a collective in flight")


# ---------------------------------------------------------------------------
# Error buffers
# ---------------------------------------------------------------------------


def _error_buffer_handle(error_buffer: Optional["ErrorBuffer"]) -> Any:
    if error_buffer is None:
        return None
    if not isinstance(error_buffer, ErrorBuffer):
        raise _bad_type(f"error_buffer must be a qc.ErrorBuffer or None, not {type(error_buffer).__name__}")
    return error_buffer._h


class ErrorBuffer:
    """Error-feedback residuals of one rank for one tensor of ``count``
    elements (qc_error_buffer_t), all zero at creation.

    Pass it as ``error_buffer=`` to allreduce when the layer's policy has
    error_feedback=True. It belongs to the rank and group size of ``comm``
    (None: to those of its first emulate_allreduce). ``save()`` /
    ``load()`` move the residuals through a checkpoint (a versioned,
    checksummed image of 56 + 4*count bytes).
    """

    __slots__ = ("_h",)

    def __init__(self, comm: Optional[Comm], count: int) -> None:
        if comm is not None and not isinstance(comm, Comm):
            raise _bad_type(f"comm must be a qc.Comm or None, not {type(comm).__name__}")
        self._h = _qc.ErrorBuffer(None if comm is None else comm._h, count)  # count: checked there

    @property
    def count(self) -> int:
        """Number of residuals (elements)."""
        return self._h.count

    @property
    def norm(self) -> float:
        """L2 norm of the residuals."""
        return self._h.norm()

    @property
    def closed(self) -> bool:
        return self._h.closed

    def reset(self) -> None:
        """Set every residual to zero."""
        self._h.reset()

    def save(self) -> bytes:
        """The residuals and their binding as bytes, for a checkpoint."""
        return self._h.save()

    def load(self, data: Union[bytes, bytearray, memoryview]) -> None:
        """Restore residuals saved by save(). qc.CorruptDataError for a damaged
        image, qc.MismatchError for another count, rank or group size; the
        buffer is unchanged on failure. data: bytes, bytearray, a contiguous
        memoryview (read in place)."""
        self._h.load(data)

    def close(self) -> None:
        """Release the buffer (idempotent)."""
        self._h.close()

    def __enter__(self) -> "ErrorBuffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<qc.ErrorBuffer count={self.count}{', closed' if self.closed else ''}>"

    def __reduce__(self) -> Any:
        raise _bad_type("a qc.ErrorBuffer cannot be pickled or copied: it belongs to one rank of a live "
                        "group; checkpoint its residuals with save() and load() them into a new one")


# ---------------------------------------------------------------------------
# Codecs on their own, and emulation
# ---------------------------------------------------------------------------


def encoded_size(policy: Policy, count: int) -> int:
    """Upper bound on the bytes encode() writes for count elements."""
    return _qc.encoded_size(_policy_tuple(policy), count)  # count: checked by the extension


def encode(x: ArrayLike, policy: Policy) -> bytes:
    """Encode x with the policy's codec into a self-describing message
    (32-byte "QCWF" header + payload; docs/wire-format.md)."""
    src = _as_buffer(x, "x")
    return _qc.encode(_policy_tuple(policy), src.ptr, src.count, src.dtype)


def decode(
    data: Union[bytes, bytearray, memoryview], count: int, dtype: Any = "float32", out: Optional[ArrayLike] = None
) -> ArrayLike:
    """Decode a message from encode() into ``count`` elements.

    Returns a new 1-D numpy array of ``dtype`` ("float32" or "float16"; for
    "bfloat16" a torch tensor, torch needed), or fills ``out`` (an array or
    tensor of count elements) and returns it. qc.MismatchError when count
    differs from the message's, qc.CorruptDataError for a damaged message.
    """
    count = _int_arg(count, "argument 'count'", 0, _SIZE_MAX)
    if out is None:
        out = _new_array(count, _dtype_arg(dtype))
    dst = _as_buffer(out, "out", writable=True)
    if dst.count != count:
        raise _bad_value(f"out: {dst.count} elements, expected {count}")
    _qc.decode(data, dst.ptr, count, dst.dtype)  # data: any contiguous bytes-like, read in place
    return out


def _dtype_arg(dtype: Any) -> str:
    """The name of a dtype qc takes, from a str, numpy dtype or torch dtype.
    Another dtype is a type error, as numpy's np.dtype("flaot32") is."""
    if isinstance(dtype, str):
        name = dtype
    elif str(dtype).startswith("torch."):
        name = str(dtype)[len("torch."):]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    if name not in DTYPES:
        raise _bad_type(f"argument 'dtype' must be 'float32', 'float16' or 'bfloat16', not {dtype!r}")
    return name


def _new_array(count: int, name: str) -> Any:
    """An empty array of count elements; failing to get the memory is a qc error."""
    try:
        if name == "bfloat16":
            import torch  # bfloat16 arrays are torch tensors

            return torch.empty(count, dtype=torch.bfloat16)
        return np.empty(count, dtype=name)
    except MemoryError:
        raise OutOfMemoryError(2, f"argument 'count' is {count}: no memory for {count} {name} elements") from None
    except (ValueError, RuntimeError) as e:  # numpy: too big for an array; torch: allocation failed
        raise _bad_value(f"argument 'count' is {count}: {e}") from None


def _same_buffers(arrays: Sequence[ArrayLike], what: str) -> List[_Buffer]:
    if isinstance(arrays, np.ndarray):
        if arrays.ndim < 2:
            raise _bad_value(f"{what}: expected a list of arrays (or a 2-D array), one per rank")
        arrays = list(arrays)  # rows of a C-contiguous array stay contiguous views
    arrays = _list_arg(arrays, what)
    if not len(arrays):
        raise _bad_value(f"{what}: expected a non-empty list of arrays, one per rank")
    bufs = [_as_buffer(a, f"{what}[{i}]") for i, a in enumerate(arrays)]
    for i, b in enumerate(bufs[1:], 1):
        if b.dtype != bufs[0].dtype or b.count != bufs[0].count:
            raise _bad_value(f"{what}[{i}]: every rank's array must have the same dtype and element count")
    return bufs


def _error_buffer_handles(error_buffers: Optional[Sequence[Optional[ErrorBuffer]]], nranks: int) -> Any:
    """None, or the handles of one ErrorBuffer (or None) per rank."""
    if error_buffers is None:
        return None
    error_buffers = _list_arg(error_buffers, "argument 'error_buffers'")
    if len(error_buffers) != nranks:
        raise _bad_value("error_buffers must have one entry (or None) per rank")
    return [_error_buffer_handle(b) for b in error_buffers]


def _emulated_outputs(n: int, read: Sequence[_Buffer], out: Any, count: int,
                      new: Callable[[int], Any], in_place: bool) -> Tuple[List[Any], List[_Buffer]]:
    """The n ranks' output arrays of an emulation and their buffers: new
    ones (new(i) makes rank i's) when out is None, else out's, checked: one
    array (or row of a 2-D array) per rank, of the dtype of read[0] (the
    inputs read), `count` elements each, writable, none overlapping another
    output or an input read (rank i's output that is exactly read[i] runs
    in place when `in_place`). Reusing out across calls saves a fresh
    allocation's page faults per call, which at 32 ranks x 1 MiB cost as
    much as the emulation itself (docs/benchmarks.md)."""
    if out is None:
        outs = [new(i) for i in range(n)]
        return outs, [_as_buffer(o, "out") for o in outs]
    if isinstance(out, np.ndarray):
        if out.ndim < 2:
            raise _bad_value("out: expected a list of arrays (or a 2-D array), one per rank")
        out = list(out)
    outs = _list_arg(out, "argument 'out'")
    if len(outs) != n:
        raise _bad_value(f"out: {len(outs)} arrays for {n} ranks; expected one per rank")
    dsts = [_as_buffer(o, f"out[{i}]", writable=True) for i, o in enumerate(outs)]
    for i, d in enumerate(dsts):
        if d.cuda_device is not None:
            raise _bad_value(f"out[{i}] is in cuda:{d.cuda_device}; emulations run in host memory")
        if d.dtype != read[0].dtype:
            raise _bad_type(f"out[{i}]: dtype {_dtype_name(d.dtype)} differs from the inputs' "
                            f"{_dtype_name(read[0].dtype)}")
        if d.count != count:
            raise _bad_value(f"out[{i}]: {d.count} elements, expected {count}")
    # Every rank writes its output while the others read their inputs: an
    # output may share no byte with another output or with any input, save
    # a rank's own input when that is exactly its output (in place).
    written = sorted((d.ptr, d.ptr + d.nbytes, i) for i, d in enumerate(dsts)
                     if d.nbytes and not (in_place and d.ptr == read[i].ptr and d.nbytes == read[i].nbytes))
    for (_, end, i), (begin, _, j) in zip(written, written[1:]):
        if begin < end:
            raise _bad_value(f"out[{i}] and out[{j}] overlap; every rank needs an output of its own")
    spans = sorted((b.ptr, b.ptr + b.nbytes) for b in read if b.nbytes)
    starts = [b for b, _ in spans]
    reach = []  # reach[k]: the furthest end among spans[0..k]
    for _, end in spans:
        reach.append(max(end, reach[-1]) if reach else end)
    for begin, end, i in written:
        k = bisect.bisect_left(starts, end) - 1  # the inputs that start before this output ends
        if k >= 0 and reach[k] > begin:
            raise _bad_value(f"out[{i}] overlaps an input" +
                             (" (in place means out[i] is arrays[i])" if in_place else ""))
    return outs, dsts


def emulate_allreduce(
    arrays: Sequence[ArrayLike],
    policy: Policy,
    op: str = "sum",
    error_buffers: Optional[Sequence[Optional[ErrorBuffer]]] = None,
    layer: Optional[str] = None,
    call_index: int = 0,
    out: Optional[Sequence[ArrayLike]] = None,
) -> List[ArrayLike]:
    """Run one allreduce over len(arrays) virtual ranks in this process
    (qc_emulate_allreduce): rank i's input is arrays[i]. Returns the outputs,
    one per rank: new arrays of the inputs' kind (numpy arrays for numpy
    input), or out's (one array per rank, each like arrays[0]; out[i] may be
    arrays[i], in place; reusing them across calls skips a fresh
    allocation's page faults). Bit-identical to call `call_index` (0: the
    first) of `layer` (None: "*") in a real run of the same inputs, policy
    and residuals. error_buffers: None or one ErrorBuffer (or None) per rank."""
    bufs = _same_buffers(arrays, "arrays")
    outs, dsts = _emulated_outputs(len(bufs), bufs, out, bufs[0].count,
                                   lambda i: _empty_like(bufs[i]), in_place=True)
    ebs = _error_buffer_handles(error_buffers, len(bufs))
    _qc.emulate_allreduce(
        len(bufs),
        [b.ptr for b in bufs],
        [d.ptr for d in dsts],
        bufs[0].count,
        bufs[0].dtype,
        _op(op),
        _layer(layer),
        call_index,
        _policy_tuple(policy),
        ebs,
    )
    return outs


def emulate_alltoall(
    arrays: Sequence[ArrayLike], policy: Policy, layer: Optional[str] = None, call_index: int = 0,
    out: Optional[Sequence[ArrayLike]] = None,
) -> List[ArrayLike]:
    """Run one alltoall over len(arrays) virtual ranks (qc_emulate_alltoall),
    as call `call_index` of `layer` (see emulate_allreduce); each array holds
    len(arrays) equal blocks. Returns the outputs (new, or out's: one array
    per rank like arrays[0], none of them an input)."""
    bufs = _same_buffers(arrays, "arrays")
    n = len(bufs)
    if bufs[0].count % n:
        raise _bad_value(f"arrays hold {bufs[0].count} elements, not a multiple of {n} ranks")
    outs, dsts = _emulated_outputs(n, bufs, out, bufs[0].count, lambda i: _empty_like(bufs[i]),
                                   in_place=False)
    _qc.emulate_alltoall(n, [b.ptr for b in bufs], [d.ptr for d in dsts], bufs[0].count // n, bufs[0].dtype,
                         _layer(layer), call_index, _policy_tuple(policy))
    return outs


def emulate_reduce_scatter(
    arrays: Sequence[ArrayLike],
    policy: Policy,
    op: str = "sum",
    error_buffers: Optional[Sequence[Optional[ErrorBuffer]]] = None,
    layer: Optional[str] = None,
    call_index: int = 0,
    out: Optional[Sequence[ArrayLike]] = None,
) -> List[ArrayLike]:
    """Run one reduce-scatter over len(arrays) virtual ranks
    (qc_emulate_reduce_scatter), as call `call_index` of `layer` (see
    emulate_allreduce): each array holds len(arrays) equal blocks. Returns
    the outputs, one per rank, shaped as Comm.reduce_scatter's new ones, or
    out's (one array of count / len(arrays) elements per rank, none of them
    an input). error_buffers: None or one ErrorBuffer (or None) per rank,
    each of the arrays' element count."""
    bufs = _same_buffers(arrays, "arrays")
    n = len(bufs)
    if bufs[0].count % n:
        raise _bad_value(f"arrays hold {bufs[0].count} elements, not a multiple of {n} ranks")
    outs, dsts = _emulated_outputs(
        n, bufs, out, bufs[0].count // n,
        lambda i: _new_shaped(bufs[i], _shard_shape(tuple(bufs[i].obj.shape), n, bufs[i].count)),
        in_place=False)
    _qc.emulate_reduce_scatter(n, [b.ptr for b in bufs], [d.ptr for d in dsts], bufs[0].count // n,
                               bufs[0].dtype, _op(op), _layer(layer), call_index, _policy_tuple(policy),
                               _error_buffer_handles(error_buffers, n))
    return outs


def emulate_allgather(
    arrays: Sequence[ArrayLike],
    policy: Policy,
    error_buffers: Optional[Sequence[Optional[ErrorBuffer]]] = None,
    layer: Optional[str] = None,
    call_index: int = 0,
    out: Optional[Sequence[ArrayLike]] = None,
) -> List[ArrayLike]:
    """Run one allgather over len(arrays) virtual ranks
    (qc_emulate_allgather), as call `call_index` of `layer` (see
    emulate_allreduce). Returns the outputs, one per rank, each of shape
    (len(arrays), *arrays[0].shape), or out's (one array of len(arrays) x
    count elements per rank, none of them an input). error_buffers: None
    or one ErrorBuffer (or None) per rank, each of the arrays' element count."""
    bufs = _same_buffers(arrays, "arrays")
    n = len(bufs)
    outs, dsts = _emulated_outputs(n, bufs, out, n * bufs[0].count,
                                   lambda i: _new_shaped(bufs[i], (n,) + tuple(bufs[i].obj.shape)),
                                   in_place=False)
    _qc.emulate_allgather(n, [b.ptr for b in bufs], [d.ptr for d in dsts], bufs[0].count, bufs[0].dtype,
                          _layer(layer), call_index, _policy_tuple(policy), _error_buffer_handles(error_buffers, n))
    return outs


def emulate_broadcast(
    arrays: Sequence[Optional[ArrayLike]],
    policy: Policy,
    root: int,
    layer: Optional[str] = None,
    call_index: int = 0,
    out: Optional[Sequence[ArrayLike]] = None,
) -> List[ArrayLike]:
    """Run one broadcast from `root` over len(arrays) virtual ranks
    (qc_emulate_broadcast), as call `call_index` of `layer` (see
    emulate_allreduce). Only arrays[root] is read; the other entries may be
    None (an array there must have the root's dtype and element count).
    Returns the outputs, one per rank: new arrays like arrays[root], or
    out's (one array per rank like arrays[root], none of them the root's
    input)."""
    entries = _list_arg(arrays, "arrays")
    if not entries:
        raise _bad_value("arrays: expected a non-empty list of arrays, one per rank")
    root = _int_arg(root, "argument 'root'", -(2**31), 2**31 - 1)  # its range: checked by the library
    given = {i: _as_buffer(a, f"arrays[{i}]") for i, a in enumerate(entries) if a is not None}
    if 0 <= root < len(entries) and root not in given:
        raise _bad_value(f"arrays[{root}] is None: the root's array is the one broadcast")
    if not given:
        raise _bad_value("arrays: every entry is None; the root's array is the one broadcast")
    model = given.get(root, next(iter(given.values())))
    for i, b in given.items():
        if b.dtype != model.dtype or b.count != model.count:
            raise _bad_value(f"arrays[{i}]: every rank's array must have the same dtype and element count")
    # Only the root's input is read; the others' entries may be outputs.
    read = [given[root]] if root in given else []
    outs, dsts = _emulated_outputs(len(entries), read or [model], out, model.count,
                                   lambda i: _empty_like(model), in_place=False)
    sends = [given[i].ptr if i in given else 0 for i in range(len(entries))]
    _qc.emulate_broadcast(len(entries), sends, [d.ptr for d in dsts], model.count, model.dtype, root,
                          _layer(layer), call_index, _policy_tuple(policy))
    return outs


def emulate_sparse_allreduce(
    inputs: Sequence[Any],
    policy: Policy,
    op: str = "sum",
    layer: Optional[str] = None,
    call_index: int = 0,
    nrows: Optional[int] = None,
) -> Any:
    """Run one sparse allreduce over len(inputs) virtual ranks
    (qc_emulate_sparse_allreduce), as call `call_index` of `layer` (see
    emulate_allreduce). inputs[r] is rank r's rows: a torch sparse COO
    tensor, or an (indices, values) pair, as Comm.sparse_allreduce takes
    them (nnz may differ between ranks; dtype and row length may not).
    Every rank's result is the same bits, so one result comes back, in the
    form Comm.sparse_allreduce gives for inputs[0]: a coalesced sparse
    tensor or an (indices, values) pair; with nrows, the dense table
    (qc_emulate_sparse_allreduce_dense)."""
    rows = _sparse.emulated_rows(inputs)
    n = len(rows)
    first = rows[0]
    sparse_args = ([r.index_ptr for r in rows], [r.values.ptr for r in rows], [r.nnz for r in rows],
                   first.row_len)
    table = _sparse.dense_arg(first, nrows, None)
    if table is None:
        handle = _qc.emulate_sparse_allreduce(n, *sparse_args, first.values.dtype, _op(op), _layer(layer),
                                              call_index, _policy_tuple(policy))
        return _sparse.result(handle, first)
    # One table per virtual rank (the library writes each); they are equal.
    tables = [table] + [_sparse.dense_arg(first, nrows, None) for _ in range(n - 1)]
    _qc.emulate_sparse_allreduce_dense(n, *sparse_args, table[2], [t[1].ptr for t in tables], first.values.dtype,
                                       _op(op), _layer(layer), call_index, _policy_tuple(policy))
    return table[0]


# Sparse rows and results; it uses the helpers above.
from . import _sparse  # noqa: E402
