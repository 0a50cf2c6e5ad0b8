// Collectives on CUDA device memory over the transports that move host bytes
// (local, MPI). The input is copied to page-locked host memory after the work
// already enqueued on the caller's stream, the host collective runs on that
// copy, and the result is copied back on the same stream; the call returns
// with the result in recvbuf, exactly as a call on host memory does. The
// values are those of the same call on host memory (and of the emulation),
// bit for bit, because the host collective is the one that computes them.
// This is how several processes that share one GPU run every algorithm: NCCL
// refuses two ranks on one device.
//
// The device side sits behind DeviceMemory (core/device_memory.h) so that the
// staging logic (which bytes go where, in place, failures that must break
// the group) is tested on machines without a GPU
// (tests/unit/test_host_staging.cpp, with a fake). The staging memory itself
// is core/staging_memory.h.
#pragma once

#include <cstddef>
#include <functional>

#include "core/device_memory.h"
#include "core/status.h"

namespace qc {

struct Communicator;

enum class BufferPlace { kHost, kDevice };

// Where a collective's buffers are: both host memory (then `stream` must be
// NULL) or both device memory. A NULL buffer (count 0) goes with the other
// one. `mem` is nullptr in a build without CUDA.
Status place_collective_buffers(const DeviceMemory* mem, const void* stream, const void* sendbuf,
                                const void* recvbuf, BufferPlace* place);

// A collective on host memory (comm_allreduce, comm_alltoall, ...).
using HostCollective = std::function<Status(const void* sendbuf, void* recvbuf)>;

// Runs `collective` on host copies of the device buffers `sendbuf`
// (send_bytes read) and `recvbuf` (recv_bytes written); the same pointer for
// both is in place. Failing to copy the input breaks the group before this
// rank sends a byte, so its peers fail at once rather than wait for it until
// the timeout; failing to copy the result back breaks it too, so that peers
// whose calls succeeded learn of it (qc_comm_get_async_error).
Status run_staged(Communicator* comm, const DeviceMemory& mem, void* stream, const void* sendbuf,
                  size_t send_bytes, void* recvbuf, size_t recv_bytes,
                  const HostCollective& collective);

// A collective that runs on the device buffers themselves, on `stream`
// (comm_allreduce_on_device); *ran false when it does not take this call.
using DeviceCollective =
    std::function<Status(const void* sendbuf, void* recvbuf, void* stream, bool* ran)>;

// The entry points' dispatch: host buffers run `collective` directly; device
// buffers run `on_device` when it is given and takes the call, else
// `collective` through run_staged.
Status run_on_placed_buffers(Communicator* comm, const DeviceMemory* mem, void* stream,
                             const void* sendbuf, size_t send_bytes, void* recvbuf,
                             size_t recv_bytes, const HostCollective& collective,
                             const DeviceCollective& on_device = nullptr);

}  // namespace qc
