// Entry points of the sparse allreduce and its result handles.
#include <cstring>
#include <memory>
#include <string>

#include "core/api_checks.h"
#include "core/api_guard.h"
#include "core/communicator.h"
#include "core/dtype.h"
#include "core/handle_table.h"
#include "core/sparse_rows.h"
#include "cpu/dtype_convert.h"

using namespace qc;

namespace qc {

// What a qc_sparse_result_t names.
struct SparseResult {
  SparseRows rows;  // float32 values
  size_t row_len = 0;
  qc_dtype_t dtype = QC_DTYPE_FLOAT32;
};

// Never destroyed: see handle_table.h.
HandleTable<SparseResult>& live_sparse_results() {
  static auto* table = new HandleTable<SparseResult>();
  return *table;
}

}  // namespace qc

namespace {

using ResultLease = HandleTable<SparseResult>::Lease;

Status lease_result(qc_sparse_result_t result, ResultLease* out) {
  QC_RETURN_IF_ERROR(require(result, "result"));
  *out = live_sparse_results().lease(handle_value(result), /*collective=*/false);
  if (*out) return Status::ok();
  return invalid_argument("argument 'result' is not a live sparse result (destroyed, or not "
                          "made by qc_sparse_allreduce)");
}

Status check_op(qc_reduce_op_t op) {
  if (op == QC_OP_SUM || op == QC_OP_AVG) return Status::ok();
  return invalid_argument("argument 'op' is " + std::to_string(static_cast<int>(op)) +
                          "; expected QC_OP_SUM or QC_OP_AVG");
}

// The rows' arguments, as both entry points take them.
Status validate_rows(const int64_t* indices, const void* values, size_t nnz, size_t row_len,
                     qc_dtype_t dtype, qc_reduce_op_t op) {
  QC_RETURN_IF_ERROR(check_dtype(dtype));
  QC_RETURN_IF_ERROR(check_op(op));
  if (row_len == 0) return invalid_argument("argument 'row_len' is 0; expected >= 1");
  size_t bytes = 0;
  QC_RETURN_IF_ERROR(check_byte_count(nnz, dtype_size(dtype), row_len, "nnz", &bytes));
  QC_RETURN_IF_ERROR(require_buffer(indices, nnz, "indices"));
  QC_RETURN_IF_ERROR(require_buffer(values, bytes, "values"));
  QC_RETURN_IF_ERROR(require_host_memory(indices, "indices"));
  return require_host_memory(values, "values");
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
    QC_RETURN_IF_ERROR(validate_rows(indices, values, nnz, row_len, dtype, op));
    auto object = std::make_unique<SparseResult>();
    object->row_len = row_len;
    object->dtype = dtype;
    QC_RETURN_IF_ERROR(comm_sparse_allreduce(c.get(), indices, values, nnz, row_len, 0, dtype,
                                             op, layer, &object->rows));
    *result = reinterpret_cast<qc_sparse_result_t>(live_sparse_results().add(std::move(object)));
    return Status::ok();
  });
}

QC_API qc_status_t qc_sparse_result_nnz(qc_sparse_result_t result, size_t* nnz) {
  return QC_API_CALL({
    ResultLease r;
    QC_RETURN_IF_ERROR(lease_result(result, &r));
    QC_RETURN_IF_ERROR(require(nnz, "nnz"));
    *nnz = r->rows.indices.size();
    return Status::ok();
  });
}

QC_API qc_status_t qc_sparse_result_copy(qc_sparse_result_t result, int64_t* indices,
                                         void* values, size_t capacity) {
  return QC_API_CALL({
    ResultLease r;
    QC_RETURN_IF_ERROR(lease_result(result, &r));
    const size_t rows = r->rows.indices.size();
    if (capacity < rows) {
      return invalid_argument("argument 'capacity' is " + std::to_string(capacity) +
                              " rows but the result has " + std::to_string(rows) +
                              " (qc_sparse_result_nnz)");
    }
    QC_RETURN_IF_ERROR(require_host_memory(indices, "indices"));
    QC_RETURN_IF_ERROR(require_host_memory(values, "values"));
    if (indices != nullptr && rows > 0) {
      std::memcpy(indices, r->rows.indices.data(), rows * sizeof(int64_t));
    }
    if (values != nullptr) {
      cpu::from_float32(r->rows.values.data(), r->dtype, values, rows * r->row_len);
    }
    return Status::ok();
  });
}

QC_API qc_status_t qc_sparse_result_destroy(qc_sparse_result_t result) {
  return QC_API_CALL({
    if (result == nullptr) return Status::ok();
    SparseResult* object = nullptr;
    if (live_sparse_results().close(handle_value(result), &object) ==
        HandleTable<SparseResult>::Use::kNotLive) {
      ResultLease none;
      return lease_result(result, &none);  // the "not live" message
    }
    live_sparse_results().take_when_unused(handle_value(result)).reset();
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
    QC_RETURN_IF_ERROR(validate_rows(indices, values, nnz, row_len, dtype, op));
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
    SparseRows rows;
    // nrows 0 (an empty table) still takes part: the others' calls need it.
    QC_RETURN_IF_ERROR(comm_sparse_allreduce(c.get(), indices, values, nnz, row_len,
                                             nrows == 0 ? -1 : static_cast<int64_t>(nrows),
                                             dtype, op, layer, &rows));
    // Straight into the caller's table: zero bits are +0 in every dtype,
    // and only the union's rows are converted.
    const size_t row_bytes = row_len * dtype_size(dtype);
    std::memset(dense, 0, nrows * row_bytes);
    for (size_t k = 0; k < rows.indices.size(); ++k) {
      cpu::from_float32(rows.values.data() + k * row_len, dtype,
                        static_cast<char*>(dense) + static_cast<size_t>(rows.indices[k]) * row_bytes,
                        row_len);
    }
    return Status::ok();
  });
}

}  // extern "C"
