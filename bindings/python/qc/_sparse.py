"""Rows of a sparse allreduce (Comm.sparse_allreduce, isparse_allreduce,
qc.emulate_sparse_allreduce): one rank's rows given as a torch sparse COO
tensor or as (indices, values) arrays, checked before anything reaches C,
and the result given back in the same form.

Imported at the end of qc/__init__.py, whose array helpers it uses.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import numpy as np

from . import (
    UnsupportedError,
    _as_buffer,
    _bad_type,
    _bad_value,
    _Buffer,
    _dtype_name,
    _int_arg,
    _list_arg,
    _torch_module,
)

_INT64_MAX = 2**63 - 1


class Rows:
    """One rank's rows, checked: int64 indices (C-contiguous, host memory)
    and a values buffer of nnz x row_len elements; ``shape`` is a torch
    sparse input's size (the result is then a sparse tensor of it), None for
    (indices, values) input."""

    __slots__ = ("indices", "index_ptr", "values", "nnz", "row_len", "shape")

    def __init__(self, indices: Any, index_ptr: int, values: _Buffer, nnz: int, row_len: int,
                 shape: Optional[Tuple[int, ...]]) -> None:
        self.indices = indices
        self.index_ptr = index_ptr
        self.values = values
        self.nnz = nnz
        self.row_len = row_len
        self.shape = shape

    def keep(self) -> tuple:
        """What the rows' addresses belong to (held by a request)."""
        return (self.indices, self.values.obj)


def _is_sparse_tensor(x: Any) -> bool:
    torch = _torch_module()
    return torch is not None and isinstance(x, torch.Tensor) and x.layout == torch.sparse_coo


def _host_memory(device: str, what: str) -> None:
    if device != "cpu":
        raise UnsupportedError(3, f"{what} is on {device}; the sparse allreduce takes host memory: "
                                  "pass .cpu() of it")


def rows_arg(indices: Any, values: Any, where: str = "") -> Rows:
    """The rows of Comm.sparse_allreduce(indices, values): a torch sparse COO
    tensor (values None) or indices and values arrays. `where` prefixes the
    argument names in messages ("inputs[2]: ")."""
    if _is_sparse_tensor(indices):
        if values is not None:
            raise _bad_type(f"{where}values must be None when indices is a torch sparse tensor "
                            "(its values are the rows)")
        return _rows_of_sparse_tensor(indices, where)
    if values is None:
        raise _bad_type(f"{where}values is missing: pass a torch sparse COO tensor, or indices and values")
    return _rows_of_arrays(indices, values, where)


def _rows_of_sparse_tensor(x: Any, where: str) -> Rows:
    what = f"{where}indices (a sparse tensor)"
    _host_memory(x.device.type, what)
    if x.sparse_dim() != 1:
        raise _bad_value(
            f"{what} has sparse_dim {x.sparse_dim()}; the sparse allreduce takes row-sparse tensors "
            "(sparse_dim 1, as the gradient of nn.Embedding(sparse=True)): convert with "
            "x.to_dense().to_sparse(1)")
    x = x.detach()
    shape = tuple(int(n) for n in x.shape)
    row_len = math.prod(shape[1:])
    # Uncoalesced is fine: the library adds repeated indices. _indices() is
    # (1, nnz), so its row is contiguous.
    index = x._indices()[0].contiguous()
    nnz = int(index.shape[0])
    values = x._values().reshape(nnz, row_len).contiguous()
    return Rows(index, int(index.data_ptr()), _as_buffer(values, f"{where}values"), nnz, row_len, shape)


def _index_array(indices: Any, what: str) -> Tuple[Any, int]:
    """The int64, C-contiguous form of a 1-D integer array (a copy only when
    it is not that already) and its address."""
    if isinstance(indices, np.ndarray):
        if indices.dtype.kind not in "iu":
            raise _bad_type(f"{what}: dtype {indices.dtype}; expected an integer array (int64)")
        if indices.ndim != 1:
            raise _bad_value(f"{what}: shape {indices.shape}; expected a 1-D array of row indices")
        array = np.ascontiguousarray(indices, dtype=np.int64)
        return array, int(array.__array_interface__["data"][0])
    torch = _torch_module()
    if torch is not None and isinstance(indices, torch.Tensor):
        if indices.layout != torch.strided:
            raise _bad_value(f"{what}: the tensor has layout {indices.layout}; expected a dense 1-D tensor")
        if indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
            raise _bad_type(f"{what}: dtype {indices.dtype}; expected an integer tensor (torch.int64)")
        _host_memory(indices.device.type, what)
        if indices.dim() != 1:
            raise _bad_value(f"{what}: shape {tuple(indices.shape)}; expected a 1-D tensor of row indices")
        tensor = indices.to(torch.int64).contiguous()
        return tensor, int(tensor.data_ptr())
    raise _bad_type(f"{what}: expected a numpy array or a torch tensor of row indices, not {type(indices).__name__}")


def _rows_of_arrays(indices: Any, values: Any, where: str) -> Rows:
    index, index_ptr = _index_array(indices, f"{where}indices")
    buffer = _as_buffer(values, f"{where}values")
    if buffer.cuda_device is not None:
        _host_memory(f"cuda:{buffer.cuda_device}", f"{where}values")
    shape = tuple(int(n) for n in values.shape)
    if len(shape) != 2:
        raise _bad_value(f"{where}values: shape {shape}; expected 2-D (nnz, row_len): row k is the values "
                         "of indices[k]")
    if shape[0] != index.shape[0]:
        raise _bad_value(f"{where}values has {shape[0]} rows but indices {index.shape[0]} entries; "
                         "one row per index")
    return Rows(index, index_ptr, buffer, shape[0], shape[1], None)


def _new_array(like: _Buffer, shape: Tuple[int, ...], int64: bool = False) -> Any:
    """A new C-contiguous host array of `like`'s kind (numpy or torch), of
    its dtype or int64."""
    if like.is_torch:
        torch = _torch_module()
        return torch.empty(shape, dtype=torch.int64 if int64 else like.obj.dtype)
    return np.empty(shape, dtype=np.int64 if int64 else like.obj.dtype)


def _address(array: Any) -> int:
    if isinstance(array, np.ndarray):
        return int(array.__array_interface__["data"][0])
    return int(array.data_ptr())


def result(handle: Any, rows: Rows) -> Any:
    """A finished sparse allreduce's result (a qc._qc.SparseResult, closed
    here) in the form of `rows`' input: (indices, values) arrays of the
    values' kind, or a coalesced torch sparse tensor of the input's shape."""
    try:
        nnz = handle.nnz()
        index = _new_array(rows.values, (nnz,), int64=True)
        values = _new_array(rows.values, (nnz, rows.row_len))
        handle.copy(_address(index), _address(values), nnz)
    finally:
        handle.close()
    if rows.shape is None:
        return index, values
    if nnz and int(index[-1]) >= rows.shape[0]:
        raise _bad_value(f"the result has row {int(index[-1])} but the sparse tensor has {rows.shape[0]} rows: "
                         "the ranks' tensors differ in shape")
    torch = _torch_module()
    # Ascending and unique: coalesced by construction, so say so (no sort).
    return torch.sparse_coo_tensor(index.unsqueeze(0), values.reshape((nnz,) + rows.shape[1:]),
                                   rows.shape)._coalesced_(True)


def dense_arg(rows: Rows, nrows: Any, out: Any) -> Optional[Tuple[Any, _Buffer, int]]:
    """The dense table of the dense form: (out, its buffer, nrows), a new
    table when out is None and nrows is given; None for the sparse form."""
    if nrows is not None:
        nrows = _int_arg(nrows, "argument 'nrows'", 0, _INT64_MAX)
    if out is None:
        if nrows is None:
            return None
        if rows.shape is not None and nrows != rows.shape[0]:
            raise _bad_value(f"argument 'nrows' is {nrows} but the sparse tensor has {rows.shape[0]} rows")
        row_shape = rows.shape[1:] if rows.shape is not None else (rows.row_len,)
        out = _new_array(rows.values, (nrows,) + tuple(row_shape))
    table = _as_buffer(out, "out", writable=True)
    if table.cuda_device is not None:
        _host_memory(f"cuda:{table.cuda_device}", "out")
    if table.dtype != rows.values.dtype:
        raise _bad_type(f"out: dtype {_dtype_name(table.dtype)} differs from the values' "
                        f"{_dtype_name(rows.values.dtype)}")
    if len(out.shape) < 1:
        raise _bad_value("out: a 0-d array; expected a table of shape (nrows, row_len)")
    table_rows = int(out.shape[0])
    if nrows is not None and nrows != table_rows:
        raise _bad_value(f"argument 'nrows' is {nrows} but out has {table_rows} rows")
    if table.count != table_rows * rows.row_len:
        raise _bad_value(f"out: shape {tuple(out.shape)}, {table.count} elements; a table of {table_rows} rows "
                         f"of {rows.row_len} values needs {table_rows * rows.row_len}")
    return out, table, table_rows


def emulated_rows(inputs: Any) -> list:
    """Every virtual rank's rows for qc.emulate_sparse_allreduce: each entry
    a torch sparse tensor or an (indices, values) pair, all of one dtype and
    row length."""
    entries = _list_arg(inputs, "inputs")
    if not entries:
        raise _bad_value("inputs: expected a non-empty list, one entry per rank")
    rows = []
    for i, entry in enumerate(entries):
        where = f"inputs[{i}]: "
        if _is_sparse_tensor(entry):
            rows.append(rows_arg(entry, None, where))
            continue
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise _bad_type(f"inputs[{i}] must be a torch sparse tensor or an (indices, values) pair, "
                            f"not {type(entry).__name__}")
        rows.append(rows_arg(entry[0], entry[1], where))
    for i, r in enumerate(rows[1:], 1):
        if r.values.dtype != rows[0].values.dtype or r.row_len != rows[0].row_len:
            raise _bad_value(f"inputs[{i}]: every rank's rows must have the same dtype and row length "
                             f"({_dtype_name(rows[0].values.dtype)}, {rows[0].row_len})")
    return rows
