// An error buffer's residuals on the device, for allreduces of device
// buffers with error feedback (device_staging.h). Kept there from call to
// call, so a training loop on the GPU never copies its residuals across; the
// host copy (ErrorBuffer::residual) catches up only when the host
// reads it (a host call with the buffer, save, norm).
//
// Two device blocks: the current residuals and the ones a call works on, so
// a call that fails leaves the residuals as they were, as the host path's
// working copy (Communicator::residual_work) does.
#pragma once

#include <cstddef>
#include <vector>

#include "core/codecs/device_message_codec.h"
#include "core/device_memory.h"
#include "core/pending_device_work.h"
#include "core/status.h"

namespace qc {

class DeviceResiduals {
 public:
  DeviceResiduals() = default;
  ~DeviceResiduals() { release(); }
  DeviceResiduals(const DeviceResiduals&) = delete;
  DeviceResiduals& operator=(const DeviceResiduals&) = delete;

  // True while the device holds residuals the host copy lacks.
  bool newer() const { return newer_; }

  // The block a call on `mem` works on, enqueued on `stream` to hold the
  // current residuals: the device's when newer, else `host`'s (uploaded),
  // or zeros with `reset`. Allocated at first use (on the calling thread's
  // current device), again if `mem` or the count changes.
  Status begin(const DeviceMemory& mem, const DeviceMessageCodec& codec,
               const std::vector<float>& host, bool reset, void* stream, float** work);
  // After a call that succeeded: its block becomes the current residuals.
  void commit();
  // A call left work on `stream` that uses the blocks (stream-ordered, or a
  // call that failed part way): the next use of the residuals (a call, the
  // host, the release) waits for it, the host at most `timeout_seconds`.
  Status enqueued(void* stream, double timeout_seconds) {
    return pending_.enqueued(*mem_, stream, timeout_seconds);
  }
  // Brings `host` up to date when the device is newer (waits for the copy).
  Status to_host(std::vector<float>* host);
  // The host copy changed (reset, a loaded image): the device's is stale.
  void host_changed() { newer_ = false; }

 private:
  void release();

  const DeviceMemory* mem_ = nullptr;
  float* blocks_[2] = {nullptr, nullptr};
  size_t count_ = 0;
  int current_ = 0;
  bool newer_ = false;
  PendingDeviceWork pending_;
};

}  // namespace qc
