// cuda_group.cpp - see cuda_group.h.
#include "cuda_group.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include <stdexcept>

#include "log.h"

// c10::Stream::native_handle (the cudaStream_t qc takes) is in torch 2.4
// and later; older torch sends CUDA tensors to the fallback.
#if defined(TORCH_VERSION_MAJOR) && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 4)
#define QC_TORCH_HAS_NATIVE_HANDLE 1
#else
#define QC_TORCH_HAS_NATIVE_HANDLE 0
#endif

namespace qc_torch {
namespace {

const char* kIdKey = "qc/nccl_unique_id";

const c10::impl::DeviceGuardImplInterface* cuda_impl() {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

// `waiter`'s later work waits on the device for `producer`'s work so far.
void wait_for(const c10::Stream& waiter, const c10::Stream& producer) {
  c10::Event event(c10::DeviceType::CUDA);
  event.record(producer);
  event.block(waiter);
}

}  // namespace

CudaGroup::CudaGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                     double timeout_seconds, size_t max_sites)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      timeout_seconds_(timeout_seconds),
      max_sites_(max_sites) {}

CudaGroup::~CudaGroup() {
  if (comm_ == nullptr) return;
  synchronize();
  sites_.reset();
  qc_comm_destroy(comm_);
}

bool CudaGroup::supported() { return QC_TORCH_HAS_NATIVE_HANDLE != 0; }

std::string CudaGroup::why_not(const c10::Device& device) {
  if (!supported()) return "CUDA tensors with torch older than 2.4 (no Stream::native_handle)";
  if (!store_) return "CUDA tensors (the group has no store to share an NCCL id)";
  std::lock_guard<std::mutex> lock(mutex_);
  // Made here, by the first call every rank routes by the same rule, so
  // that a qc without NCCL sends CUDA tensors to the fallback on every rank.
  if (comm_ == nullptr && unavailable_.empty()) make(device);
  if (!unavailable_.empty()) return "CUDA tensors (" + unavailable_ + ")";
  if (*device_ != device) {
    return "tensors on " + device.str() + " (the group's NCCL communicator is on " +
           device_->str() + ")";
  }
  return "";
}

void CudaGroup::make(const c10::Device& device) {
  c10::DeviceGuard guard(device);
  unsigned char id[QC_NCCL_UNIQUE_ID_BYTES];
  // Rank 0 publishes the id, or why there is none (a qc built without
  // NCCL, no libnccl.so.2): then every rank leaves CUDA tensors to the
  // fallback instead of waiting for an id that never comes.
  if (rank_ == 0) {
    const qc_status_t status = qc_nccl_unique_id_create(id, sizeof id);
    if (status != QC_SUCCESS) {
      const std::string why = qc_last_error();
      store_->set(kIdKey, std::vector<uint8_t>(why.begin(), why.end()));
      if (status != QC_ERROR_UNSUPPORTED) {
        throw std::runtime_error("qc: making an NCCL unique id failed: " + why);
      }
      unavailable_ = why;
      log_line(LogLevel::kInfo, rank_, "torch backend: CUDA tensors go to the fallback: " + why);
      return;
    }
    store_->set(kIdKey, std::vector<uint8_t>(id, id + sizeof id));
  } else {
    const std::vector<uint8_t> got = store_->get(kIdKey);  // waits, with the store's timeout
    if (got.size() != sizeof id) {
      unavailable_ = "rank 0: " + std::string(got.begin(), got.end());
      log_line(LogLevel::kInfo, rank_,
               "torch backend: CUDA tensors go to the fallback: " + unavailable_);
      return;
    }
    std::copy(got.begin(), got.end(), id);
  }
  qc_comm_config_t config;
  qc_comm_config_init(&config);
  config.transport = QC_TRANSPORT_NCCL;
  config.timeout_seconds = timeout_seconds_;
  qc_comm_t made = nullptr;
  if (qc_comm_create_nccl_id(id, sizeof id, rank_, size_, &config, &made) != QC_SUCCESS) {
    throw std::runtime_error(std::string("qc: creating the NCCL communicator on ") +
                             device.str() + " failed: " + qc_last_error());
  }
  for (const auto& p : policies_) {
    if (qc_comm_set_layer_policy(made, p.first.c_str(), &p.second) != QC_SUCCESS) {
      const std::string message = qc_last_error();
      qc_comm_destroy(made);
      throw std::runtime_error("qc: set_layer_policy(\"" + p.first + "\") on the NCCL "
                               "communicator failed: " + message);
    }
  }
  auto sites = std::make_unique<CallSites>(made, rank_, max_sites_);
  for (const auto& saved : deferred_) sites->load(saved);
  deferred_.clear();
  side_ = cuda_impl()->getStreamFromGlobalPool(device, /*isHighPriority=*/false);
  sites_ = std::move(sites);
  device_ = device;
  comm_ = made;
  log_line(LogLevel::kInfo, rank_,
           "torch backend: qc's NCCL communicator for CUDA tensors is on " + device.str());
}

void* CudaGroup::stream_handle() const {
#if QC_TORCH_HAS_NATIVE_HANDLE
  return side_->native_handle();
#else
  return nullptr;  // not reached: why_not sends CUDA tensors to the fallback
#endif
}

c10::Stream CudaGroup::current() const { return cuda_impl()->getStream(*device_); }

void CudaGroup::side_waits_for_current() { wait_for(*side_, current()); }

void CudaGroup::current_waits_for_side(const c10::Device& device) {
  if (side_ && *device_ == device) wait_for(current(), *side_);
}

void CudaGroup::used_on_side(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.is_cuda()) return;
  cuda_impl()->recordDataPtrOnStream(tensor.storage().data_ptr(), *side_);
}

void CudaGroup::set_layer_policy(const std::string& pattern, const qc_policy_t& policy) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (comm_ != nullptr && qc_comm_set_layer_policy(comm_, pattern.c_str(), &policy) != QC_SUCCESS) {
    throw std::runtime_error("qc: set_layer_policy(\"" + pattern + "\") on the NCCL "
                             "communicator failed: " + qc_last_error());
  }
  policies_.emplace_back(pattern, policy);
}

void CudaGroup::synchronize() {
  if (side_) side_->synchronize();
}

std::string CudaGroup::async_error() {
  if (comm_ == nullptr) return "";
  qc_status_t status = QC_SUCCESS;
  if (qc_comm_get_async_error(comm_, &status) != QC_SUCCESS) return qc_last_error();
  if (status == QC_SUCCESS) return "";
  return std::string("qc: the NCCL communicator failed: ") + qc_status_string(status) + ": " +
         qc_last_error();
}

}  // namespace qc_torch
