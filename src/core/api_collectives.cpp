// Entry points of the collectives and the emulation.
#include <cstdint>
#include <algorithm>
#include <vector>
#include <string>

#include "core/api_checks.h"
#include "core/api_guard.h"
#include "core/communicator.h"
#include "core/device_memory.h"
#include "core/emulate.h"
#include "core/error_buffer.h"
#include "core/host_staging.h"
#include "core/policy.h"

using namespace qc;

namespace {

Status check_op(qc_reduce_op_t op) {
  if (op == QC_OP_SUM || op == QC_OP_AVG) return Status::ok();
  return invalid_argument("argument 'op' is " + std::to_string(static_cast<int>(op)) +
                          "; expected QC_OP_SUM or QC_OP_AVG");
}

// The emulation's rank buffers are read by CPU threads: host memory only.
Status check_emulation_host_buffers(const void* const* sendbufs, void* const* recvbufs, int r) {
  QC_RETURN_IF_ERROR(require_host_memory(sendbufs[r], "sendbufs[" + std::to_string(r) + "]"));
  return require_host_memory(recvbufs[r], "recvbufs[" + std::to_string(r) + "]");
}

// Emulation checks every rank's error buffer before any rank starts.
Status check_emulation_error_buffer(const ErrorBuffer* eb, int rank, int nranks,
                                    size_t count, const std::string& arg) {
  if (eb == nullptr) return Status::ok();
  if (eb->residual.size() != count) {
    return mismatch("argument '" + arg + "' holds " + std::to_string(eb->residual.size()) +
                    " residuals but 'count' is " + std::to_string(count));
  }
  if (eb->rank >= 0 && (eb->rank != rank || eb->size != nranks)) {
    return mismatch("argument '" + arg + "' belongs to rank " + std::to_string(eb->rank) +
                    " of a group of " + std::to_string(eb->size) + ", not rank " +
                    std::to_string(rank) + " of " + std::to_string(nranks));
  }
  return Status::ok();
}

// The emulation's per-rank buffers, named as the caller knows them.
Status check_rank_buffers(const void* const* sendbufs, void* const* recvbufs, int r, size_t count) {
  if (count == 0) return Status::ok();
  if (sendbufs[r] == nullptr)
    return invalid_argument("argument 'sendbufs[" + std::to_string(r) + "]' is NULL");
  if (recvbufs[r] == nullptr)
    return invalid_argument("argument 'recvbufs[" + std::to_string(r) + "]' is NULL");
  return Status::ok();
}

// The virtual ranks run at once, one thread each: a rank's output must not
// overlap another rank's output or input (its own input may be the same
// buffer: in place; inputs may be shared, they are only read). Unchecked,
// the threads would race on the memory and the result would depend on the
// schedule. Quadratic, which is nothing next to starting nranks threads.
Status check_emulation_aliasing(int nranks, const void* const* sendbufs, void* const* recvbufs,
                                size_t bytes) {
  if (bytes == 0) return Status::ok();
  const auto overlaps = [bytes](const void* a, const void* b) {
    const auto pa = reinterpret_cast<uintptr_t>(a);
    const auto pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + bytes && pb < pa + bytes;
  };
  for (int r = 0; r < nranks; ++r) {
    for (int s = 0; s < nranks; ++s) {
      if (s == r) continue;
      if (s < r && overlaps(recvbufs[r], recvbufs[s])) {
        return invalid_argument("argument 'recvbufs[" + std::to_string(r) +
                                "]' overlaps 'recvbufs[" + std::to_string(s) +
                                "]': each virtual rank needs its own output buffer");
      }
      if (overlaps(recvbufs[r], sendbufs[s])) {
        return invalid_argument("argument 'recvbufs[" + std::to_string(r) +
                                "]' overlaps 'sendbufs[" + std::to_string(s) +
                                "]', which another virtual rank reads while rank " +
                                std::to_string(r) + " writes");
      }
    }
  }
  return Status::ok();
}

}  // namespace

namespace qc {

Status validate_allreduce(const void* sendbuf, void* recvbuf, size_t count, qc_dtype_t dtype,
                          qc_reduce_op_t op) {
  QC_RETURN_IF_ERROR(check_dtype(dtype));
  QC_RETURN_IF_ERROR(check_op(op));
  size_t bytes = 0;
  QC_RETURN_IF_ERROR(check_byte_count(count, dtype_size(dtype), 1, "count", &bytes));
  QC_RETURN_IF_ERROR(require_buffer(sendbuf, bytes, "sendbuf"));
  QC_RETURN_IF_ERROR(require_buffer(recvbuf, bytes, "recvbuf"));
  // The error buffer's count, rank and size are checked by comm_allreduce,
  // which breaks the group on a mismatch so that no peer waits for this rank.
  return check_no_partial_overlap(sendbuf, recvbuf, bytes, "sendbuf", "recvbuf");
}

Status validate_alltoall(int nranks, const void* sendbuf, void* recvbuf, size_t count_per_rank,
                         qc_dtype_t dtype) {
  QC_RETURN_IF_ERROR(check_dtype(dtype));
  size_t bytes = 0;
  QC_RETURN_IF_ERROR(check_byte_count(count_per_rank, dtype_size(dtype),
                                      static_cast<size_t>(nranks), "count_per_rank", &bytes));
  QC_RETURN_IF_ERROR(require_buffer(sendbuf, bytes, "sendbuf"));
  QC_RETURN_IF_ERROR(require_buffer(recvbuf, bytes, "recvbuf"));
  return check_no_partial_overlap(sendbuf, recvbuf, bytes, "sendbuf", "recvbuf");
}

}  // namespace qc

extern "C" {

QC_API qc_status_t qc_allreduce(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                                qc_error_buffer_t error_buffer, void* stream) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, /*collective=*/true, &c));
    c->requests.drain();  // after the requests started before it
    ErrorBufferLease eb;
    QC_RETURN_IF_ERROR(lease_optional_error_buffer(error_buffer, "error_buffer", &eb));
    QC_RETURN_IF_ERROR(validate_allreduce(sendbuf, recvbuf, count, dtype, op));
    return allreduce_placed(c.get(), cuda_device_memory(), cuda_message_codec(), stream, sendbuf,
                            recvbuf, count, dtype, op, layer, eb.get());
  });
}

QC_API qc_status_t qc_allreduce_segments(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                         size_t nsegments, const size_t* counts,
                                         const char* const* layers, qc_dtype_t dtype,
                                         qc_reduce_op_t op, qc_error_buffer_t error_buffer,
                                         void* stream) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, /*collective=*/true, &c));
    c->requests.drain();  // after the requests started before it
    ErrorBufferLease eb;
    QC_RETURN_IF_ERROR(lease_optional_error_buffer(error_buffer, "error_buffer", &eb));
    size_t total = 0;
    QC_RETURN_IF_ERROR(check_segment_counts(nsegments, counts, &total));
    QC_RETURN_IF_ERROR(validate_allreduce(sendbuf, recvbuf, total, dtype, op));
    const size_t bytes = total * dtype_size(dtype);
    return run_on_placed_buffers(
        c.get(), cuda_device_memory(), stream, sendbuf, bytes, recvbuf, bytes,
        [&](const void* send, void* recv) {
          return comm_allreduce_segments(c.get(), send, recv, nsegments, counts, layers, dtype,
                                         op, eb.get());
        });
  });
}

QC_API qc_status_t qc_alltoall(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                               size_t count_per_rank, qc_dtype_t dtype, const char* layer,
                               void* stream) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, /*collective=*/true, &c));
    c->requests.drain();  // after the requests started before it
    const int n = c->transport->size();
    QC_RETURN_IF_ERROR(validate_alltoall(n, sendbuf, recvbuf, count_per_rank, dtype));
    return alltoall_placed(c.get(), cuda_device_memory(), cuda_message_codec(), stream, sendbuf,
                           recvbuf, count_per_rank, dtype, layer);
  });
}

QC_API qc_status_t qc_emulate_allreduce(int nranks, const void* const* sendbufs,
                                        void* const* recvbufs, size_t count, qc_dtype_t dtype,
                                        qc_reduce_op_t op, const char* layer,
                                        uint64_t call_index, const qc_policy_t* policy,
                                        qc_error_buffer_t* error_buffers) {
  return QC_API_CALL({
    EmulationArgs args;
    QC_RETURN_IF_ERROR(
        check_emulation_args(nranks, sendbufs, recvbufs, layer, call_index, policy, &args));
    // One exclusive lease per rank's error buffer: an entry that repeats an
    // earlier rank's is refused as busy, by the lease itself.
    std::vector<ErrorBufferLease> leases(static_cast<size_t>(nranks));
    std::vector<ErrorBuffer*> buffers(static_cast<size_t>(nranks), nullptr);
    for (int r = 0; r < nranks; ++r) {
      QC_RETURN_IF_ERROR(check_rank_buffers(sendbufs, recvbufs, r, count));
      qc_error_buffer_t handle = error_buffers != nullptr ? error_buffers[r] : nullptr;
      const std::string name = "error_buffers[" + std::to_string(r) + "]";
      if (handle != nullptr && std::find(error_buffers, error_buffers + r, handle) !=
                                   error_buffers + r) {
        return invalid_argument("argument 'error_buffers': entry " + std::to_string(r) +
                                " is also used by an earlier rank; each rank needs its own");
      }
      QC_RETURN_IF_ERROR(lease_optional_error_buffer(handle, name, &leases[r]));
      buffers[r] = leases[r].get();
      Status s = validate_allreduce(sendbufs[r], recvbufs[r], count, dtype, op);
      if (!s) return Status(s.code(), "rank " + std::to_string(r) + ": " + s.message());
      QC_RETURN_IF_ERROR(check_emulation_host_buffers(sendbufs, recvbufs, r));
      QC_RETURN_IF_ERROR(check_emulation_error_buffer(buffers[r], r, nranks, count, name));
    }
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count, dtype_size(dtype), 1, "count", &bytes));
    QC_RETURN_IF_ERROR(check_emulation_aliasing(nranks, sendbufs, recvbufs, bytes));
    return emulate_allreduce(args, count, dtype, op, buffers.data());
  });
}

QC_API qc_status_t qc_emulate_alltoall(int nranks, const void* const* sendbufs,
                                       void* const* recvbufs, size_t count_per_rank,
                                       qc_dtype_t dtype, const char* layer, uint64_t call_index,
                                       const qc_policy_t* policy) {
  return QC_API_CALL({
    EmulationArgs args;
    QC_RETURN_IF_ERROR(
        check_emulation_args(nranks, sendbufs, recvbufs, layer, call_index, policy, &args));
    for (int r = 0; r < nranks; ++r) {
      QC_RETURN_IF_ERROR(check_rank_buffers(sendbufs, recvbufs, r, count_per_rank));
      Status s = validate_alltoall(nranks, sendbufs[r], recvbufs[r], count_per_rank, dtype);
      if (!s) return Status(s.code(), "rank " + std::to_string(r) + ": " + s.message());
      QC_RETURN_IF_ERROR(check_emulation_host_buffers(sendbufs, recvbufs, r));
    }
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count_per_rank, dtype_size(dtype),
                                        static_cast<size_t>(nranks), "count_per_rank", &bytes));
    QC_RETURN_IF_ERROR(check_emulation_aliasing(nranks, sendbufs, recvbufs, bytes));
    return emulate_alltoall(args, count_per_rank, dtype);
  });
}

}  // extern "C"
