// A stand-in for the CUDA runtime (the part of its C API that libqc, the
// GPU tests and the GPU tools call), for the emulated-GPU build
// (QC_EMULATED_GPU, tests/emulated_gpu/README.md): "device" memory is host
// memory this file hands out and remembers, every copy, memset and kernel
// runs at once on the calling thread (the kernels through the warp
// emulator), streams and events are handles whose work is always done.
//
// So the GPU programs run unchanged on a machine without a GPU, and what
// they check that does not depend on the device's timing (which pointers
// are device memory, which copies move which bytes, the staging, the
// results and the errors) is checked in CI. What it cannot show: anything
// that depends on work running later than it was enqueued (stream order,
// events, races), speed, and the device's own code generation. Those need
// the GPU runs (scripts/gpu_check.sh).
//
// Stricter than the real runtime where that catches bugs: a copy or memset
// must lie inside one allocation on its device side, a host-side pointer of
// a directed copy must not be device memory, and freeing what was not
// allocated is an error.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace {

struct Allocation {
  size_t bytes;
  cudaMemoryType type;
};

// Every allocation, by start address; a lock because ranks run as threads.
struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> blocks;
};
Registry& registry() {
  static Registry* r = new Registry();  // outlives every static destructor
  return *r;
}

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

// The allocation holding [p, p + bytes), or with bytes 0 the one holding
// the address p (a block of 0 bytes holds its start).
bool find(const void* p, size_t bytes, Allocation* out) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = r.blocks.upper_bound(a);
  if (it == r.blocks.begin()) return false;
  --it;
  const size_t offset = a - it->first;
  const size_t size = it->second.bytes;
  if (bytes == 0 ? offset >= (size > 0 ? size : 1) : (offset >= size || bytes > size - offset))
    return false;
  *out = it->second;
  return true;
}

bool on_device(const void* p, size_t bytes) {
  Allocation a{};
  return find(p, bytes, &a) &&
         (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged);
}
bool is_device_pointer(const void* p) { return on_device(p, 0); }

cudaError_t allocate(void** p, size_t bytes, cudaMemoryType type) {
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  // cudaMalloc's alignment, and exactly the bytes asked for (at least one,
  // so every block has its own address): under AddressSanitizer a kernel or
  // copy past the end of "device" memory is reported where it happens.
  void* block = nullptr;
  if (posix_memalign(&block, 256, bytes > 0 ? bytes : 1) != 0) {
    return fail(cudaErrorMemoryAllocation);
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.blocks[reinterpret_cast<uintptr_t>(block)] = Allocation{bytes, type};
  *p = block;
  return cudaSuccess;
}

cudaError_t release(void* p, bool host) {
  if (p == nullptr) return cudaSuccess;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.blocks.end() || (it->second.type == cudaMemoryTypeHost) != host)
    return fail(cudaErrorInvalidValue);
  r.blocks.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault && kind != cudaMemcpyHostToHost) {
    if (dst_device ? !on_device(dst, bytes) : is_device_pointer(dst))
      return fail(cudaErrorInvalidValue);
    if (src_device ? !on_device(src, bytes) : is_device_pointer(src))
      return fail(cudaErrorInvalidValue);
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t fill(void* dst, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!on_device(dst, bytes)) return fail(cudaErrorInvalidValue);
  std::memset(dst, value, bytes);
  return cudaSuccess;
}

// Streams and events are handles of their own kind; an event remembers when
// it was recorded, for cudaEventElapsedTime.
struct FakeStream {
  unsigned flags;
};
struct FakeEvent {
  unsigned flags;
  bool recorded = false;
  std::chrono::steady_clock::time_point at{};
};

// cudaStreamCreateWithFlags and cudaEventCreateWithFlags: a new Fake as the
// opaque Handle.
template <class Fake, class Handle>
cudaError_t create_handle(Handle* out, unsigned flags) {
  if (out == nullptr) return fail(cudaErrorInvalidValue);
  *out = reinterpret_cast<Handle>(new Fake{flags});
  return cudaSuccess;
}
template <class Fake, class Handle>
cudaError_t destroy_handle(Handle handle) {
  if (handle == nullptr) return fail(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<Fake*>(handle);
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = current_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr || device != 0) return fail(cudaErrorInvalidValue);
  std::memset(prop, 0, sizeof *prop);
  std::strncpy(prop->name, "qc emulated GPU (tests/emulated_gpu)", sizeof prop->name - 1);
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 2;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->totalGlobalMem = size_t{1} << 32;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) { return cudaRuntimeGetVersion(version); }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    default: return "unknown error";
  }
}

cudaError_t cudaMalloc(void** p, size_t bytes) { return allocate(p, bytes, cudaMemoryTypeDevice); }
cudaError_t cudaMallocManaged(void** p, size_t bytes, unsigned int) {
  return allocate(p, bytes, cudaMemoryTypeManaged);
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return allocate(p, bytes, cudaMemoryTypeHost); }
// What cuda_runtime.h's C++ cudaMallocHost(T**, size, flags) calls.
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  return allocate(p, bytes, cudaMemoryTypeHost);
}
cudaError_t cudaFree(void* p) { return release(p, false); }
cudaError_t cudaFreeHost(void* p) { return release(p, true); }

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  if (attr == nullptr) return fail(cudaErrorInvalidValue);
  std::memset(attr, 0, sizeof *attr);
  Allocation a{};
  // As CUDA 11 and later: memory the runtime does not know is "unregistered",
  // not an error.
  if (p == nullptr || !find(p, 0, &a)) {
    attr->type = cudaMemoryTypeUnregistered;
    attr->device = -2;
    attr->hostPointer = const_cast<void*>(p);
    return cudaSuccess;
  }
  attr->type = a.type;
  attr->device = 0;
  attr->devicePointer = const_cast<void*>(p);
  attr->hostPointer = a.type == cudaMemoryTypeDevice ? nullptr : const_cast<void*>(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  return copy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) { return fill(dst, value, bytes); }
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
  return fill(dst, value, bytes);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return create_handle<FakeStream>(stream, flags);
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}
// The legacy default stream (0) and the per-thread one (cudaStreamPerThread,
// a small constant) are never created or destroyed.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(stream) < 0x100) return fail(cudaErrorInvalidResourceHandle);
  return destroy_handle<FakeStream>(stream);
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned int) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  return create_handle<FakeEvent>(event, flags);
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) { return destroy_handle<FakeEvent>(event); }
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  auto* e = reinterpret_cast<FakeEvent*>(event);
  e->recorded = true;
  e->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return event == nullptr ? fail(cudaErrorInvalidResourceHandle) : cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) { return cudaEventQuery(event); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return fail(cudaErrorInvalidValue);
  const auto* a = reinterpret_cast<const FakeEvent*>(start);
  const auto* b = reinterpret_cast<const FakeEvent*>(end);
  if (!a->recorded || !b->recorded || (a->flags & cudaEventDisableTiming) ||
      (b->flags & cudaEventDisableTiming))
    return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

}  // extern "C"
