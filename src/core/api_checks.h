// Argument checks shared by the entry points. Each returns a Status whose
// message names the argument, as qc_last_error() promises.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/handle_table.h"
#include "core/status.h"
#if defined(QC_HAVE_CUDA)
#include "cuda/device_runtime.h"
#endif

namespace qc {

constexpr int kMaxLocalRanks = 4096;

inline Status require(const void* pointer, const char* arg) {
  if (pointer != nullptr) return Status::ok();
  return invalid_argument(std::string("argument '") + arg + "' is NULL");
}

// Memory the CPU will read or write. In a CUDA build a device pointer here
// would crash the process, so it is refused, naming the argument. (qc_codec_encode,
// qc_codec_decode and the collectives are the entry points that take device memory.)
inline Status require_host_memory(const void* pointer, const std::string& arg) {
#if defined(QC_HAVE_CUDA)
  if (cuda::is_device_memory(pointer)) {
    return unsupported("argument '" + arg +
                       "' is CUDA device memory, but this entry point takes host memory "
                       "(qc_codec_encode, qc_codec_decode and the collectives take device memory); copy "
                       "it to host memory first");
  }
#else
  (void)pointer;
  (void)arg;
#endif
  return Status::ok();
}

// Handles as the entry points see them: a qc_comm_t or qc_error_buffer_t
// is a number naming an entry of a handle table (core/handle_table.h).
using CommLease = HandleTable<Communicator>::Lease;
using ErrorBufferLease = HandleTable<ErrorBuffer>::Lease;

inline uintptr_t handle_value(const void* handle) { return reinterpret_cast<uintptr_t>(handle); }

// A communicator argument: not NULL, and live (created by qc_comm_create*
// and not yet destroyed). *out holds it for the rest of the call, so a
// destroy on another thread waits for the call instead of freeing it under
// it. `collective`: the call may wait for peers (qc_comm_destroy aborts
// those).
Status lease_comm(qc_comm_t comm, bool collective, CommLease* out, const char* arg = "comm");

// An error buffer argument that may be NULL (*out stays empty then); if not
// NULL it must be live (created by qc_error_buffer_create and not yet
// destroyed).
Status lease_optional_error_buffer(qc_error_buffer_t error_buffer, const std::string& arg,
                                   ErrorBufferLease* out);

// An error buffer argument that must not be NULL.
Status lease_error_buffer(qc_error_buffer_t error_buffer, ErrorBufferLease* out,
                          const char* arg = "error_buffer");

inline Status check_dtype(qc_dtype_t dtype) {
  if (dtype_is_valid(static_cast<int>(dtype))) return Status::ok();
  return invalid_argument("argument 'dtype' is " + std::to_string(static_cast<int>(dtype)) +
                          "; expected QC_DTYPE_FLOAT32, QC_DTYPE_FLOAT16 or QC_DTYPE_BFLOAT16");
}

// count * element_size (times `copies`) must fit in size_t; *bytes gets it.
inline Status check_byte_count(size_t count, size_t element_size, size_t copies, const char* arg,
                               size_t* bytes) {
  const size_t limit = SIZE_MAX / 2;  // leave room for headers and float32 work buffers
  if (count != 0 && (element_size * copies > limit / count || count * 4 * copies > limit)) {
    return invalid_argument(std::string("argument '") + arg + "' (" + std::to_string(count) +
                            ") times the element size overflows the address space");
  }
  *bytes = count * element_size * copies;
  return Status::ok();
}

// A buffer of `bytes` that may be NULL only when it is empty.
inline Status require_buffer(const void* buffer, size_t bytes, const char* arg) {
  if (buffer != nullptr || bytes == 0) return Status::ok();
  return invalid_argument(std::string("argument '") + arg + "' is NULL but the count is not 0");
}

// A fused call's segment counts: not NULL when nsegments > 0, and a sum
// that fits in size_t, which *total gets.
inline Status check_segment_counts(size_t nsegments, const size_t* counts, size_t* total) {
  if (nsegments > 0) QC_RETURN_IF_ERROR(require(counts, "counts"));
  *total = 0;
  for (size_t i = 0; i < nsegments; ++i) {
    if (counts[i] > SIZE_MAX - *total) {
      return invalid_argument("argument 'counts': the segments add up to more than SIZE_MAX "
                              "elements (at segment " + std::to_string(i) + ")");
    }
    *total += counts[i];
  }
  return Status::ok();
}

// In place (a == b) is allowed; any other overlap is not.
inline Status check_no_partial_overlap(const void* a, const void* b, size_t bytes, const char* arg_a,
                                       const char* arg_b) {
  if (a == nullptr || b == nullptr || a == b || bytes == 0) return Status::ok();
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  if (pa < pb + bytes && pb < pa + bytes) {
    return invalid_argument(std::string("arguments '") + arg_a + "' and '" + arg_b +
                            "' overlap without being the same buffer");
  }
  return Status::ok();
}

// Buffers of different sizes (a reduce-scatter's input and output): they
// must not overlap, except that `b` may start at `in_place` (the position
// in `a` that NCCL's in-place forms use; nullptr: none).
inline Status check_disjoint_or_in_place(const void* a, size_t a_bytes, const void* b,
                                         size_t b_bytes, const void* in_place, const char* arg_a,
                                         const char* arg_b) {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return Status::ok();
  if (in_place != nullptr && b == in_place) return Status::ok();
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  if (pa < pb + b_bytes && pb < pa + a_bytes) {
    return invalid_argument(std::string("arguments '") + arg_a + "' and '" + arg_b +
                            "' overlap" +
                            (in_place != nullptr ? " other than in place (see qc.h)" : ""));
  }
  return Status::ok();
}

}  // namespace qc
