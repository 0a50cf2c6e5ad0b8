#include "core/device_memory.h"

#if defined(QC_HAVE_CUDA)
#include "cuda/device_runtime.h"
#endif

namespace qc {
namespace {

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

}  // namespace qc
