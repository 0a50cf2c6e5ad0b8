#include "core/host_staging.h"

#include <string>

#include "core/communicator.h"

namespace qc {
namespace {

constexpr size_t kAlign = 64;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The rank's own failure, told to its peers in words they can act on.
Status staging_failure(const Communicator* comm, const char* step, const Status& cause) {
  return Status(cause.code(), "rank " + std::to_string(comm->transport->rank()) + " could not " +
                                  step + ": " + cause.message());
}

}  // namespace

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
