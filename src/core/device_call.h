// What the drivers of calls on device buffers (allreduce_device.cpp,
// alltoall.cpp) share: the end of a call's preparation, and the record of
// the work it leaves on the caller's stream.
#pragma once

#include "core/collective_context.h"
#include "core/device_memory.h"
#include "core/pending_device_work.h"
#include "core/status.h"

namespace qc {

// The end of a device call's preparation, `local` its status: an enqueued
// call's agreement comes here, after everything that can fail on this rank
// alone, and a rank whose preparation failed fails it for every rank.
Status conclude_preparation(CollectiveContext& ctx, bool enqueued, const void* sendbuf,
                            const void* recvbuf, const Status& local);

// Records, when a call's scope ends, that the work it left on `stream` may
// still use qc's device memory, unless `settled` says the call waited for
// it. A failure to record leaves nothing better to do than what a failed
// call does anyway: the group is broken, and destruction waits for the
// memory with a timeout (PendingDeviceWork::wait).
class PendingOnExit {
 public:
  PendingOnExit(PendingDeviceWork& pending, const DeviceMemory& mem, void* stream,
                double timeout_seconds, const bool& settled)
      : pending_(pending), mem_(mem), stream_(stream), timeout_(timeout_seconds),
        settled_(settled) {}
  ~PendingOnExit() {
    if (!settled_) (void)pending_.enqueued(mem_, stream_, timeout_);
  }
  PendingOnExit(const PendingOnExit&) = delete;
  PendingOnExit& operator=(const PendingOnExit&) = delete;

 private:
  PendingDeviceWork& pending_;
  const DeviceMemory& mem_;
  void* stream_;
  double timeout_;
  const bool& settled_;
};

}  // namespace qc
