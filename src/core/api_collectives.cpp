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
Status check_emulation_aliasing(int nranks, const void* const* sendbufs, size_t send_bytes,
                                void* const* recvbufs, size_t recv_bytes) {
  const auto overlaps = [](const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
    if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
    const auto pa = reinterpret_cast<uintptr_t>(a);
    const auto pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + b_bytes && pb < pa + a_bytes;
  };
  for (int r = 0; r < nranks; ++r) {
    for (int s = 0; s < nranks; ++s) {
      if (s == r) continue;
      if (s < r && overlaps(recvbufs[r], recv_bytes, recvbufs[s], recv_bytes)) {
        return invalid_argument("argument 'recvbufs[" + std::to_string(r) +
                                "]' overlaps 'recvbufs[" + std::to_string(s) +
                                "]': each virtual rank needs its own output buffer");
      }
      if (overlaps(recvbufs[r], recv_bytes, sendbufs[s], send_bytes)) {
        return invalid_argument("argument 'recvbufs[" + std::to_string(r) +
                                "]' overlaps 'sendbufs[" + std::to_string(s) +
                                "]', which another virtual rank reads while rank " +
                                std::to_string(r) + " writes");
      }
    }
  }
  return Status::ok();
}

// The emulation's error buffers: one exclusive lease per rank's (an entry
// that repeats an earlier rank's is refused), each checked to hold
// `residuals` and to belong to its rank, before any rank starts.
struct EmulationErrorBuffers {
  std::vector<ErrorBufferLease> leases;
  std::vector<ErrorBuffer*> buffers;

  Status lease(int nranks, qc_error_buffer_t* handles, size_t residuals) {
    leases.resize(static_cast<size_t>(nranks));
    buffers.assign(static_cast<size_t>(nranks), nullptr);
    for (int r = 0; r < nranks; ++r) {
      qc_error_buffer_t handle = handles != nullptr ? handles[r] : nullptr;
      const std::string name = "error_buffers[" + std::to_string(r) + "]";
      if (handle != nullptr && std::find(handles, handles + r, handle) != handles + r) {
        return invalid_argument("argument 'error_buffers': entry " + std::to_string(r) +
                                " is also used by an earlier rank; each rank needs its own");
      }
      QC_RETURN_IF_ERROR(lease_optional_error_buffer(handle, name, &leases[r]));
      buffers[r] = leases[r].get();
      QC_RETURN_IF_ERROR(check_emulation_error_buffer(buffers[r], r, nranks, residuals, name));
    }
    return Status::ok();
  }
};

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

Status validate_reduce_scatter(int nranks, int rank, const void* sendbuf, void* recvbuf,
                               size_t recvcount, qc_dtype_t dtype, qc_reduce_op_t op) {
  QC_RETURN_IF_ERROR(check_dtype(dtype));
  QC_RETURN_IF_ERROR(check_op(op));
  size_t in_bytes = 0;
  QC_RETURN_IF_ERROR(check_byte_count(recvcount, dtype_size(dtype), static_cast<size_t>(nranks),
                                      "recvcount", &in_bytes));
  const size_t out_bytes = recvcount * dtype_size(dtype);
  QC_RETURN_IF_ERROR(require_buffer(sendbuf, in_bytes, "sendbuf"));
  QC_RETURN_IF_ERROR(require_buffer(recvbuf, out_bytes, "recvbuf"));
  const void* in_place =
      sendbuf != nullptr ? static_cast<const char*>(sendbuf) + static_cast<size_t>(rank) * out_bytes
                         : nullptr;
  return check_disjoint_or_in_place(sendbuf, in_bytes, recvbuf, out_bytes, in_place, "sendbuf",
                                    "recvbuf");
}

Status validate_allgather(int nranks, int rank, const void* sendbuf, void* recvbuf,
                          size_t sendcount, qc_dtype_t dtype) {
  QC_RETURN_IF_ERROR(check_dtype(dtype));
  size_t out_bytes = 0;
  QC_RETURN_IF_ERROR(check_byte_count(sendcount, dtype_size(dtype), static_cast<size_t>(nranks),
                                      "sendcount", &out_bytes));
  const size_t in_bytes = sendcount * dtype_size(dtype);
  QC_RETURN_IF_ERROR(require_buffer(sendbuf, in_bytes, "sendbuf"));
  QC_RETURN_IF_ERROR(require_buffer(recvbuf, out_bytes, "recvbuf"));
  const void* in_place =
      recvbuf != nullptr ? static_cast<const char*>(recvbuf) + static_cast<size_t>(rank) * in_bytes
                         : nullptr;
  return check_disjoint_or_in_place(recvbuf, out_bytes, sendbuf, in_bytes, in_place, "recvbuf",
                                    "sendbuf");
}

Status validate_broadcast(int nranks, int rank, const void* sendbuf, void* recvbuf, size_t count,
                          qc_dtype_t dtype, int root) {
  QC_RETURN_IF_ERROR(check_dtype(dtype));
  if (root < 0 || root >= nranks) {
    return invalid_argument("argument 'root' is " + std::to_string(root) + "; expected 0.." +
                            std::to_string(nranks - 1) + " (the communicator has " +
                            std::to_string(nranks) + " ranks)");
  }
  size_t bytes = 0;
  QC_RETURN_IF_ERROR(check_byte_count(count, dtype_size(dtype), 1, "count", &bytes));
  QC_RETURN_IF_ERROR(require_buffer(recvbuf, bytes, "recvbuf"));
  if (rank != root) return Status::ok();  // sendbuf is read on the root only
  QC_RETURN_IF_ERROR(require_buffer(sendbuf, bytes, "sendbuf"));
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

QC_API qc_status_t qc_reduce_scatter(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                     size_t recvcount, qc_dtype_t dtype, qc_reduce_op_t op,
                                     const char* layer, qc_error_buffer_t error_buffer,
                                     void* stream) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, /*collective=*/true, &c));
    c->requests.drain();  // after the requests started before it
    ErrorBufferLease eb;
    QC_RETURN_IF_ERROR(lease_optional_error_buffer(error_buffer, "error_buffer", &eb));
    QC_RETURN_IF_ERROR(validate_reduce_scatter(c->transport->size(), c->transport->rank(),
                                               sendbuf, recvbuf, recvcount, dtype, op));
    return comm_reduce_scatter(c.get(), cuda_device_memory(), stream, sendbuf, recvbuf,
                               recvcount, dtype, op, layer, eb.get());
  });
}

QC_API qc_status_t qc_allgather(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                size_t sendcount, qc_dtype_t dtype, const char* layer,
                                qc_error_buffer_t error_buffer, void* stream) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, /*collective=*/true, &c));
    c->requests.drain();  // after the requests started before it
    ErrorBufferLease eb;
    QC_RETURN_IF_ERROR(lease_optional_error_buffer(error_buffer, "error_buffer", &eb));
    QC_RETURN_IF_ERROR(validate_allgather(c->transport->size(), c->transport->rank(), sendbuf,
                                          recvbuf, sendcount, dtype));
    return comm_allgather(c.get(), cuda_device_memory(), stream, sendbuf, recvbuf, sendcount,
                          dtype, layer, eb.get());
  });
}

QC_API qc_status_t qc_broadcast(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                size_t count, qc_dtype_t dtype, int root, const char* layer,
                                void* stream) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, /*collective=*/true, &c));
    c->requests.drain();  // after the requests started before it
    const int rank = c->transport->rank();
    QC_RETURN_IF_ERROR(
        validate_broadcast(c->transport->size(), rank, sendbuf, recvbuf, count, dtype, root));
    return comm_broadcast(c.get(), cuda_device_memory(), stream, rank == root ? sendbuf : nullptr,
                          recvbuf, count, dtype, root, layer);
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
    EmulationErrorBuffers eb;
    QC_RETURN_IF_ERROR(eb.lease(nranks, error_buffers, count));
    for (int r = 0; r < nranks; ++r) {
      QC_RETURN_IF_ERROR(check_rank_buffers(sendbufs, recvbufs, r, count));
      QC_RETURN_IF_ERROR(for_rank(r, validate_allreduce(sendbufs[r], recvbufs[r], count, dtype, op)));
      QC_RETURN_IF_ERROR(check_emulation_host_buffers(sendbufs, recvbufs, r));
    }
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count, dtype_size(dtype), 1, "count", &bytes));
    QC_RETURN_IF_ERROR(check_emulation_aliasing(nranks, sendbufs, bytes, recvbufs, bytes));
    return emulate_allreduce(args, count, dtype, op, eb.buffers.data());
  });
}

QC_API qc_status_t qc_emulate_reduce_scatter(int nranks, const void* const* sendbufs,
                                             void* const* recvbufs, size_t recvcount,
                                             qc_dtype_t dtype, qc_reduce_op_t op,
                                             const char* layer, uint64_t call_index,
                                             const qc_policy_t* policy,
                                             qc_error_buffer_t* error_buffers) {
  return QC_API_CALL({
    EmulationArgs args;
    QC_RETURN_IF_ERROR(
        check_emulation_args(nranks, sendbufs, recvbufs, layer, call_index, policy, &args));
    size_t in_bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(recvcount, dtype_size(dtype),
                                        static_cast<size_t>(nranks), "recvcount", &in_bytes));
    EmulationErrorBuffers eb;
    QC_RETURN_IF_ERROR(eb.lease(nranks, error_buffers, recvcount * static_cast<size_t>(nranks)));
    for (int r = 0; r < nranks; ++r) {
      QC_RETURN_IF_ERROR(check_rank_buffers(sendbufs, recvbufs, r, recvcount));
      QC_RETURN_IF_ERROR(for_rank(r, validate_reduce_scatter(nranks, r, sendbufs[r], recvbufs[r],
                                                             recvcount, dtype, op)));
      QC_RETURN_IF_ERROR(check_emulation_host_buffers(sendbufs, recvbufs, r));
    }
    QC_RETURN_IF_ERROR(check_emulation_aliasing(nranks, sendbufs, in_bytes, recvbufs,
                                                recvcount * dtype_size(dtype)));
    return emulate_reduce_scatter(args, recvcount, dtype, op, eb.buffers.data());
  });
}

QC_API qc_status_t qc_emulate_allgather(int nranks, const void* const* sendbufs,
                                        void* const* recvbufs, size_t sendcount,
                                        qc_dtype_t dtype, const char* layer,
                                        uint64_t call_index, const qc_policy_t* policy,
                                        qc_error_buffer_t* error_buffers) {
  return QC_API_CALL({
    EmulationArgs args;
    QC_RETURN_IF_ERROR(
        check_emulation_args(nranks, sendbufs, recvbufs, layer, call_index, policy, &args));
    size_t out_bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(sendcount, dtype_size(dtype),
                                        static_cast<size_t>(nranks), "sendcount", &out_bytes));
    EmulationErrorBuffers eb;
    QC_RETURN_IF_ERROR(eb.lease(nranks, error_buffers, sendcount));
    for (int r = 0; r < nranks; ++r) {
      QC_RETURN_IF_ERROR(check_rank_buffers(sendbufs, recvbufs, r, sendcount));
      QC_RETURN_IF_ERROR(for_rank(
          r, validate_allgather(nranks, r, sendbufs[r], recvbufs[r], sendcount, dtype)));
      QC_RETURN_IF_ERROR(check_emulation_host_buffers(sendbufs, recvbufs, r));
    }
    QC_RETURN_IF_ERROR(check_emulation_aliasing(nranks, sendbufs, sendcount * dtype_size(dtype),
                                                recvbufs, out_bytes));
    return emulate_allgather(args, sendcount, dtype, eb.buffers.data());
  });
}

QC_API qc_status_t qc_emulate_broadcast(int nranks, const void* const* sendbufs,
                                        void* const* recvbufs, size_t count, qc_dtype_t dtype,
                                        int root, const char* layer, uint64_t call_index,
                                        const qc_policy_t* policy) {
  return QC_API_CALL({
    EmulationArgs args;
    QC_RETURN_IF_ERROR(
        check_emulation_args(nranks, sendbufs, recvbufs, layer, call_index, policy, &args));
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count, dtype_size(dtype), 1, "count", &bytes));
    // Only the root's sendbuf is read: the others are left out of the checks.
    std::vector<const void*> sends(static_cast<size_t>(nranks), nullptr);
    for (int r = 0; r < nranks; ++r) {
      QC_RETURN_IF_ERROR(for_rank(
          r, validate_broadcast(nranks, r, sendbufs[r], recvbufs[r], count, dtype, root)));
      if (r == root) sends[static_cast<size_t>(r)] = sendbufs[r];
      if (count > 0 && recvbufs[r] == nullptr) {
        return invalid_argument("argument 'recvbufs[" + std::to_string(r) + "]' is NULL");
      }
      QC_RETURN_IF_ERROR(check_emulation_host_buffers(sends.data(), recvbufs, r));
    }
    QC_RETURN_IF_ERROR(check_emulation_aliasing(nranks, sends.data(), bytes, recvbufs, bytes));
    return emulate_broadcast(args, count, dtype, root);
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
      QC_RETURN_IF_ERROR(for_rank(
          r, validate_alltoall(nranks, sendbufs[r], recvbufs[r], count_per_rank, dtype)));
      QC_RETURN_IF_ERROR(check_emulation_host_buffers(sendbufs, recvbufs, r));
    }
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count_per_rank, dtype_size(dtype),
                                        static_cast<size_t>(nranks), "count_per_rank", &bytes));
    QC_RETURN_IF_ERROR(check_emulation_aliasing(nranks, sendbufs, bytes, recvbufs, bytes));
    return emulate_alltoall(args, count_per_rank, dtype);
  });
}

}  // extern "C"
