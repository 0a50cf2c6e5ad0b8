#include "core/staging_memory.h"

namespace qc {

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

}  // namespace qc
