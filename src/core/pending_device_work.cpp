#include "core/pending_device_work.h"

#include <string>

#include "core/transports/backoff.h"

namespace qc {

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

}  // namespace qc
