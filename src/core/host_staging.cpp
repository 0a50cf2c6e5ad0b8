#include "core/host_staging.h"

#include <string>

#include "core/communicator.h"
#include "core/transports/backoff.h"
#if defined(QC_HAVE_CUDA)
#include "cuda/device_runtime.h"
#endif

namespace qc {
namespace {

constexpr size_t kAlign = 64;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

#if defined(QC_HAVE_CUDA)
class CudaDeviceMemory final : public DeviceMemory {
 public:
  bool is_device(const void* p) const override { return cuda::is_device_memory(p); }
  Status to_host(void* dst, const void* src, size_t bytes, void* stream) const override {
    return cuda::copy_to_host_after(dst, src, bytes, stream);
  }
  Status to_device(void* dst, const void* src, size_t bytes, void* stream) const override {
    return cuda::copy_to_device_after(dst, src, bytes, stream);
  }
  Status alloc_host(size_t bytes, void** p) const override { return cuda::alloc_pinned(bytes, p); }
  void free_host(void* p) const override { cuda::free_pinned(p); }
  Status alloc_device(size_t bytes, void** p) const override {
    return cuda::alloc_device(bytes, p);
  }
  void free_device(void* p) const override { cuda::free_device(p); }
  Status create_event(void** event) const override { return cuda::create_event(event); }
  void destroy_event(void* event) const override { cuda::destroy_event(event); }
  Status record_event(void* event, void* stream) const override {
    return cuda::record_event(event, stream);
  }
  Status stream_wait_event(void* stream, void* event) const override {
    return cuda::stream_wait_event(stream, event);
  }
  Status query_event(void* event, bool* done) const override {
    return cuda::query_event(event, done);
  }
};
#endif

// The rank's own failure, told to its peers in words they can act on.
Status staging_failure(const Communicator* comm, const char* step, const Status& cause) {
  return Status(cause.code(), "rank " + std::to_string(comm->transport->rank()) + " could not " +
                                  step + ": " + cause.message());
}

}  // namespace

const DeviceMemory* cuda_device_memory() {
#if defined(QC_HAVE_CUDA)
  // Stateless, so one instance serves every thread. Never destroyed: a
  // communicator released during exit (after static destructors ran) still
  // frees its staging memory through it.
  static const CudaDeviceMemory* const memory = new CudaDeviceMemory();
  return memory;
#else
  return nullptr;
#endif
}

Status PendingDeviceWork::abandoned_error() {
  return timeout_error("earlier device work of this memory never finished");
}

PendingDeviceWork::~PendingDeviceWork() {
  // An event may be destroyed while work before it runs; an abandoned one
  // is left alone all the same, with the memory it guards.
  if (event_ != nullptr && !abandoned_) mem_->destroy_event(event_);
}

Status PendingDeviceWork::enqueued(const DeviceMemory& mem, void* stream,
                                   double timeout_seconds) {
  if (abandoned_) return abandoned_error();
  if (mem_ != &mem) {
    QC_RETURN_IF_ERROR(wait());
    if (event_ != nullptr) mem_->destroy_event(event_);
    event_ = nullptr;
    mem_ = &mem;
  }
  if (event_ == nullptr) QC_RETURN_IF_ERROR(mem.create_event(&event_));
  QC_RETURN_IF_ERROR(mem.record_event(event_, stream));
  timeout_seconds_ = timeout_seconds;
  pending_ = true;
  return Status::ok();
}

Status PendingDeviceWork::order_before(void* stream) {
  if (abandoned_) return abandoned_error();
  if (!pending_) return Status::ok();
  return mem_->stream_wait_event(stream, event_);
}

Status PendingDeviceWork::wait() {
  if (abandoned_) return abandoned_error();
  if (!pending_) return Status::ok();
  const Deadline give_up = deadline_after(timeout_seconds_);
  Backoff backoff;
  for (;;) {
    bool done = false;
    Status s = mem_->query_event(event_, &done);
    if (!s || done) {
      // Finished, or failed: either way nothing more will run.
      pending_ = false;
      return s;
    }
    if (Clock::now() >= give_up) {
      abandoned_ = true;
      return timeout_error("enqueued device work did not finish within " +
                     std::to_string(timeout_seconds_) +
                     " s (a peer may have failed before its part); its memory stays allocated");
    }
    backoff.pause();
  }
}

void HostStaging::release() {
  // The device memory goes back only once no enqueued work can touch it;
  // after a wait that timed out it is left allocated (a leak, not a write
  // into freed memory).
  const bool idle = pending_.wait().is_ok();
  if (host_.data != nullptr) mem_->free_host(host_.data);
  if (idle && device_.data != nullptr) mem_->free_device(device_.data);
  if (idle && device_floats_.data != nullptr) mem_->free_device(device_floats_.data);
  host_ = Block();
  device_ = Block();
  device_floats_ = Block();
  mem_ = nullptr;
}

Status HostStaging::grow(const DeviceMemory& mem, Kind kind, size_t bytes, unsigned char** p) {
  if (mem_ != &mem) release();  // all of it comes from one DeviceMemory
  mem_ = &mem;
  const bool on_device = kind != Kind::kHost;
  Block& b = kind == Kind::kHost ? host_ : kind == Kind::kDevice ? device_ : device_floats_;
  if (b.size < bytes) {
    if (on_device && b.data != nullptr) QC_RETURN_IF_ERROR(pending_.wait());
    if (b.data != nullptr) on_device ? mem.free_device(b.data) : mem.free_host(b.data);
    b = Block();
    void* fresh = nullptr;
    QC_RETURN_IF_ERROR(on_device ? mem.alloc_device(bytes, &fresh) : mem.alloc_host(bytes, &fresh));
    b.data = fresh;
    b.size = bytes;
  }
  *p = static_cast<unsigned char*>(b.data);
  return Status::ok();
}

Status place_collective_buffers(const DeviceMemory* mem, const void* stream, const void* sendbuf,
                                const void* recvbuf, BufferPlace* place) {
  const bool send_dev = mem != nullptr && mem->is_device(sendbuf);
  const bool recv_dev = mem != nullptr && mem->is_device(recvbuf);
  // A NULL (empty) buffer is neither; it goes with the other one.
  const bool device = send_dev || recv_dev;
  if (device && ((sendbuf != nullptr && !send_dev) || (recvbuf != nullptr && !recv_dev))) {
    const char* dev = send_dev ? "sendbuf" : "recvbuf";
    const char* host = send_dev ? "recvbuf" : "sendbuf";
    return invalid_argument(std::string("argument '") + host + "' is host memory but '" + dev +
                            "' is CUDA device memory; pass both on the device or both on the "
                            "host");
  }
  if (!device && stream != nullptr) {
    if (mem == nullptr) {
      return unsupported("argument 'stream' is not NULL, but this build of qc has no CUDA "
                         "support; pass NULL for host memory");
    }
    return unsupported("argument 'stream' is not NULL, but the buffers are host memory; a "
                       "stream orders work on CUDA device memory: pass NULL, or device buffers");
  }
  *place = device ? BufferPlace::kDevice : BufferPlace::kHost;
  return Status::ok();
}

Status run_staged(Communicator* comm, const DeviceMemory& mem, void* stream, const void* sendbuf,
                  size_t send_bytes, void* recvbuf, size_t recv_bytes,
                  const HostCollective& collective) {
  // A broken group fails at once, as on host memory, without copying.
  QC_RETURN_IF_ERROR(check_healthy(comm));
  // Nothing to copy (count 0): the collective reads and writes no element.
  if (send_bytes == 0 && recv_bytes == 0) return collective(sendbuf, recvbuf);
  const bool in_place = sendbuf == recvbuf;
  const size_t recv_at = in_place ? 0 : align_up(send_bytes);
  unsigned char* host = nullptr;
  Status s = comm->staging.reserve(mem, recv_at + recv_bytes, &host);
  if (s && send_bytes > 0) s = mem.to_host(host, sendbuf, send_bytes, stream);
  if (!s) {
    s = staging_failure(comm, "copy its device input to host memory", s);
    comm->transport->abort(s);
    return s;
  }
  QC_RETURN_IF_ERROR(collective(host, host + recv_at));
  if (recv_bytes > 0) s = mem.to_device(recvbuf, host + recv_at, recv_bytes, stream);
  if (!s) {
    s = staging_failure(comm, "copy the result to its device output", s);
    comm->transport->abort(s);
  }
  return s;
}

Status run_on_placed_buffers(Communicator* comm, const DeviceMemory* mem, void* stream,
                             const void* sendbuf, size_t send_bytes, void* recvbuf,
                             size_t recv_bytes, const HostCollective& collective,
                             const DeviceCollective& on_device) {
  BufferPlace place = BufferPlace::kHost;
  QC_RETURN_IF_ERROR(place_collective_buffers(mem, stream, sendbuf, recvbuf, &place));
  if (place == BufferPlace::kHost) return collective(sendbuf, recvbuf);
  if (on_device) {
    bool ran = false;
    Status s = on_device(sendbuf, recvbuf, stream, &ran);
    if (ran || !s) return s;
  }
  return run_staged(comm, *mem, stream, sendbuf, send_bytes, recvbuf, recv_bytes, collective);
}

}  // namespace qc
