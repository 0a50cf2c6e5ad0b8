#include "cuda/nccl_backend.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <mutex>
#include <string>
#include <type_traits>

namespace qc {
namespace cuda {
namespace {

// The NCCL entry points qc uses, looked up once per process.
struct NcclApi {
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclCommSplit) comm_split = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclCommCount) comm_count = nullptr;
  decltype(&ncclCommUserRank) comm_user_rank = nullptr;
  decltype(&ncclCommCuDevice) comm_cu_device = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
};

// Loaded under a mutex, once: the table never changes after it (the library
// stays loaded for the life of the process, as NCCL itself expects).
Status load_nccl(const NcclApi** api) {
  static std::mutex mutex;
  static NcclApi table;
  static Status loaded = unsupported("NCCL not loaded yet");
  static bool tried = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!tried) {
    tried = true;
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      loaded = unsupported(std::string("the NCCL transport needs libnccl.so.2, which did not load (") +
                           (why ? why : "unknown reason") +
                           "); put NCCL's library folder on LD_LIBRARY_PATH");
    } else {
      bool all = true;
      std::string missing;
      auto get = [&](auto* slot, const char* name) {
        *slot = reinterpret_cast<std::remove_pointer_t<decltype(slot)>>(dlsym(lib, name));
        if (*slot == nullptr) {
          all = false;
          missing += std::string(missing.empty() ? "" : ", ") + name;
        }
      };
      get(&table.get_error_string, "ncclGetErrorString");
      get(&table.comm_split, "ncclCommSplit");
      get(&table.comm_destroy, "ncclCommDestroy");
      get(&table.comm_abort, "ncclCommAbort");
      get(&table.comm_get_async_error, "ncclCommGetAsyncError");
      get(&table.comm_count, "ncclCommCount");
      get(&table.comm_user_rank, "ncclCommUserRank");
      get(&table.comm_cu_device, "ncclCommCuDevice");
      get(&table.group_start, "ncclGroupStart");
      get(&table.group_end, "ncclGroupEnd");
      get(&table.send, "ncclSend");
      get(&table.recv, "ncclRecv");
      loaded = all ? Status::ok()
                   : unsupported("the loaded NCCL lacks " + missing +
                                 " (the NCCL transport needs NCCL 2.18 or later)");
    }
  }
  *api = &table;
  return loaded;
}

Status nccl_status(const NcclApi& api, ncclResult_t r, const char* what) {
  return transport_error(std::string(what) + " failed: " + api.get_error_string(r));
}

Status cuda_status(cudaError_t e, const char* what) {
  return transport_error(std::string(what) + " failed: " + cudaGetErrorString(e));
}

// Makes `device` current for a scope and restores the caller's device, so
// qc never changes which device the calling thread works on.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    if (saved_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (saved_ >= 0) cudaSetDevice(saved_);
  }

 private:
  int saved_ = -1;
};

class RealNcclBackend final : public NcclBackend {
 public:
  RealNcclBackend(const NcclApi& api, ncclComm_t comm, int rank, int size, int device,
                  cudaStream_t stream)
      : api_(api), comm_(comm), rank_(rank), size_(size), device_(device), stream_(stream) {}

  ~RealNcclBackend() override {
    DeviceScope scope(device_);
    if (!aborted_) {
      cudaStreamSynchronize(stream_);
      api_.comm_destroy(comm_);
    }
    cudaStreamDestroy(stream_);
    if (arena_ != nullptr) cudaFree(arena_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status start(uint8_t* image, size_t image_bytes, const std::vector<NcclOp>& ops) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return transport_error("the NCCL communicator was aborted");
    DeviceScope scope(device_);
    if (arena_bytes_ < image_bytes) {
      if (arena_ != nullptr) cudaFree(arena_);
      arena_ = nullptr;
      arena_bytes_ = 0;
      cudaError_t e = cudaMalloc(&arena_, image_bytes);
      if (e != cudaSuccess) return cuda_status(e, "cudaMalloc for the NCCL frames");
      arena_bytes_ = image_bytes;
    }
    for (const NcclOp& op : ops) {
      if (!op.send) continue;
      cudaError_t e = cudaMemcpyAsync(arena_ + op.offset, image + op.offset, op.bytes,
                                      cudaMemcpyHostToDevice, stream_);
      if (e != cudaSuccess) return cuda_status(e, "cudaMemcpyAsync of an NCCL frame");
    }
    ncclResult_t r = api_.group_start();
    if (r != ncclSuccess) return nccl_status(api_, r, "ncclGroupStart");
    for (const NcclOp& op : ops) {
      r = op.send ? api_.send(arena_ + op.offset, op.bytes, ncclUint8, op.peer, comm_, stream_)
                  : api_.recv(arena_ + op.offset, op.bytes, ncclUint8, op.peer, comm_, stream_);
      if (r != ncclSuccess) {
        api_.group_end();
        return nccl_status(api_, r, op.send ? "ncclSend" : "ncclRecv");
      }
    }
    r = api_.group_end();
    if (r != ncclSuccess) return nccl_status(api_, r, "ncclGroupEnd");
    image_ = image;
    ops_ = &ops;
    copied_back_ = false;
    return Status::ok();
  }

  Status poll(bool* done) override {
    std::lock_guard<std::mutex> lock(mutex_);
    *done = false;
    if (aborted_) return transport_error("the NCCL communicator was aborted");
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = api_.comm_get_async_error(comm_, &async);
    if (r != ncclSuccess) return nccl_status(api_, r, "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) {
      return nccl_status(api_, async, "an NCCL operation");
    }
    DeviceScope scope(device_);
    if (!copied_back_) {
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaErrorNotReady) return Status::ok();
      if (e != cudaSuccess) return cuda_status(e, "the NCCL group's stream");
      for (const NcclOp& op : *ops_) {
        if (op.send) continue;
        e = cudaMemcpy(image_ + op.offset, arena_ + op.offset, op.bytes, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) return cuda_status(e, "cudaMemcpy of a received NCCL frame");
      }
      copied_back_ = true;
    }
    *done = true;
    return Status::ok();
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return;
    aborted_ = true;
    DeviceScope scope(device_);
    api_.comm_abort(comm_);
  }

 private:
  const NcclApi& api_;
  ncclComm_t comm_;
  int rank_;
  int size_;
  int device_;
  cudaStream_t stream_;
  // Serialises abort (from any thread) with start and poll, which must not
  // touch a communicator ncclCommAbort has freed.
  std::mutex mutex_;
  bool aborted_ = false;
  uint8_t* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  uint8_t* image_ = nullptr;
  const std::vector<NcclOp>* ops_ = nullptr;
  bool copied_back_ = true;
};

}  // namespace

Status make_nccl_backend(void* user_comm, std::unique_ptr<NcclBackend>* out) {
  if (user_comm == nullptr) {
    return invalid_argument("argument 'config': field 'nccl_comm' is NULL; pass an initialised "
                            "ncclComm_t");
  }
  const NcclApi* api = nullptr;
  QC_RETURN_IF_ERROR(load_nccl(&api));
  ncclComm_t user = static_cast<ncclComm_t>(user_comm);
  int rank = 0, size = 0, device = 0;
  ncclResult_t r = api->comm_user_rank(user, &rank);
  if (r == ncclSuccess) r = api->comm_count(user, &size);
  if (r == ncclSuccess) r = api->comm_cu_device(user, &device);
  if (r != ncclSuccess) {
    return invalid_argument(std::string("argument 'config': field 'nccl_comm' is not a usable "
                                        "ncclComm_t (") + api->get_error_string(r) + ")");
  }
  DeviceScope scope(device);
  ncclComm_t own = nullptr;
  r = api->comm_split(user, 0, rank, &own, nullptr);
  if (r != ncclSuccess) return nccl_status(*api, r, "ncclCommSplit of the caller's communicator");
  cudaStream_t stream = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    api->comm_destroy(own);
    return cuda_status(e, "cudaStreamCreateWithFlags");
  }
  *out = std::make_unique<RealNcclBackend>(*api, own, rank, size, device, stream);
  return Status::ok();
}

}  // namespace cuda
}  // namespace qc
