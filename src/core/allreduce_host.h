// The allreduce of host buffers (and of host copies of device buffers):
// what its driver shares with the fused call (segments.cpp) and the device
// driver (allreduce_device.cpp).
#pragma once

#include <cstddef>
#include <string>

#include "core/communicator.h"

namespace qc {

// AVG's one division, at the end, in float32 (residuals and partial sums
// stay in units of the sum), then the conversion to the caller's dtype.
void finish_allreduce(float* work, size_t count, qc_dtype_t dtype, qc_reduce_op_t op, int n,
                      void* recvbuf);

// comm_allreduce, told by `staged_why` (nullptr for host buffers) why the
// buffers it runs on are host copies of device buffers, for its debug line.
Status allreduce_on_host(Communicator* comm, const void* sendbuf, void* recvbuf, size_t count,
                         qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                         ErrorBuffer* error_buffer, const std::string* staged_why);

}  // namespace qc
