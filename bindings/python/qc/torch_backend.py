"""qc.torch_backend: the torch.distributed backend "qc" (PyTorch >= 2.0).

``import qc.torch`` registers it (cheaply: nothing is compiled then); the first
``dist.init_process_group("qc")`` (or ``"cpu:qc"``) compiles the C++ backend in
``_torch_backend/`` against the installed torch with
``torch.utils.cpp_extension.load`` (a minute or two, once: the result is cached in
torch's extension directory, ``TORCH_EXTENSIONS_DIR``) and links it to the libqc
that ``qc._qc`` uses.

Usage under torchrun (nothing but torch's rendezvous store is needed)::

    import torch.distributed as dist
    import qc, qc.torch
    qc.torch.set_backend_policy("allreduce:*", qc.Policy(codec="minmax", bits=4,
                                error_feedback=True))   # before or after init
    dist.init_process_group("cpu:qc")
    model = torch.nn.parallel.DistributedDataParallel(model)   # or fully_shard(model)

Layer names are call sites: ``<op>:<dtype>:<numel>:<k>`` with op one of allreduce,
reduce_scatter, allgather, broadcast, alltoall (and "barrier"), k the number of
earlier calls with the same (op, dtype, numel) since the last optimizer step.
See docs/python.md, "torch.distributed backend".
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

import qc as _qc

__all__ = [
    "register",
    "load_extension",
    "backend_of",
    "set_backend_policy",
    "backend_policy",
    "backend_state_dict",
    "load_backend_state_dict",
    "backend_stats",
    "fallback_counts",
    "reset_call_sites",
]

_STATE_FORMAT = "qc.torch_backend/1"
_PIPELINE_CHUNK = "4M"  # QC_PIPELINE_CHUNK of the backend's communicator, unless set
_SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_backend")
_lock = threading.Lock()
_extension: Any = None
_hook_installed = False
# (pattern, policy tuple) set with group=None: applied to every qc group made later.
_default_policies: List[Tuple[str, tuple]] = []


def _torch_major() -> int:
    try:
        return int(torch.__version__.split(".")[0])
    except ValueError:
        return 0


def _qc_header_dir() -> str:
    """Where qc.h is: next to the backend's sources (build tree, install), the
    source tree's include/, or the include/ beside libqc's lib/."""
    candidates = [
        _SOURCE_DIR,
        os.path.normpath(os.path.join(_SOURCE_DIR, "..", "..", "..", "..", "include")),
        os.path.normpath(os.path.join(os.path.dirname(_libqc_path()), "..", "include")),
    ]
    for d in candidates:
        if os.path.isfile(os.path.join(d, "qc.h")):
            return d
    raise RuntimeError("qc.torch_backend: qc.h not found (looked in " + ", ".join(candidates) + ")")


def _libqc_path() -> str:
    """The libqc that qc._qc loaded (the backend must use the same copy)."""
    from . import _qc as ext  # noqa: F401  (loads libqc)
    try:
        with open("/proc/self/maps", "r") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if base.startswith("libqc.so"):
                    return path
    except OSError:
        pass
    here = os.path.dirname(os.path.abspath(ext.__file__))
    for d in (here, os.path.normpath(os.path.join(here, "..", "..", "..", "src"))):
        for name in ("libqc.so.1", "libqc.so"):
            if os.path.isfile(os.path.join(d, name)):
                return os.path.join(d, name)
    raise RuntimeError("qc.torch_backend: cannot find the libqc that qc._qc uses")


def load_extension(verbose: bool = False) -> Any:
    """Compile (first time) and import the C++ backend; returns its module."""
    global _extension
    with _lock:
        if _extension is not None:
            return _extension
        if _torch_major() < 2:
            raise RuntimeError(f"qc.torch_backend needs torch >= 2.0 (this is {torch.__version__})")
        from torch.utils.cpp_extension import load

        sources = sorted(os.path.join(_SOURCE_DIR, f) for f in os.listdir(_SOURCE_DIR)
                         if f.endswith(".cpp"))
        libqc = _libqc_path()
        include = _qc_header_dir()
        digest = hashlib.sha1()
        for f in sorted(os.listdir(_SOURCE_DIR)):
            if f.endswith((".cpp", ".h")):
                with open(os.path.join(_SOURCE_DIR, f), "rb") as fh:
                    digest.update(f.encode() + fh.read())
        with open(os.path.join(include, "qc.h"), "rb") as fh:
            digest.update(fh.read())
        digest.update(libqc.encode())
        _extension = load(
            name="qc_torch_backend_" + digest.hexdigest()[:12],
            sources=sources,
            extra_include_paths=[include],
            extra_cflags=["-O2"],
            extra_ldflags=[libqc, "-Wl,-rpath," + os.path.dirname(libqc)],
            verbose=verbose,
        )
        return _extension


def _install_optimizer_hook(ext: Any) -> None:
    """Every optimizer step restarts the call-site counters (k in the layer names)."""
    global _hook_installed
    if _hook_installed:
        return
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(lambda optimizer, args, kwargs: ext.reset_all_call_sites())
    _hook_installed = True


def _policy_tuple(policy: Any) -> tuple:
    if isinstance(policy, dict):
        policy = _qc.Policy(**policy)
    if not isinstance(policy, _qc.Policy):
        raise _qc.ArgumentTypeError(2, "policy must be a qc.Policy or a dict of its fields, not "
                                    + type(policy).__name__)
    return policy._to_tuple()


def _nccl_fallback(store: Any, rank: int, size: int, timeout: Any) -> Any:
    """What CUDA tensors qc does not take go to: NCCL's process group where this
    torch has one and sees a GPU (it connects at its first collective), else
    None (gloo then moves them too)."""
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        return None
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = timeout
    return dist.ProcessGroupNCCL(dist.PrefixStore("qc/fallback_cuda/", store), rank, size, options)


def _create_backend(opts: Any, backend_options: Any) -> Any:
    ext = load_extension()
    store, rank, size, timeout = opts.store, opts.group_rank, opts.group_size, opts.timeout
    # Two gloo groups of our own, each under its own store prefix: one carries
    # qc's bytes (point to point only), the other runs what qc does not do.
    bytes_group = dist.ProcessGroupGloo(dist.PrefixStore("qc/bytes/", store), rank, size, timeout)
    fallback = dist.ProcessGroupGloo(dist.PrefixStore("qc/fallback/", store), rank, size, timeout)
    max_sites = int(os.environ.get("QC_TORCH_MAX_SITES", "4096"))
    # Every message over gloo costs a rendezvous and thread hand-offs, so qc's
    # default pipeline pieces (128 KiB) cost more than they overlap here:
    # unless QC_PIPELINE_CHUNK says otherwise, this communicator cuts blocks
    # at 4 MiB (docs/python.md has the measurement). qc reads it at creation.
    own_chunk = "QC_PIPELINE_CHUNK" not in os.environ
    if own_chunk:
        os.environ["QC_PIPELINE_CHUNK"] = _PIPELINE_CHUNK
    try:
        # CUDA tensors: qc's NCCL communicator, made at the first collective on
        # them from a unique id that rank 0 puts in this store.
        backend = ext.QcBackend(rank, size, bytes_group, fallback, timeout.total_seconds(), max_sites,
                                dist.PrefixStore("qc/cuda/", store))
    finally:
        if own_chunk:
            del os.environ["QC_PIPELINE_CHUNK"]
    cuda_fallback = _nccl_fallback(store, rank, size, timeout)
    if cuda_fallback is not None:
        backend.set_cuda_fallback(cuda_fallback)
    for pattern, t in _default_policies:
        backend.set_layer_policy(pattern, t)
    _install_optimizer_hook(ext)
    return backend


def register() -> bool:
    """Register the backend "qc" with torch.distributed (torch >= 2.0); False if
    this torch cannot have it. Called by ``import qc.torch``."""
    if _torch_major() < 2 or not dist.is_available():
        return False
    if not hasattr(dist.Backend, "register_backend"):
        return False
    if "qc" in getattr(dist.Backend, "backend_list", []) and "QC" in getattr(dist.Backend, "_plugins", {}):
        return True
    dist.Backend.register_backend("qc", _create_backend, extended_api=True, devices=["cpu", "cuda"])
    return True


def backend_of(group: Any = None) -> Any:
    """The QcBackend of a process group (None: the default group)."""
    if not dist.is_initialized():
        raise RuntimeError("qc.torch_backend: no process group (call dist.init_process_group first)")
    pg = group if group is not None else dist.group.WORLD
    ext = load_extension()
    backend = pg._get_backend(torch.device("cpu"))
    if not isinstance(backend, ext.QcBackend):
        raise ValueError(f"qc.torch_backend: the group's CPU backend is {type(backend).__name__}, not qc")
    return backend


def set_backend_policy(pattern: str, policy: Any, group: Any = None) -> None:
    """Set the qc policy of layers matching ``pattern`` ("allreduce:*",
    "reduce_scatter:float32:*", "*"); every rank must make the same calls.
    ``group=None``: also remembered for every qc group created later (so it may be
    called before ``init_process_group``)."""
    t = _policy_tuple(policy)
    if group is None:
        _default_policies.append((pattern, t))
        if not dist.is_initialized():
            return
        try:
            backend = backend_of(None)
        except ValueError:
            return
    else:
        backend = backend_of(group)
    backend.set_layer_policy(pattern, t)


def backend_policy(layer: str, group: Any = None) -> "_qc.Policy":
    """The policy a layer name (a call site) resolves to."""
    return _qc.Policy._from_tuple(backend_of(group).get_layer_policy(layer))


def backend_state_dict(group: Any = None) -> Dict[str, Any]:
    """Error-feedback residuals of every call site, for a checkpoint (waits for
    the group's qc calls in flight)."""
    return {"format": _STATE_FORMAT, "residuals": backend_of(group).residuals()}


def load_backend_state_dict(state: Dict[str, Any], group: Any = None) -> None:
    """Restore what backend_state_dict saved (same ranks, same group size)."""
    if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
        raise ValueError(f"qc.torch_backend: not a {_STATE_FORMAT} state dict")
    backend_of(group).load_residuals(dict(state["residuals"]))


def backend_stats(group: Any = None) -> Dict[str, float]:
    """qc's counters for the group: calls, logical_bytes, wire_bytes, seconds."""
    return backend_of(group).stats()


def fallback_counts(group: Any = None) -> Dict[str, int]:
    """Calls that went to the gloo fallback, per "op: reason"."""
    return backend_of(group).fallback_counts()


def reset_call_sites() -> None:
    """Restart the call-site counters of every qc group (what an optimizer step does)."""
    if _extension is not None:
        _extension.reset_all_call_sites()
