// The page-locked host memory and the device memory a communicator stages
// through (core/host_staging.h stages whole buffers, core/device_staging.h
// compressed payloads), kept from call to call.
#pragma once

#include <cstddef>

#include "core/device_memory.h"
#include "core/pending_device_work.h"
#include "core/status.h"

namespace qc {

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

}  // namespace qc
