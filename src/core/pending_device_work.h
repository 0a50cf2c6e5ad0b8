// Stream-ordered work left on a caller's stream that still uses qc's device
// memory, and the waits for it (the host's, with a timeout).
#pragma once

#include "core/device_memory.h"
#include "core/status.h"

namespace qc {

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

}  // namespace qc
