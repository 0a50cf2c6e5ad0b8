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
// The device side sits behind DeviceMemory so that the staging logic (which
// bytes go where, in place, failures that must break the group) is tested on
// machines without a GPU (tests/unit/test_host_staging.cpp, with a fake).
#pragma once

#include <cstddef>
#include <functional>

#include "core/status.h"

namespace qc {

struct Communicator;

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Memory a kernel reads in place (device or managed); false for host memory.
  virtual bool is_device(const void* p) const = 0;
  // Copies ordered after the work already on `stream`; `dst` holds the bytes
  // when they return.
  virtual Status to_host(void* dst, const void* src, size_t bytes, void* stream) const = 0;
  virtual Status to_device(void* dst, const void* src, size_t bytes, void* stream) const = 0;
  // Host memory that copies are fast from (page-locked), and its release.
  virtual Status alloc_host(size_t bytes, void** p) const = 0;
  virtual void free_host(void* p) const = 0;
  // Device memory (of the calling thread's current device), and its release.
  virtual Status alloc_device(size_t bytes, void** p) const = 0;
  virtual void free_device(void* p) const = 0;
  // Events: a point in a stream's work that other streams and the host wait
  // for (valid after the stream it was recorded on is destroyed).
  virtual Status create_event(void** event) const = 0;
  virtual void destroy_event(void* event) const = 0;
  virtual Status record_event(void* event, void* stream) const = 0;
  virtual Status stream_wait_event(void* stream, void* event) const = 0;
  // *done once the work before the event has run (an error it hit is the
  // status); never blocks.
  virtual Status query_event(void* event, bool* done) const = 0;
};

// Work that a stream-ordered call (one that returns before the GPU runs it:
// allreduce_enqueued), or a call that failed part way, left on the
// caller's stream and that still uses device memory qc keeps from call to
// call (a communicator's staging, an error buffer's residuals). Whoever uses
// that memory next orders itself after it: a later call waits for it on the
// device (on any stream: two streams may share a handle, as
// cudaStreamPerThread does), the host before it reads or frees the memory.
// The host waits at most the timeout given with the work: work that waits
// for a peer that failed before its part never finishes, and a destroy must
// not hang on it (the memory is then left allocated, never freed under
// running work). Not thread-safe: it belongs to one communicator or error
// buffer, which serve one thread at a time.
class PendingDeviceWork {
 public:
  PendingDeviceWork() = default;
  ~PendingDeviceWork();
  PendingDeviceWork(const PendingDeviceWork&) = delete;
  PendingDeviceWork& operator=(const PendingDeviceWork&) = delete;

  bool pending() const { return pending_; }
  // The call's work on `stream` (of `mem`) ends here; a host wait for it
  // gives up after `timeout_seconds`.
  Status enqueued(const DeviceMemory& mem, void* stream, double timeout_seconds);
  // Work enqueued on `stream` from now on runs after the pending work.
  Status order_before(void* stream);
  // The host waits for the pending work: QC_ERROR_TIMEOUT once the timeout
  // passed (and at once on every later wait: it is still pending).
  Status wait();

 private:
  const DeviceMemory* mem_ = nullptr;
  void* event_ = nullptr;
  double timeout_seconds_ = 0;
  bool pending_ = false;
  bool abandoned_ = false;  // a wait timed out: the work may never finish
  static Status abandoned_error();
};

// The CUDA runtime's DeviceMemory; nullptr in a build without CUDA.
const DeviceMemory* cuda_device_memory();

// One communicator's staging memory, kept from call to call (a communicator
// serves one thread at a time). Grows to the largest call; freed with the
// communicator. Page-locked host memory, and device memory for the
// compressed messages of device_staging.h.
class HostStaging {
 public:
  HostStaging() = default;
  ~HostStaging() { release(); }
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // At least `bytes` of host memory from `mem`, 64-byte aligned.
  Status reserve(const DeviceMemory& mem, size_t bytes, unsigned char** p) {
    return grow(mem, Kind::kHost, bytes, p);
  }
  // At least `bytes` of device memory from `mem` (256-byte aligned, as
  // cudaMalloc's).
  Status reserve_device(const DeviceMemory& mem, size_t bytes, unsigned char** p) {
    return grow(mem, Kind::kDevice, bytes, p);
  }
  // At least `count` float32 values of device memory apart from
  // reserve_device's: the float32 copy of a 16-bit call's data.
  Status reserve_device_floats(const DeviceMemory& mem, size_t count, float** p) {
    unsigned char* bytes = nullptr;
    QC_RETURN_IF_ERROR(grow(mem, Kind::kDeviceFloats, count * sizeof(float), &bytes));
    *p = reinterpret_cast<float*>(bytes);
    return Status::ok();
  }
  size_t capacity() const { return host_.size; }
  // Stream-ordered work on the device memory; growing or freeing that
  // memory waits for it.
  PendingDeviceWork& pending() { return pending_; }

 private:
  struct Block {
    void* data = nullptr;
    size_t size = 0;
  };
  enum class Kind { kHost, kDevice, kDeviceFloats };
  Status grow(const DeviceMemory& mem, Kind kind, size_t bytes, unsigned char** p);
  void release();

  const DeviceMemory* mem_ = nullptr;
  Block host_;
  Block device_;
  Block device_floats_;
  PendingDeviceWork pending_;
};

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
