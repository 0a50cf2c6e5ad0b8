// Entry points of the sparse allreduce and its result handles (the
// non-blocking forms are in api_requests.cpp).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/api_checks.h"
#include "core/api_guard.h"
#include "core/communicator.h"
#include "core/dtype.h"
#include "core/emulate.h"
#include "core/sparse_result.h"
#include "cpu/dtype_convert.h"

using namespace qc;

namespace qc {

HandleTable<SparseResult>& live_sparse_results() {
  static auto* table = new HandleTable<SparseResult>();
  return *table;
}

void make_sparse_result(size_t row_len, qc_dtype_t dtype, std::shared_ptr<SparseFill>* fill,
                        qc_sparse_result_t* result) {
  auto object = std::make_unique<SparseResult>();
  object->fill = std::make_shared<SparseFill>();
  object->row_len = row_len;
  object->dtype = dtype;
  *fill = object->fill;
  *result = reinterpret_cast<qc_sparse_result_t>(live_sparse_results().add(std::move(object)));
}

void drop_sparse_result(qc_sparse_result_t result) {
  SparseResult* object = nullptr;
  if (live_sparse_results().close(handle_value(result), &object) ==
      HandleTable<SparseResult>::Use::kNotLive) {
    return;
  }
  live_sparse_results().take_when_unused(handle_value(result)).reset();
}

Status validate_sparse_rows(const int64_t* indices, const void* values, size_t nnz,
                            size_t row_len, qc_dtype_t dtype, qc_reduce_op_t op) {
  QC_RETURN_IF_ERROR(check_dtype(dtype));
  if (op != QC_OP_SUM && op != QC_OP_AVG) {
    return invalid_argument("argument 'op' is " + std::to_string(static_cast<int>(op)) +
                            "; expected QC_OP_SUM or QC_OP_AVG");
  }
  if (row_len == 0) return invalid_argument("argument 'row_len' is 0; expected >= 1");
  size_t bytes = 0;
  QC_RETURN_IF_ERROR(check_byte_count(nnz, dtype_size(dtype), row_len, "nnz", &bytes));
  QC_RETURN_IF_ERROR(require_buffer(indices, nnz, "indices"));
  QC_RETURN_IF_ERROR(require_buffer(values, bytes, "values"));
  QC_RETURN_IF_ERROR(require_host_memory(indices, "indices"));
  return require_host_memory(values, "values");
}

Status validate_sparse_dense(size_t nnz, size_t row_len, size_t nrows, const void* dense,
                             qc_dtype_t dtype) {
  if (nrows > static_cast<size_t>(INT64_MAX)) {
    return invalid_argument("argument 'nrows' is " + std::to_string(nrows) +
                            "; expected at most INT64_MAX");
  }
  size_t bytes = 0;
  QC_RETURN_IF_ERROR(check_byte_count(nrows, dtype_size(dtype), row_len, "nrows", &bytes));
  QC_RETURN_IF_ERROR(require_buffer(dense, bytes, "dense"));
  QC_RETURN_IF_ERROR(require_host_memory(dense, "dense"));
  if (nrows == 0 && nnz > 0) {
    return invalid_argument("argument 'nrows' is 0 but 'nnz' is " + std::to_string(nnz) +
                            ": every index must be < nrows");
  }
  return Status::ok();
}

}  // namespace qc

namespace {

using ResultLease = HandleTable<SparseResult>::Lease;

// A lease on a filled result: an unfilled one (its request still running,
// or failed) is refused.
Status lease_result(qc_sparse_result_t result, bool filled, ResultLease* out) {
  QC_RETURN_IF_ERROR(require(result, "result"));
  *out = live_sparse_results().lease(handle_value(result), /*collective=*/false);
  if (!*out) {
    return invalid_argument("argument 'result' is not a live sparse result (destroyed, or not "
                            "made by qc_sparse_allreduce)");
  }
  if (filled && !(*out)->fill->ready.load(std::memory_order_acquire)) {
    return invalid_argument("argument 'result' has no rows yet: the qc_isparse_allreduce that "
                            "fills it has not completed, or failed (see qc_request_wait)");
  }
  return Status::ok();
}

// The per-rank argument arrays of the emulated forms.
Status check_emulated_rows(int nranks, const int64_t* const* indices, const void* const* values,
                           const size_t* nnz, size_t row_len, qc_dtype_t dtype,
                           qc_reduce_op_t op) {
  QC_RETURN_IF_ERROR(require(indices, "indices"));
  QC_RETURN_IF_ERROR(require(values, "values"));
  QC_RETURN_IF_ERROR(require(nnz, "nnz"));
  for (int r = 0; r < nranks; ++r) {
    QC_RETURN_IF_ERROR(for_rank(r, validate_sparse_rows(indices[r], values[r], nnz[r], row_len,
                                                        dtype, op)));
  }
  return Status::ok();
}

// The virtual ranks run at once: a rank's table must not overlap another
// rank's table or rows (it may overlap its own rows: they are read first).
Status check_tables_apart(int nranks, const int64_t* const* indices, const void* const* values,
                          const size_t* nnz, size_t row_len, size_t nrows, void* const* dense,
                          qc_dtype_t dtype) {
  const auto overlaps = [](const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
    if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
    const auto pa = reinterpret_cast<uintptr_t>(a);
    const auto pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + b_bytes && pb < pa + a_bytes;
  };
  const size_t table = nrows * row_len * dtype_size(dtype);
  for (int r = 0; r < nranks; ++r) {
    for (int s = 0; s < nranks; ++s) {
      if (s == r) continue;
      const size_t rows = nnz[s] * row_len * dtype_size(dtype);
      if (overlaps(dense[r], table, dense[s], table) ||
          overlaps(dense[r], table, values[s], rows) ||
          overlaps(dense[r], table, indices[s], nnz[s] * sizeof(int64_t))) {
        return invalid_argument("argument 'dense[" + std::to_string(r) +
                                "]' overlaps rank " + std::to_string(s) +
                                "'s table or rows: each virtual rank needs its own table");
      }
    }
  }
  return Status::ok();
}

}  // namespace

extern "C" {

QC_API qc_status_t qc_sparse_allreduce(qc_comm_t comm, const int64_t* indices,
                                       const void* values, size_t nnz, size_t row_len,
                                       qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                                       qc_sparse_result_t* result) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require(result, "result"));
    *result = nullptr;
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, /*collective=*/true, &c));
    c->requests.drain();  // after the requests started before it
    QC_RETURN_IF_ERROR(validate_sparse_rows(indices, values, nnz, row_len, dtype, op));
    SparseRows rows;
    QC_RETURN_IF_ERROR(
        comm_sparse_allreduce(c.get(), indices, values, nnz, row_len, dtype, op, layer, &rows));
    std::shared_ptr<SparseFill> fill;
    make_sparse_result(row_len, dtype, &fill, result);
    fill->rows = std::move(rows);
    fill->ready.store(true, std::memory_order_release);
    return Status::ok();
  });
}

QC_API qc_status_t qc_sparse_result_nnz(qc_sparse_result_t result, size_t* nnz) {
  return QC_API_CALL({
    ResultLease r;
    QC_RETURN_IF_ERROR(lease_result(result, /*filled=*/true, &r));
    QC_RETURN_IF_ERROR(require(nnz, "nnz"));
    *nnz = r->fill->rows.indices.size();
    return Status::ok();
  });
}

QC_API qc_status_t qc_sparse_result_copy(qc_sparse_result_t result, int64_t* indices,
                                         void* values, size_t capacity) {
  return QC_API_CALL({
    ResultLease r;
    QC_RETURN_IF_ERROR(lease_result(result, /*filled=*/true, &r));
    const SparseRows& rows = r->fill->rows;
    const size_t count = rows.indices.size();
    if (capacity < count) {
      return invalid_argument("argument 'capacity' is " + std::to_string(capacity) +
                              " rows but the result has " + std::to_string(count) +
                              " (qc_sparse_result_nnz)");
    }
    QC_RETURN_IF_ERROR(require_host_memory(indices, "indices"));
    QC_RETURN_IF_ERROR(require_host_memory(values, "values"));
    if (indices != nullptr && count > 0) {
      std::memcpy(indices, rows.indices.data(), count * sizeof(int64_t));
    }
    if (values != nullptr) {
      cpu::from_float32(rows.values.data(), r->dtype, values, count * r->row_len);
    }
    return Status::ok();
  });
}

QC_API qc_status_t qc_sparse_result_destroy(qc_sparse_result_t result) {
  return QC_API_CALL({
    if (result == nullptr) return Status::ok();
    ResultLease none;
    QC_RETURN_IF_ERROR(lease_result(result, /*filled=*/false, &none));  // "not live"
    none = ResultLease();
    drop_sparse_result(result);
    return Status::ok();
  });
}

QC_API qc_status_t qc_sparse_allreduce_dense(qc_comm_t comm, const int64_t* indices,
                                             const void* values, size_t nnz, size_t row_len,
                                             size_t nrows, void* dense, qc_dtype_t dtype,
                                             qc_reduce_op_t op, const char* layer) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, /*collective=*/true, &c));
    c->requests.drain();  // after the requests started before it
    QC_RETURN_IF_ERROR(validate_sparse_rows(indices, values, nnz, row_len, dtype, op));
    QC_RETURN_IF_ERROR(validate_sparse_dense(nnz, row_len, nrows, dense, dtype));
    // nrows 0 (an empty table) still takes part: the others' calls need it.
    return comm_sparse_allreduce_dense(c.get(), indices, values, nnz, row_len, nrows, dense,
                                       dtype, op, layer);
  });
}

QC_API qc_status_t qc_emulate_sparse_allreduce(int nranks, const int64_t* const* indices,
                                               const void* const* values, const size_t* nnz,
                                               size_t row_len, qc_dtype_t dtype,
                                               qc_reduce_op_t op, const char* layer,
                                               uint64_t call_index, const qc_policy_t* policy,
                                               qc_sparse_result_t* result) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require(result, "result"));
    *result = nullptr;
    EmulationArgs args;
    QC_RETURN_IF_ERROR(check_emulation_group(nranks, layer, call_index, policy, &args));
    QC_RETURN_IF_ERROR(check_emulated_rows(nranks, indices, values, nnz, row_len, dtype, op));
    std::vector<SparseRows> rows(static_cast<size_t>(nranks));
    QC_RETURN_IF_ERROR(emulate_ranks(args, [&](int r, Communicator* comm) {
      return comm_sparse_allreduce(comm, indices[r], values[r], nnz[r], row_len, dtype, op,
                                   args.layer, &rows[static_cast<size_t>(r)]);
    }));
    for (int r = 1; r < nranks; ++r) {
      if (rows[static_cast<size_t>(r)].indices != rows[0].indices ||
          std::memcmp(rows[static_cast<size_t>(r)].values.data(), rows[0].values.data(),
                      rows[0].values.size() * sizeof(float)) != 0) {
        return internal_error("emulated ranks 0 and " + std::to_string(r) +
                              " got different sparse results");
      }
    }
    std::shared_ptr<SparseFill> fill;
    make_sparse_result(row_len, dtype, &fill, result);
    fill->rows = std::move(rows[0]);
    fill->ready.store(true, std::memory_order_release);
    return Status::ok();
  });
}

QC_API qc_status_t qc_emulate_sparse_allreduce_dense(int nranks, const int64_t* const* indices,
                                                     const void* const* values,
                                                     const size_t* nnz, size_t row_len,
                                                     size_t nrows, void* const* dense,
                                                     qc_dtype_t dtype, qc_reduce_op_t op,
                                                     const char* layer, uint64_t call_index,
                                                     const qc_policy_t* policy) {
  return QC_API_CALL({
    EmulationArgs args;
    QC_RETURN_IF_ERROR(check_emulation_group(nranks, layer, call_index, policy, &args));
    QC_RETURN_IF_ERROR(require(dense, "dense"));
    QC_RETURN_IF_ERROR(check_emulated_rows(nranks, indices, values, nnz, row_len, dtype, op));
    for (int r = 0; r < nranks; ++r) {
      QC_RETURN_IF_ERROR(for_rank(r, validate_sparse_dense(nnz[r], row_len, nrows, dense[r],
                                                           dtype)));
    }
    QC_RETURN_IF_ERROR(check_tables_apart(nranks, indices, values, nnz, row_len, nrows, dense,
                                          dtype));
    return emulate_ranks(args, [&](int r, Communicator* comm) {
      return comm_sparse_allreduce_dense(comm, indices[r], values[r], nnz[r], row_len, nrows,
                                         dense[r], dtype, op, args.layer);
    });
  });
}

}  // extern "C"
