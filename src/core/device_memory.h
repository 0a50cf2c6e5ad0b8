// What qc does with CUDA device memory, as an interface: which pointers are
// device memory, copies ordered on a stream, page-locked and device
// allocations, events. The CUDA runtime in production (cuda_device_memory);
// a fake in the unit tests (tests/unit/fake_device.h), so that everything
// built on it (staging, device residuals, pending work) is tested on
// machines without a GPU.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace qc {

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

// The CUDA runtime's DeviceMemory; nullptr in a build without CUDA.
const DeviceMemory* cuda_device_memory();

}  // namespace qc
