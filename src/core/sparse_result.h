// What a qc_sparse_result_t names, and the argument checks the sparse
// allreduce's entry points (blocking, non-blocking, emulated) share.
#pragma once

#include <atomic>
#include <memory>

#include "core/handle_table.h"
#include "core/sparse_rows.h"
#include "core/status.h"
#include "qc.h"

namespace qc {

// The rows a call writes once, when it succeeds: a non-blocking call's
// task on the progress thread, while the handle may be read (refused
// until `ready`) or destroyed (the task keeps the fill alive).
struct SparseFill {
  SparseRows rows;  // float32 values
  std::atomic<bool> ready{false};
};

struct SparseResult {
  std::shared_ptr<SparseFill> fill;
  size_t row_len = 0;
  qc_dtype_t dtype = QC_DTYPE_FLOAT32;
};

// Never destroyed: see handle_table.h.
HandleTable<SparseResult>& live_sparse_results();

// A new, unfilled result handle in *result; *fill is what the call fills.
void make_sparse_result(size_t row_len, qc_dtype_t dtype, std::shared_ptr<SparseFill>* fill,
                        qc_sparse_result_t* result);
// Frees a handle made by make_sparse_result (on a failed start).
void drop_sparse_result(qc_sparse_result_t result);

// The rows' arguments, as every entry point takes them.
Status validate_sparse_rows(const int64_t* indices, const void* values, size_t nnz,
                            size_t row_len, qc_dtype_t dtype, qc_reduce_op_t op);
// The dense form's table and rows (after validate_sparse_rows).
Status validate_sparse_dense(size_t nnz, size_t row_len, size_t nrows, const void* dense,
                             qc_dtype_t dtype);

}  // namespace qc
