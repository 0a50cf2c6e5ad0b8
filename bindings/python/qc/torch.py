"""qc.torch: a PyTorch DDP communication hook that allreduces gradient buckets with qc.

With torch >= 2.0, importing this module also registers the torch.distributed backend
"qc" (qc/torch_backend.py: ``dist.init_process_group("cpu:qc")`` under torchrun, no MPI;
``set_backend_policy``, ``backend_state_dict`` ... are re-exported here). The rest of this
docstring is about the hook.

Import it explicitly (``import qc.torch``); ``import qc`` never imports torch, so the
package keeps working where torch is not installed.

Usage (CPU, torch 1.13 or 2.x, DDP over gloo, qc over MPI; under torchrun see below)::

    import torch
    from mpi4py import MPI
    import qc, qc.torch

    rank, world = qc.torch.init_process_group_from_mpi()      # gloo, from mpirun's env
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    state = qc.torch.QcHookState(
        model,                                                  # layer names for the policies
        policy=qc.Policy(codec="minmax", bits=4, bucket_size=128,
                         algorithm="sra", error_feedback=True))
    model.register_comm_hook(state, qc.torch.allreduce_hook)   # once, before the first backward
    ...train...
    ckpt["qc_hook"] = state.state_dict()                        # error-feedback residuals
    state.close()                                               # before MPI finalises

Launch line (OpenMPI; one process per rank, all on this host or across hosts)::

    mpirun -np 4 /usr/bin/python3 train.py
    # as root or on a small machine:
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\
        mpirun -np 4 --oversubscribe /usr/bin/python3 train.py

with ``PYTHONPATH`` pointing at the directory that holds the ``qc`` package (for a build
tree: ``<build>/bindings/python``).

Launchers. Under mpirun the communicator is built from MPI's world (MPI's ranks must be
DDP's). Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR; no MPI launcher in the
environment), with torch.distributed initialized, it is built over DDP's process group
instead (:func:`comm_from_process_group`: qc's bytes over a gloo group of the same ranks,
through :class:`ProcessGroupTransport`), so no MPI is needed::

    torchrun --nproc_per_node 4 train.py      # dist.init_process_group("gloo") inside

Handed MPI's world under torchrun (``mpi_comm=MPI.COMM_WORLD``) each process is alone in
it and the hook would average every gradient with itself: :class:`QcHookState` refuses
that with ``qc.MismatchError`` (see :func:`check_ranks_match`), as any ``comm=`` whose
ranks are not the process group's. On a single host,
:func:`init_process_group_from_mpi` sets ``GLOO_SOCKET_IFNAME=lo`` unless it is already
set.

Policies. :class:`QcHookState` applies qc's ``"cgx"`` preset
(``comm.policy_preset("cgx", base=policy)``, see ``qc_comm_apply_preset`` in include/qc.h):
every layer whose name matches ``*bias*``, ``*norm*``, ``*Norm*``, ``*.bn*``, ``bn*``,
``*.ln*`` or ``ln*`` goes in full precision, everything else with ``policy``, and any
segment under ``max(policy.min_compress_bytes, 16 KiB)`` is sent uncompressed.
Pass ``preset=None`` to apply ``policy`` to every layer instead (``set_layer_policy("*")``),
or ``policy=None`` to keep whatever policies the communicator already has.
:func:`qc_policies_for_model` does the same and reports what each parameter resolves to.

How a bucket is reduced. A DDP bucket is one flat tensor holding several parameters'
gradients back to back, in the order of ``bucket.parameters()``. The hook calls
``comm.iallreduce_segments(buffer, counts=[p.numel() ...], layers=[name ...], op="avg",
error_buffer=...)`` in place on ``bucket.buffer()`` (zero copy), so each parameter keeps
its own policy inside the fused bucket. DDP does not divide by the world size when a hook
is registered: ``op="avg"`` does it. The call is non-blocking: the hook returns a
``torch.futures.Future`` that a thread of the state completes when qc's request has, so
DDP overlaps the backward pass with qc's communication (qc runs the request on its
progress thread; an MPI without MPI_THREAD_MULTIPLE runs it inside the hook).
``QcHookState(..., async_op=False)`` reduces inside the hook and returns a completed
future instead; both give the same bits. qc's results are bit-identical on every rank,
so replicas stay identical.

Error feedback. Residuals are kept per bucket index in a :class:`qc.ErrorBuffer` (only for
buckets with at least one error-feedback segment). DDP rebuilds its buckets after the
first iteration, so indices are stable from the second iteration on; when the size or
layout of an index changes the buffer is recreated (its residuals start from zero).
(DDP's first-iteration buckets hold the same parameters in another order: the residuals
of that one iteration are dropped, as PowerSGD's error feedback starts at iteration 2.)

Checkpoints. ``state.state_dict()`` holds each bucket's residuals (qc.ErrorBuffer.save())
and segment order; save it with the model and optimizer. To resume, build the model, wrap
it in DDP, make a new QcHookState with the same policy, register the hook, load the model
and optimizer states and ``state.load_state_dict(ckpt["qc_hook"])``, then train: the
fresh DDP's first iteration reduces in the saved segment order (one copy per bucket), so
with deterministic rounding the resumed steps are bit for bit those of an uninterrupted
run (tests/test_torch_hook.py checks it). Stochastic rounding draws its bits from the
communicator's call sequence, which a new communicator restarts: resumed runs are valid
but not identical.
"""

import atexit
import os
import queue
import shutil
import socket
import tempfile
import threading
import warnings
from datetime import timedelta
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

import qc as _qc
from qc.onebit_adam import OneBitAdam

__all__ = [
    "OneBitAdam",
    "QcHookState",
    "allreduce_hook",
    "ProcessGroupTransport",
    "comm_from_process_group",
    "check_ranks_match",
    "qc_policies_for_model",
    "init_process_group_from_mpi",
]

_STATE_FORMAT = "qc.torch.QcHookState/1"

# A bucket's layout: (counts, layer names), one entry per parameter, in buffer order.
_Layout = Tuple[Tuple[int, ...], Tuple[Optional[str], ...]]


class _Slot:
    """Error buffer of one bucket index and the layout its residuals belong to."""
    __slots__ = ("layout", "ebuf", "restored")

    def __init__(self, layout: _Layout, ebuf: Optional["_qc.ErrorBuffer"]):
        self.layout = layout
        self.ebuf = ebuf
        self.restored = False


def _named_parameters(model: torch.nn.Module) -> Iterable[Tuple[str, torch.nn.Parameter]]:
    """named_parameters() of the wrapped module when `model` is a DDP wrapper, so names
    are the model's own ("fc1.weight", not "module.fc1.weight")."""
    if not isinstance(model, torch.nn.Module):
        raise _qc.ArgumentTypeError(1, f"argument 'model' must be a torch.nn.Module, not {type(model).__name__}")
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module
    return model.named_parameters()


def _process_group_of(model: Optional[torch.nn.Module]) -> Any:
    """The process group a DDP model reduces over (None: the default group)."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return getattr(model, "process_group", None)
    return None


def _mismatch(qc_rank: int, qc_size: int, torch_rank: int, torch_size: int, peer: str = "") -> "_qc.Error":
    return _qc.MismatchError(
        5, f"qc.torch: the qc communicator is rank {qc_rank} of {qc_size} but torch.distributed's "
           f"process group is rank {torch_rank} of {torch_size}{peer}: the hook would reduce over other "
           "processes than DDP and the replicas would drift apart. Launch with mpirun (and "
           "qc.torch.init_process_group_from_mpi()), so that MPI's world is DDP's group; torchrun "
           "without mpirun leaves each process alone in MPI's world (there, leave comm= and "
           "mpi_comm= unset: qc then reduces over the process group itself). Or pass comm= a "
           "qc.Comm whose ranks are the process group's, in the same order.")


def check_ranks_match(comm: Any, process_group: Any = None, collective: bool = False) -> None:
    """Raise ``qc.MismatchError`` unless `comm` (a qc.Comm) is the same rank of the same
    number of ranks as this process in torch.distributed's `process_group` (None: the
    default group, which must be initialized).

    The message names both ranks and sizes and what to do. With ``collective=True``
    (every rank of the group must call; gloo groups only, else ignored) the pairs are
    gathered over the group, so every rank raises when any rank differs, rather than
    only the ranks whose own numbers differ. QcHookState calls it at construction
    (collective) when torch.distributed is initialized, else at the hook's first call.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise _qc.InvalidArgumentError(1, "qc.torch.check_ranks_match: torch.distributed is not "
                                          "initialized; there is no process group to compare with")
    mine = (int(comm.rank), int(comm.size))
    torch_rank = dist.get_rank(process_group)
    torch_size = dist.get_world_size(process_group)
    everyone: List[Any] = []
    if collective and dist.get_backend(process_group) == "gloo":
        # Every rank joins before any judges: one that raised first would leave
        # the others waiting in the all-gather for it.
        everyone = [None] * torch_size
        dist.all_gather_object(everyone, mine, group=process_group)
    if mine != (torch_rank, torch_size):
        raise _mismatch(*mine, torch_rank, torch_size)
    for peer_rank, theirs in enumerate(everyone):
        if tuple(theirs) != (peer_rank, torch_size):
            raise _mismatch(*mine, torch_rank, torch_size,
                            f" (and torch rank {peer_rank}'s qc communicator is rank {theirs[0]} of "
                            f"{theirs[1]})")


def qc_policies_for_model(comm: "_qc.Comm", model: torch.nn.Module,
                          compressed: "_qc.Policy") -> Dict[str, "_qc.Policy"]:
    """Set qc's "cgx" preset on `comm` with `compressed` as its base and return what each
    parameter of `model` resolves to (name -> qc.Policy).

    This is ``comm.policy_preset("cgx", base=compressed)`` (a purely local call: every
    rank must make it): biases and normalisation layers (``*bias*``, ``*norm*``,
    ``*Norm*``, ``*.bn*``, ``bn*``, ``*.ln*``, ``ln*``) in full precision, all other
    layers with `compressed`, and min_compress_bytes raised to at least 16 KiB, so a
    parameter under 4096 float32 elements travels uncompressed whatever its name. The
    returned policies are the pattern match; the size rule applies per call.
    """
    names = [name for name, _ in _named_parameters(model)]  # a bad model fails before any change
    comm.policy_preset("cgx", base=compressed)
    return {name: comm.get_layer_policy(name) for name in names}


class _Completer:
    """One thread that completes the asynchronous hook's futures: it waits for each
    started request in start order (qc completes a communicator's requests in that
    order, so a FIFO never waits behind a later one) with the GIL released inside
    wait(), then sets the future's result, or its exception when the request failed.
    Each entry holds what the request reads and writes until its future is set."""

    def __init__(self) -> None:
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="qc.torch hook completer",
                                        daemon=True)
        self._thread.start()

    def put(self, request: "_qc.Request", future: torch.futures.Future, finish: Any) -> None:
        self._queue.put((request, future, finish))

    def _run(self) -> None:
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            request, future, finish = entry
            del entry
            try:
                request.wait()
                result = finish()
            except BaseException as e:  # noqa: B902 - every failure belongs to the future
                request.close()
                future.set_exception(e)
            else:
                request.close()
                future.set_result(result)
            del request, future, finish

    def close(self) -> None:
        """Complete the futures still queued (their requests end within the
        communicator's timeout), then stop the thread."""
        self._queue.put(None)
        self._thread.join()


class QcHookState:
    """State of :func:`allreduce_hook`: the qc communicator, parameter names, error
    buffers per bucket index and counters.

    Args:
        model: the model (or its DDP wrapper) whose ``named_parameters()`` name the
            segments of each bucket; None sends every segment under the "*" policy.
        comm: a ``qc.Comm`` to use (not closed by :meth:`close`). None: build one
            (owned, closed by :meth:`close`): under an MPI launcher, or when `mpi_comm` is
            given, ``qc.Comm.from_mpi(mpi_comm)``; otherwise, when torch.distributed is
            initialized (torchrun), :func:`comm_from_process_group` over DDP's process
            group, so qc's bytes travel over gloo and no MPI is needed.
        mpi_comm: an mpi4py communicator for that case; None means ``MPI.COMM_WORLD``.
            Its ranks must be the DDP process group's ranks, in the same order.
        policy: a ``qc.Policy`` for the compressed layers, or None to keep the
            communicator's current policies.
        preset: "cgx" (default: biases and norms in full precision, see the module
            docstring) or None to set `policy` for "*" (every layer).
        op: "avg" (DDP's semantics) or "sum".
        timeout: seconds, for a communicator built here.
        async_op: True (default): the hook starts a non-blocking qc request
            (``comm.iallreduce_segments``) and returns a future that a thread of this
            state completes when the request has, so the backward pass goes on
            computing the next buckets' gradients while qc reduces this one. False:
            the hook reduces the bucket before it returns (a completed future). Both
            give the same bits.
        adapt_every: K > 0 re-runs ``comm.adapt_policies`` (adaptive bit widths,
            paper 003 §5) after every K-th step, from the layer statistics qc has
            gathered so far; the new widths apply from the next step. 0 (default):
            never. It is collective: every rank's hook runs it after the same step.
        adapt: keyword arguments of ``comm.adapt_policies`` (method, alpha,
            allowed_bits); None: its defaults.

    Raises:
        qc.MismatchError: the communicator's rank or size is not this process's in the
            process group DDP uses (``model.process_group``, or the default group), e.g.
            under torchrun without mpirun; checked here when torch.distributed is
            initialized (on every rank of a gloo group), else at the hook's first call.
        qc.InvalidArgumentError, qc.ArgumentTypeError: a bad argument.

    Attributes:
        steps: number of completed DDP steps seen (buckets with ``is_last()``).
        calls: number of buckets reduced.
        adapt_reports: one dict per adaptation: the step after which it ran
            (``step``), ``comm.adapt_policies``'s report, and the policies it left
            (``policies``, as :meth:`layer_policies`).
    """

    def __init__(self, model: Optional[torch.nn.Module] = None, comm: Optional["_qc.Comm"] = None,
                 mpi_comm: Any = None, policy: Optional["_qc.Policy"] = None,
                 preset: Optional[str] = "cgx", op: str = "avg", timeout: float = 300.0,
                 async_op: bool = True, adapt_every: int = 0, adapt: Optional[Dict[str, Any]] = None):
        _qc._choice_arg(op, {"avg": 1, "sum": 0}, "argument 'op'")
        if not isinstance(async_op, bool):
            raise _qc.ArgumentTypeError(1, f"argument 'async_op' must be a bool, not {type(async_op).__name__}")
        if isinstance(adapt_every, bool) or not isinstance(adapt_every, int):
            raise _qc.ArgumentTypeError(1, f"argument 'adapt_every' must be an int, not {type(adapt_every).__name__}")
        if adapt_every < 0:
            raise _qc.InvalidArgumentError(1, f"argument 'adapt_every' must be >= 0, not {adapt_every}")
        if adapt is not None and not isinstance(adapt, dict):
            raise _qc.ArgumentTypeError(1, f"argument 'adapt' must be a dict or None, not {type(adapt).__name__}")
        unknown = set(adapt or {}) - {"method", "alpha", "allowed_bits"}
        if unknown:
            raise _qc.InvalidArgumentError(1, f"argument 'adapt': unknown keys {sorted(unknown)} "
                                              "(method, alpha, allowed_bits)")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise _qc.ArgumentTypeError(1, f"argument 'model' must be a torch.nn.Module or None, "
                                           f"not {type(model).__name__}")
        if comm is not None and not isinstance(comm, _qc.Comm):
            raise _qc.ArgumentTypeError(1, f"argument 'comm' must be a qc.Comm or None, not {type(comm).__name__}")
        if policy is not None and not isinstance(policy, _qc.Policy):
            raise _qc.ArgumentTypeError(1, f"argument 'policy' must be a qc.Policy or None, "
                                           f"not {type(policy).__name__}")
        self._closed = True  # until constructed: close() does nothing
        self._owns_comm = comm is None
        if comm is None:
            if (mpi_comm is None and dist.is_available() and dist.is_initialized()
                    and not _launched_by_mpi()):
                # torchrun and friends: qc's bytes over DDP's own process group
                comm = comm_from_process_group(_process_group_of(model), timeout=timeout)
            else:
                if mpi_comm is None:
                    from mpi4py import MPI  # imported here: qc.torch works with any qc.Comm
                    mpi_comm = MPI.COMM_WORLD
                comm = _qc.Comm.from_mpi(mpi_comm, timeout=timeout)
        self.comm = comm
        self.op = op.lower()
        self.preset = preset
        self._process_group = _process_group_of(model)
        self._ranks_checked = False
        try:
            if dist.is_available() and dist.is_initialized():
                check_ranks_match(comm, self._process_group, collective=True)
                self._ranks_checked = True
            if policy is not None:
                if preset is None:
                    comm.set_layer_policy("*", policy)
                else:
                    comm.policy_preset(preset, base=policy)
        except BaseException:
            if self._owns_comm:
                comm.close()
            raise
        # id(param) -> name, and data_ptr -> name as a fallback for tensors that come
        # back from C++ as new Python objects.
        self._names_by_id: Dict[int, str] = {}
        self._names_by_ptr: Dict[int, str] = {}
        self._model = model
        if model is not None:
            self._index_names(model)
        # bucket index -> error-buffer slot
        self._buffers: Dict[int, _Slot] = {}
        # bucket index -> (saved image or None, its layout or None) waiting for its bucket
        self._pending: Dict[int, Tuple[Optional[bytes], Optional[_Layout]]] = {}
        self.steps = 0
        self.calls = 0
        self.async_op = async_op
        self.adapt_every = adapt_every
        self._adapt_args = dict(adapt or {})
        self.adapt_reports: List[Dict[str, Any]] = []
        self._completer: Optional[_Completer] = None  # started by the first asynchronous call
        self._stats0 = dict(comm.stats())
        self._closed = False

    def layer_policies(self) -> Dict[str, "_qc.Policy"]:
        """The policy each named parameter of the model is reduced with now
        (``comm.get_layer_policy`` of its name); empty without a model."""
        names = sorted(set(self._names_by_id.values()))
        return {name: self.comm.get_layer_policy(name) for name in names}

    def _check_ranks_once(self) -> None:
        """At the first hook call of a state made before torch.distributed started."""
        if not self._ranks_checked:
            check_ranks_match(self.comm, self._process_group)
            self._ranks_checked = True

    # ---- names and layouts ------------------------------------------------
    def _index_names(self, model: torch.nn.Module) -> None:
        self._names_by_id.clear()
        self._names_by_ptr.clear()
        for name, p in _named_parameters(model):
            self._names_by_id[id(p)] = name
            self._names_by_ptr[p.data_ptr()] = name

    def _name_of(self, p: torch.Tensor) -> Optional[str]:
        name = self._names_by_id.get(id(p))
        if name is None:
            name = self._names_by_ptr.get(p.data_ptr())
        if name is None and self._model is not None:
            self._index_names(self._model)  # parameters replaced since construction
            name = self._names_by_id.get(id(p)) or self._names_by_ptr.get(p.data_ptr())
        return name

    def layout(self, bucket: dist.GradBucket) -> _Layout:
        """(counts, layer names) of `bucket`'s segments, in buffer order (tuples)."""
        buf = bucket.buffer()
        params = bucket.parameters()
        counts = [int(p.numel()) for p in params]
        if not params or sum(counts) != buf.numel():
            if params:
                warnings.warn(f"qc.torch: bucket {bucket.index()} has {buf.numel()} elements but "
                              f"its parameters {sum(counts)}; reducing it as one segment",
                              RuntimeWarning)
            return (int(buf.numel()),), (None,)
        return tuple(counts), tuple(self._name_of(p) for p in params)

    def _wants_error_feedback(self, layers: Sequence[Optional[str]]) -> bool:
        # Asked when a bucket's slot is made: set policies before the first step.
        return any(bool(self.comm.get_layer_policy(n).error_feedback) for n in set(layers))

    @staticmethod
    def _permutation(frm: _Layout, to: _Layout) -> Optional[List[Tuple[int, int, int]]]:
        """[(offset in `frm`, offset in `to`, count)] when `to` is a reordering of the
        same named segments as `frm`, else None."""
        fc, fl = frm
        tc, tl = to
        if len(fc) != len(tc) or None in fl or len(set(fl)) != len(fl):
            return None
        where, off = {}, 0
        for c, n in zip(fc, fl):
            where[n] = (off, c)
            off += c
        out, off = [], 0
        for c, n in zip(tc, tl):
            src = where.get(n)
            if src is None or src[1] != c:
                return None
            out.append((src[0], off, c))
            off += c
        return out

    def _slot(self, index: int, layout: _Layout) -> _Slot:
        """The error-buffer slot of bucket `index` for a bucket arriving with `layout`."""
        cur = self._buffers.get(index)
        if cur is not None and cur.layout == layout:
            return cur
        pend = self._pending.get(index)
        if pend is not None:
            image, saved = pend
            n = sum(layout[0])
            if saved is not None:
                perm = self._permutation(layout, saved)
                if perm is None:
                    return self._new_slot(index, layout, cur)  # not this bucket (yet)
                # Residuals saved for the same parameters in another order (a fresh
                # DDP's first-iteration buckets are in another order than the rebuilt
                # ones the checkpoint was taken with): reduce in the saved order.
                slot = self._new_slot(index, saved, cur, restored=True)
                if slot.ebuf is not None and image is not None:
                    slot.ebuf.load(image)
                del self._pending[index]
                return slot
            if image is not None and len(image) == 56 + 4 * n:  # qc_error_buffer_save, n elements
                slot = self._new_slot(index, layout, cur, restored=True)
                if slot.ebuf is not None:
                    slot.ebuf.load(image)
                del self._pending[index]
                return slot
        if cur is not None and self._permutation(layout, cur.layout) is not None \
                and cur.restored:
            return cur  # restored residuals: keep reducing in their order
        return self._new_slot(index, layout, cur)

    def _new_slot(self, index: int, layout: _Layout, old: Optional[_Slot],
                  restored: bool = False) -> _Slot:
        if old is not None and old.ebuf is not None:
            old.ebuf.close()
        ebuf = None
        if self._wants_error_feedback(layout[1]):
            ebuf = _qc.ErrorBuffer(self.comm, sum(layout[0]))
        slot = _Slot(layout, ebuf)
        slot.restored = restored
        self._buffers[index] = slot
        return slot

    def _reduce(self, bucket: dist.GradBucket) -> torch.Tensor:
        """Reduce `bucket` now (the synchronous hook); returns its buffer."""
        flat, counts, layers, ebuf, finish = self._prepare(bucket)
        self.comm.allreduce_segments(flat, counts, layers, out=flat, op=self.op, error_buffer=ebuf)
        return finish()

    def _start(self, bucket: dist.GradBucket) -> Tuple["_qc.Request", Any]:
        """Start reducing `bucket` (the asynchronous hook): the qc.Request and the
        function that gives the buffer once it has completed."""
        flat, counts, layers, ebuf, finish = self._prepare(bucket)
        request = self.comm.iallreduce_segments(flat, counts, layers, out=flat, op=self.op,
                                                error_buffer=ebuf)
        return request, finish

    def _prepare(self, bucket: dist.GradBucket) -> Tuple[torch.Tensor, Tuple[int, ...],
                                                         Tuple[Optional[str], ...],
                                                         Optional["_qc.ErrorBuffer"], Any]:
        """What to reduce for `bucket` (flat tensor, counts, layer names, error buffer)
        and the function that gives the bucket's buffer once the flat tensor is reduced."""
        buf = bucket.buffer()
        layout = self.layout(bucket)
        slot = self._slot(bucket.index(), layout)
        counts, layers = slot.layout
        if slot.layout == layout:
            return buf, counts, layers, slot.ebuf, lambda: buf
        # The bucket holds the slot's segments in another order: gather them into the
        # slot's order, reduce, scatter back (a copy; only until DDP rebuilds its
        # buckets into the order the residuals were saved in).
        perm = self._permutation(layout, slot.layout)
        tmp = torch.empty_like(buf)
        for src, dst, c in perm:
            tmp[dst:dst + c].copy_(buf[src:src + c])

        def scatter_back() -> torch.Tensor:
            for src, dst, c in perm:
                buf[src:src + c].copy_(tmp[dst:dst + c])
            return buf
        return tmp, counts, layers, slot.ebuf, scatter_back

    # ---- checkpoints -------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """The hook's state for a checkpoint (picklable, torch.save-able)::

            {"format": "qc.torch.QcHookState/1",
             "buckets": {index: {"image": bytes or None,  # qc.ErrorBuffer.save() of the
                                                          # residuals (None: no error feedback)
                                 "counts": [int, ...],     # the bucket's layout: segment
                                 "layers": [str, ...]}}}   # order the hook reduces in

        One entry per bucket seen; entries loaded but not yet applied are included as
        they are. The layout is kept even without error feedback: a restored run
        reduces its first (not yet rebuilt) buckets in the saved segment order, so its
        steps are bit for bit those of the run that was checkpointed (for codecs with
        deterministic rounding; stochastic rounding draws from the communicator's call
        sequence, which a new communicator restarts)."""
        out: Dict[int, Dict[str, Any]] = {}
        for index, slot in self._buffers.items():
            out[index] = {"image": None if slot.ebuf is None else slot.ebuf.save(),
                          "counts": list(slot.layout[0]), "layers": list(slot.layout[1])}
        for index, (image, layout) in self._pending.items():  # loaded, not applied yet
            out[index] = {"image": image,
                          "counts": None if layout is None else list(layout[0]),
                          "layers": None if layout is None else list(layout[1])}
        return {"format": _STATE_FORMAT, "buckets": out}

    def load_state_dict(self, state: Dict[Any, Any]) -> None:
        """Restore residuals saved by :meth:`state_dict` (also accepted: a plain
        ``{index: bytes}`` of ErrorBuffer images, matched on element count only).
        A malformed state raises qc.InvalidArgumentError / qc.ArgumentTypeError here,
        before anything changes.

        Call it after ``register_comm_hook`` and before the next backward. A bucket is
        restored when it first appears with the saved parameters (in any order: a fresh
        DDP's first iteration has its buckets in another order than the rebuilt ones a
        checkpoint is taken with, and the hook then reduces in the saved order so the
        step is exactly the one an uninterrupted run would take)."""
        pending = _read_state(state)
        for slot in self._buffers.values():
            if slot.ebuf is not None:
                slot.ebuf.close()
        self._buffers.clear()
        self._pending = pending

    # ---- counters ------------------------------------------------------------
    def stats(self) -> Dict[str, float]:
        """qc counters since construction (or :meth:`reset_counters`), plus steps, calls
        and wire_bytes_per_step (bytes this rank handed to the transport per step)."""
        now = self.comm.stats()
        d = {k: now[k] - self._stats0.get(k, 0) for k in now}
        d["steps"] = self.steps
        d["calls"] = self.calls
        d["wire_bytes_per_step"] = d["wire_bytes"] / self.steps if self.steps else 0.0
        return d

    def reset_counters(self) -> None:
        self._stats0 = dict(self.comm.stats())
        self.steps = 0
        self.calls = 0

    def residual_norm(self) -> float:
        """L2 norm of all error-feedback residuals held by this rank."""
        total = 0.0
        for slot in self._buffers.values():
            if slot.ebuf is not None:
                total += float(slot.ebuf.norm) ** 2
        return total ** 0.5

    # ---- lifetime ------------------------------------------------------------
    def close(self) -> None:
        """Free the error buffers and, if this state built it, the communicator.
        Idempotent; call it before MPI is finalised."""
        if self._closed:
            return
        self._closed = True
        if self._completer is not None:
            self._completer.close()
            self._completer = None
        for slot in self._buffers.values():
            if slot.ebuf is not None:
                slot.ebuf.close()
        self._buffers.clear()
        if self._owns_comm:
            self.comm.close()

    def __enter__(self) -> "QcHookState":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self):
        # pickle, copy and deepcopy
        raise _qc.ArgumentTypeError(1, "a QcHookState holds a communicator and cannot be pickled or "
                                       "copied; checkpoint state.state_dict() instead")


def _read_state(state: Any) -> Dict[int, Tuple[Optional[bytes], Optional[_Layout]]]:
    """The pending slots of a state_dict() (or a plain {index: image}), checked."""
    if not isinstance(state, dict):
        raise _qc.ArgumentTypeError(1, f"load_state_dict: state must be a dict, not {type(state).__name__}")
    max_index = 2**63 - 1
    pending: Dict[int, Tuple[Optional[bytes], Optional[_Layout]]] = {}
    if "buckets" not in state:  # {index: ErrorBuffer image}
        for k, v in state.items():
            index = _qc._int_arg(k, f"load_state_dict: bucket index {k!r}", 0, max_index)
            pending[index] = (_qc._bytes_arg(v, f"load_state_dict: bucket {index}'s image"), None)
        return pending
    if state.get("format") != _STATE_FORMAT:
        raise _qc.InvalidArgumentError(1, f"load_state_dict: not a {_STATE_FORMAT} state: "
                                          f"{state.get('format')!r}")
    buckets = state["buckets"]
    if not isinstance(buckets, dict):
        raise _qc.ArgumentTypeError(1, f"load_state_dict: 'buckets' must be a dict, not {type(buckets).__name__}")
    for k, v in buckets.items():
        index = _qc._int_arg(k, f"load_state_dict: bucket index {k!r}", 0, max_index)
        what = f"load_state_dict: bucket {index}"
        if not isinstance(v, dict):
            raise _qc.ArgumentTypeError(1, f"{what} must be a dict, not {type(v).__name__}")
        layout = None
        if v.get("counts") is not None:
            counts = tuple(_qc._int_arg(c, f"{what}: counts[{i}]", 0, 2**64 - 1)
                           for i, c in enumerate(_qc._list_arg(v["counts"], f"{what}: counts")))
            layers = tuple(_qc._name_arg(n, f"{what}: layers[{i}]")
                           for i, n in enumerate(_qc._list_arg(v.get("layers"), f"{what}: layers")))
            if len(layers) != len(counts):
                raise _qc.InvalidArgumentError(1, f"{what}: {len(layers)} layers but {len(counts)} counts")
            layout = (counts, layers)
        image = v.get("image")
        pending[index] = (None if image is None else _qc._bytes_arg(image, f"{what}: image"), layout)
    return pending


# Real (not string) annotations: DDP's register_comm_hook compares them with
# dist.GradBucket and torch.futures.Future[torch.Tensor] and rejects anything else,
# so this module must not use `from __future__ import annotations`.
def allreduce_hook(state: QcHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: average `bucket` over the ranks with qc, in place.

    Register with ``ddp_model.register_comm_hook(state, qc.torch.allreduce_hook)``.
    Reduces ``bucket.buffer()`` with ``state.comm.allreduce_segments`` (one segment per
    parameter, named from the model so layer policies apply, the bucket's error buffer
    when its policies use error feedback) and returns a Future holding the buffer.

    With ``state.async_op`` (the default) the reduction is a non-blocking qc request
    (``iallreduce_segments``) and the Future is completed by the state's completer
    thread once the request has (with the request's qc.Error as its exception if it
    failed, which DDP raises from ``backward()``); DDP meanwhile computes the next
    buckets' gradients. Otherwise the reduction runs here and the Future is already
    completed. The bits are the same.
    """
    if state._closed:
        raise _qc.InvalidArgumentError(1, "qc.torch.allreduce_hook: the QcHookState is closed")
    state._check_ranks_once()
    fut: torch.futures.Future = torch.futures.Future()
    if state.async_op:
        request, finish = state._start(bucket)
        if state._completer is None:
            state._completer = _Completer()
        state._completer.put(request, fut, finish)
        # torch's Future.set_exception (1.13) stores the exception as the value, which
        # DDP's C++ side would take for the result ("Unable to cast ... to Tensor"); a
        # callback that raises it marks the returned future failed with qc's error.
        result = fut.then(_value_or_raise)
    else:
        fut.set_result(state._reduce(bucket))
        result = fut
    state.calls += 1
    if bucket.is_last():
        state.steps += 1
        if state.adapt_every and state.steps % state.adapt_every == 0:
            # after this step's last bucket on every rank (qc runs it after the
            # requests already started): collective, in the same place everywhere
            report = state.comm.adapt_policies(**state._adapt_args)
            state.adapt_reports.append(dict(report, step=state.steps, policies=state.layer_policies()))
    return result


def _value_or_raise(fut: torch.futures.Future) -> torch.Tensor:
    return fut.value()


# ---- a qc communicator over torch.distributed ---------------------------------

def _launched_by_mpi() -> bool:
    """Whether an MPI launcher started this process (its environment says so), without
    importing mpi4py: under torchrun that would start a singleton MPI for nothing."""
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                         "MPI_LOCALNRANKS"))


class _Transfer:
    """One isend/irecv: done once the observer thread's ``Work.wait()`` returned."""
    __slots__ = ("work", "done", "error")

    def __init__(self, work: Any):
        self.work = work
        self.done = threading.Event()
        self.error: Optional[BaseException] = None


class ProcessGroupTransport:
    """qc's messages over a torch.distributed process group (a qc.Comm.from_transport
    transport): each message an ``isend``/``irecv`` of a uint8 tensor that views qc's
    memory (no copy).

    gloo's send and receive Work objects report completion only through ``wait()``
    (``is_completed()`` stays False until then, and a ``wait(timeout)`` that expires
    breaks the whole gloo context), so one observer thread waits on the transfers in
    the order they were posted and marks each done; ``test`` reads the mark. Waiting in
    post order is only observation: gloo moves every transfer in its own threads.

    qc's traffic gets its own gloo group with the same ranks (``dist.new_group``, a
    collective call: every rank of `group` must make it, in the same order as its other
    new_group calls), so it never meets the program's own messages. Ranks are the
    group's (0..size-1), mapped to global ranks for torch. CPU memory only: qc stages
    what it sends, so this works whatever device the gradients are on.

    gloo cannot cancel a posted transfer, so this transport has no ``cancel``: after a
    failed call qc keeps the memory of its unfinished transfers until the communicator
    is closed, in case gloo still moves their bytes.
    """

    def __init__(self, group: Any = None):
        if not (dist.is_available() and dist.is_initialized()):
            raise _qc.InvalidArgumentError(1, "qc.torch.ProcessGroupTransport: torch.distributed is not "
                                              "initialized (dist.init_process_group first)")
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if group is None:
            ranks = list(range(self.size))
        else:
            ranks = [dist.distributed_c10d.get_global_rank(group, r) for r in range(self.size)]
        self._global = ranks
        self.group = dist.new_group(ranks=ranks, backend="gloo")
        self.aborted: Optional[str] = None
        self._posted: "queue.SimpleQueue[Optional[_Transfer]]" = queue.SimpleQueue()
        self._observer: Optional[threading.Thread] = None

    def _observe(self) -> None:
        while True:
            t = self._posted.get()
            if t is None:
                return
            try:
                t.work.wait()  # without the GIL: torch releases it
            except BaseException as e:  # noqa: BLE001 - handed to test()
                t.error = e
            t.done.set()

    def _post(self, work: Any) -> _Transfer:
        if self._observer is None:
            self._observer = threading.Thread(target=self._observe, name="qc-torch-transport",
                                              daemon=True)
            self._observer.start()
        t = _Transfer(work)
        self._posted.put(t)
        return t

    def _tensor(self, data: memoryview) -> torch.Tensor:
        if data.readonly:
            # torch has no read-only tensors: isend only reads this one
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return torch.frombuffer(data, dtype=torch.uint8)
        return torch.frombuffer(data, dtype=torch.uint8)

    def post_send(self, peer: int, data: memoryview) -> _Transfer:
        return self._post(dist.isend(self._tensor(data), dst=self._global[peer], group=self.group))

    def post_recv(self, peer: int, data: memoryview) -> _Transfer:
        return self._post(dist.irecv(self._tensor(data), src=self._global[peer], group=self.group))

    def test(self, t: _Transfer) -> bool:
        if not t.done.is_set():
            return False
        if t.error is not None:
            raise t.error  # what failed it (gloo reports a lost peer here)
        return True

    def wait(self, t: _Transfer, timeout: float) -> bool:
        return t.done.wait(timeout) and self.test(t)

    def abort(self, status: int, reason: str) -> None:
        # gloo has no way to wake the peers: they learn of it when their own
        # transfers fail or their timeout passes
        self.aborted = reason


def comm_from_process_group(group: Any = None, timeout: float = 300.0) -> "_qc.Comm":
    """A qc.Comm whose ranks are those of torch.distributed's `group` (None: the default
    group), carried over gloo by :class:`ProcessGroupTransport`: what qc needs under
    torchrun, without MPI. Collective over `group` (it makes a new gloo group)."""
    transport = ProcessGroupTransport(group)
    return _qc.Comm.from_transport(transport, any_thread=True, timeout=timeout)


# ---- process group from mpirun ------------------------------------------------

def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        return s.getsockname()[1]


def init_process_group_from_mpi(backend: str = "gloo", mpi_comm: Any = None,
                                rendezvous: str = "auto",
                                timeout: Optional[timedelta] = None) -> Tuple[int, int]:
    """Initialise torch.distributed's default group with the ranks of an MPI job.

    Under ``mpirun -np N /usr/bin/python3 train.py`` (OpenMPI), the rank and size come
    from ``OMPI_COMM_WORLD_RANK`` / ``OMPI_COMM_WORLD_SIZE`` (checked against mpi4py's
    ``COMM_WORLD``; another MPI or a singleton run uses mpi4py's numbers). The
    rendezvous is agreed over MPI, so no address or port has to be configured:

    - ``"file"``: rank 0 makes a fresh temporary directory and broadcasts the path;
      ``init_method="file://<dir>/store"``. Needs all ranks on one host (or a shared
      file system); the directory is removed when rank 0 exits. No port is involved.
    - ``"tcp"``: rank 0 picks a free port on its address (``MASTER_ADDR`` if set, else
      127.0.0.1 on a single host or its host name's address) and broadcasts it;
      ``init_method="tcp://addr:port"``.
    - ``"auto"`` (default): "file" when every rank runs on the same host, else "tcp".

    On a single host ``GLOO_SOCKET_IFNAME`` defaults to ``lo``. With `mpi_comm`
    (an mpi4py communicator, default ``MPI.COMM_WORLD``) the group spans that
    communicator's ranks. Returns (rank, world_size). Does nothing but return them
    when the default group already exists.
    """
    if rendezvous is None or not isinstance(rendezvous, str):
        raise _qc.ArgumentTypeError(1, f"argument 'rendezvous' must be a str, not {type(rendezvous).__name__}")
    if rendezvous not in ("auto", "file", "tcp"):
        raise _qc.InvalidArgumentError(1, f"argument 'rendezvous' is {rendezvous!r}; expected 'auto', 'file' "
                                          "or 'tcp'")
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
    rank, size = comm.Get_rank(), comm.Get_size()
    if comm == MPI.COMM_WORLD and "OMPI_COMM_WORLD_RANK" in os.environ:
        env_rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        env_size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", size))
        if (env_rank, env_size) != (rank, size):
            raise RuntimeError(f"OpenMPI environment says rank {env_rank} of {env_size}, "
                               f"mpi4py says {rank} of {size}")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()

    hosts = comm.allgather(MPI.Get_processor_name())
    one_host = len(set(hosts)) == 1
    if rendezvous == "auto":
        rendezvous = "file" if one_host else "tcp"
    if one_host:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

    init_method = None
    error = None
    if rank == 0:
        try:
            if rendezvous == "file":
                d = tempfile.mkdtemp(prefix="qc-torch-rdzv-")
                atexit.register(shutil.rmtree, d, True)
                init_method = "file://" + os.path.join(d, "store")
            else:
                addr = os.environ.get("MASTER_ADDR")
                if not addr:
                    addr = "127.0.0.1" if one_host else socket.gethostbyname(socket.gethostname())
                init_method = f"tcp://{addr}:{_free_port(addr)}"
        except Exception as e:  # tell the other ranks instead of leaving them waiting
            error = f"{type(e).__name__}: {e}"
    init_method, error = comm.bcast((init_method, error), root=0)
    if error is not None:
        raise RuntimeError(f"init_process_group_from_mpi: rank 0 failed: {error}")
    kwargs = {} if timeout is None else {"timeout": timeout}
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size, **kwargs)
    return rank, size


# ---- the torch.distributed backend "qc" (torch >= 2.0; qc/torch_backend.py) ----
# Registering is cheap (the C++ backend compiles at the first init_process_group("qc")).
from .torch_backend import (  # noqa: E402
    backend_policy,
    backend_state_dict,
    backend_stats,
    fallback_counts,
    load_backend_state_dict,
    register as register_backend,
    reset_call_sites,
    set_backend_policy,
)

__all__ += [
    "backend_policy",
    "backend_state_dict",
    "backend_stats",
    "fallback_counts",
    "load_backend_state_dict",
    "register_backend",
    "reset_call_sites",
    "set_backend_policy",
]

register_backend()
