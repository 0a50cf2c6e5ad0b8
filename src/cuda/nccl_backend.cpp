#include "cuda/nccl_backend.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#include "qc.h"

namespace qc {
namespace cuda {
namespace {

// The NCCL entry points qc uses, looked up once per process.
struct NcclApi {
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclCommSplit) comm_split = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config = nullptr;
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
  decltype(&ncclAllReduce) all_reduce = nullptr;
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
      get(&table.get_unique_id, "ncclGetUniqueId");
      get(&table.comm_init_rank_config, "ncclCommInitRankConfig");
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
      get(&table.all_reduce, "ncclAllReduce");
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
  (void)cudaGetLastError();  // reported here, not again by the next launch check
  return transport_error(std::string(what) + " failed: " + cudaGetErrorString(e));
}

// Calls fn(offset, bytes) once per run of consecutive ops of one direction
// whose frames are adjacent in the image (up to the alignment padding between
// them), so a wait of many small messages costs a few copies, not one each.
// The padding copied with a run is the image's own bytes, never read.
template <typename Fn>
Status for_each_run(const std::vector<NcclOp>& ops, bool send, Fn&& fn) {
  size_t begin = 0, end = 0;
  bool open = false;
  for (const NcclOp& op : ops) {
    if (op.send != send) {
      if (open) QC_RETURN_IF_ERROR(fn(begin, end - begin));
      open = false;
      continue;
    }
    if (!open) begin = op.offset;
    open = true;
    end = op.offset + op.bytes;
  }
  if (open) QC_RETURN_IF_ERROR(fn(begin, end - begin));
  return Status::ok();
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
    release_arena();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status start(uint8_t* image, size_t image_bytes, const std::vector<NcclOp>& ops) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return transport_error("the NCCL communicator was aborted");
    DeviceScope scope(device_);
    QC_RETURN_IF_ERROR(reserve_arena(image_bytes));
    QC_RETURN_IF_ERROR(for_each_run(ops, /*send=*/true, [&](size_t offset, size_t bytes) {
      return stage_in(image + offset, offset, bytes);
    }));
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
    copy_back_.clear();
    copied_back_ = false;
    return for_each_run(ops, /*send=*/false, [&](size_t offset, size_t bytes) {
      return stage_out(image + offset, offset, bytes);
    });
  }

  Status start_allreduce(void* data, size_t count, NcclReduction reduction) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return transport_error("the NCCL communicator was aborted");
    DeviceScope scope(device_);
    const size_t bytes = count * element_bytes(reduction);
    QC_RETURN_IF_ERROR(reserve_arena(bytes));
    QC_RETURN_IF_ERROR(stage_in(data, 0, bytes));
    ncclDataType_t type = ncclFloat32;
    ncclRedOp_t op = ncclSum;
    switch (reduction) {
      case NcclReduction::kSumFloat32: type = ncclFloat32; break;
      case NcclReduction::kMinUint64: type = ncclUint64; op = ncclMin; break;
    }
    ncclResult_t r = api_.all_reduce(arena_, arena_, count, type, op, comm_, stream_);
    if (r != ncclSuccess) return nccl_status(api_, r, "ncclAllReduce");
    copy_back_.clear();
    copied_back_ = false;
    return stage_out(data, 0, bytes);
  }

  Status enqueue_allreduce(const float* send, float* recv, size_t count, bool average,
                           void* stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return transport_error("the NCCL communicator was aborted");
    DeviceScope scope(device_);
    ncclResult_t r = api_.all_reduce(send, recv, count, ncclFloat32, average ? ncclAvg : ncclSum,
                                     comm_, static_cast<cudaStream_t>(stream));
    if (r != ncclSuccess && r != ncclInProgress) return nccl_status(api_, r, "ncclAllReduce");
    return Status::ok();
  }

  Status enqueue_group(const DeviceTransfer* ops, size_t count, void* stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return transport_error("the NCCL communicator was aborted");
    DeviceScope scope(device_);
    const auto on = static_cast<cudaStream_t>(stream);
    ncclResult_t r = api_.group_start();
    if (r != ncclSuccess) return nccl_status(api_, r, "ncclGroupStart");
    for (size_t i = 0; i < count; ++i) {
      const DeviceTransfer& op = ops[i];
      r = op.send ? api_.send(op.data, op.bytes, ncclUint8, op.peer, comm_, on)
                  : api_.recv(op.data, op.bytes, ncclUint8, op.peer, comm_, on);
      if (r != ncclSuccess) {
        api_.group_end();
        return nccl_status(api_, r, op.send ? "ncclSend" : "ncclRecv");
      }
    }
    r = api_.group_end();
    if (r != ncclSuccess && r != ncclInProgress) return nccl_status(api_, r, "ncclGroupEnd");
    return Status::ok();
  }

  Status check_device_buffers(const void* send, const void* recv) override {
    // qc's kernels and memory follow the calling thread's current device,
    // the NCCL calls the communicator's; they must be one device, or
    // nothing orders the one's work before the other's.
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_) {
      cudaGetLastError();
      return invalid_argument("the calling thread's current CUDA device is " +
                              std::to_string(current) + ", the NCCL communicator's is " +
                              std::to_string(device_) + "; call cudaSetDevice(" +
                              std::to_string(device_) + ") first");
    }
    for (const auto& [p, name] : {std::pair<const void*, const char*>{send, "sendbuf"},
                                  std::pair<const void*, const char*>{recv, "recvbuf"}}) {
      cudaPointerAttributes a{};
      if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();  // not sticky; leave no error for the caller's next CUDA call
        return invalid_argument(std::string("argument '") + name + "' is not CUDA memory");
      }
      if (a.type == cudaMemoryTypeManaged) continue;
      if (a.type != cudaMemoryTypeDevice) {
        return invalid_argument(std::string("argument '") + name + "' is not CUDA device memory");
      }
      if (a.device != device_) {
        return invalid_argument(std::string("argument '") + name + "' is on CUDA device " +
                                std::to_string(a.device) + ", but the NCCL communicator is on "
                                "device " + std::to_string(device_) +
                                "; pass buffers of the communicator's device");
      }
    }
    return Status::ok();
  }

  Status async_error() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return Status::ok();  // the transport recorded why it aborted
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = api_.comm_get_async_error(comm_, &async);
    if (r != ncclSuccess) return nccl_status(api_, r, "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) {
      return nccl_status(api_, async, "an NCCL operation");
    }
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
      if (e == cudaErrorNotReady) {
        // Not an error, but recorded as the thread's last one: cleared, or
        // the next kernel launch check would report it (as query_event).
        (void)cudaGetLastError();
        return Status::ok();
      }
      if (e != cudaSuccess) return cuda_status(e, "the NCCL group's stream");
      // The stream copied the results to page-locked memory; the caller's
      // buffer may be pageable, so the last step is the host's.
      for (const CopyBack& c : copy_back_) std::memcpy(c.host, c.pinned, c.bytes);
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
  // The device buffer every group and allreduce works in, and its
  // page-locked host copy, grown as needed; the stream is idle when this is
  // called (the previous poll said done).
  Status reserve_arena(size_t bytes) {
    if (arena_bytes_ >= bytes) return Status::ok();
    release_arena();
    cudaError_t e = cudaMalloc(&arena_, bytes);
    if (e == cudaSuccess) e = cudaMallocHost(&pinned_, bytes);
    if (e != cudaSuccess) {
      release_arena();
      return cuda_status(e, "allocating NCCL's device and page-locked buffers");
    }
    arena_bytes_ = bytes;
    return Status::ok();
  }
  void release_arena() {
    if (arena_ != nullptr) cudaFree(arena_);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    arena_ = nullptr;
    pinned_ = nullptr;
    arena_bytes_ = 0;
  }

  // `bytes` of host memory to the arena at `offset`, through its page-locked
  // copy, so the copy is ordered on qc's stream alone.
  Status stage_in(const void* host, size_t offset, size_t bytes) {
    if (bytes == 0) return Status::ok();
    std::memcpy(pinned_ + offset, host, bytes);
    const cudaError_t e = cudaMemcpyAsync(arena_ + offset, pinned_ + offset, bytes,
                                          cudaMemcpyHostToDevice, stream_);
    return e == cudaSuccess ? Status::ok() : cuda_status(e, "cudaMemcpyAsync to NCCL's buffer");
  }
  // Enqueues the arena's `bytes` at `offset` back to its page-locked copy,
  // which poll hands to `host` once the stream is done. A synchronous copy
  // there would run on the legacy stream, which waits for every blocking
  // stream's work on the device, the caller's qc groups included.
  Status stage_out(void* host, size_t offset, size_t bytes) {
    if (bytes == 0) return Status::ok();
    const cudaError_t e = cudaMemcpyAsync(pinned_ + offset, arena_ + offset, bytes,
                                          cudaMemcpyDeviceToHost, stream_);
    if (e != cudaSuccess) return cuda_status(e, "cudaMemcpyAsync of NCCL's results");
    copy_back_.push_back({static_cast<uint8_t*>(host), pinned_ + offset, bytes});
    return Status::ok();
  }

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
  uint8_t* pinned_ = nullptr;  // page-locked, arena_bytes_ too
  size_t arena_bytes_ = 0;
  // What poll copies to the caller's memory once the stream is done: the
  // started group's receive runs, or the allreduce's result.
  struct CopyBack {
    uint8_t* host;
    const uint8_t* pinned;
    size_t bytes;
  };
  std::vector<CopyBack> copy_back_;
  bool copied_back_ = true;
};

// qc's communicator `own` (rank of size on `device`) with a stream of its
// own; destroys `own` when the stream cannot be made.
Status wrap_own_comm(const NcclApi& api, ncclComm_t own, int rank, int size, int device,
                     std::unique_ptr<NcclBackend>* out) {
  cudaStream_t stream = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    api.comm_destroy(own);
    return cuda_status(e, "cudaStreamCreateWithFlags");
  }
  *out = std::make_unique<RealNcclBackend>(api, own, rank, size, device, stream);
  return Status::ok();
}

// Blocking, whatever NCCL_COMM_BLOCKING says: with a non-blocking
// communicator every call could return ncclInProgress, which qc's waits do
// not expect.
ncclConfig_t blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  return config;
}

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
  // A split inherits a non-blocking parent's config unless given one.
  ncclConfig_t config = blocking_config();
  r = api->comm_split(user, 0, rank, &own, &config);
  if (r != ncclSuccess) return nccl_status(*api, r, "ncclCommSplit of the caller's communicator");
  return wrap_own_comm(*api, own, rank, size, device, out);
}

Status make_nccl_unique_id(uint8_t* id) {
  static_assert(sizeof(ncclUniqueId) == QC_NCCL_UNIQUE_ID_BYTES, "ncclUniqueId's size");
  const NcclApi* api = nullptr;
  QC_RETURN_IF_ERROR(load_nccl(&api));
  ncclUniqueId made;
  const ncclResult_t r = api->get_unique_id(&made);
  if (r != ncclSuccess) return nccl_status(*api, r, "ncclGetUniqueId");
  std::memcpy(id, &made, sizeof made);
  return Status::ok();
}

Status make_nccl_backend_from_id(const uint8_t* id, int rank, int nranks,
                                 std::unique_ptr<NcclBackend>* out) {
  int device = -1;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return invalid_argument(std::string("no usable current CUDA device for the NCCL "
                                        "communicator (cudaGetDevice: ") +
                            cudaGetErrorString(e) + ")");
  }
  const NcclApi* api = nullptr;
  QC_RETURN_IF_ERROR(load_nccl(&api));
  ncclUniqueId unique;
  std::memcpy(&unique, id, sizeof unique);
  ncclComm_t own = nullptr;
  ncclConfig_t config = blocking_config();
  const ncclResult_t r = api->comm_init_rank_config(&own, nranks, unique, rank, &config);
  if (r != ncclSuccess) {
    return nccl_status(*api, r, "ncclCommInitRank (every rank must call it with the same id)");
  }
  return wrap_own_comm(*api, own, rank, nranks, device, out);
}

}  // namespace cuda
}  // namespace qc
