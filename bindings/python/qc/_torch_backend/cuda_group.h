// cuda_group.h - the backend's qc communicator for CUDA tensors.
//
// qc's NCCL transport, made at the group's first collective on CUDA tensors
// (so init_process_group("cpu:qc,cuda:qc") costs nothing on a machine
// without a GPU, as ProcessGroupNCCL's lazy set-up): rank 0 makes an NCCL
// unique id (qc_nccl_unique_id_create) and puts it in torch's store, every
// rank reads it and calls qc_comm_create_nccl_id on the tensor's device.
//
// The calls run on a side stream of that device, as NCCL's process group
// runs them: the side stream first waits for the caller's current stream
// (the inputs are ready), qc enqueues its work there (stream-ordered on
// NCCL: allreduce and alltoall, codec none and the compressed algorithms;
// the rest qc stages and finishes before it returns, docs/cuda.md), and a
// Work's wait() makes the caller's stream wait for the side stream. No
// tensor goes through host memory here; the caching allocator is told
// which tensors the side stream uses (recordDataPtrOnStream).
//
// Only c10's device-generic interfaces are used (Stream, Event,
// DeviceGuard), so the extension compiles without the CUDA toolkit.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "call_sites.h"
#include "qc.h"

namespace qc_torch {

class CudaGroup {
 public:
  CudaGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size, double timeout_seconds,
            size_t max_sites);
  ~CudaGroup();
  CudaGroup(const CudaGroup&) = delete;
  CudaGroup& operator=(const CudaGroup&) = delete;

  // Whether this torch can hand qc a CUDA stream (c10::Stream::native_handle).
  static bool supported();

  // "" when the group takes tensors on `device`, else why not (a second
  // device after the first: one communicator, one device; a qc without
  // NCCL). Makes the communicator at its first call: collective, so call
  // it where every rank does (routing a collective).
  std::string why_not(const c10::Device& device);

  CallSites& sites() { return *sites_; }
  // The side stream's handle (a cudaStream_t) for qc's calls.
  void* stream_handle() const;

  // Before a qc call: the side stream waits for the caller's current stream.
  void side_waits_for_current();
  // Before another library's call on `device`: the caller's current stream
  // waits for the side stream's work so far (nothing to wait for before
  // the communicator exists, or on another device).
  void current_waits_for_side(const c10::Device& device);
  // A tensor the side stream reads or writes: its memory is not reused
  // before the side stream's work so far is done.
  void used_on_side(const at::Tensor& tensor);
  c10::Stream side() const { return *side_; }
  // The current stream of the group's device.
  c10::Stream current() const;

  // Policies set on the backend: kept, and applied to the communicator when
  // it is made.
  void set_layer_policy(const std::string& pattern, const qc_policy_t& policy);
  // Residuals saved before the communicator exists wait here for it.
  void defer_load(const CallSites::Saved& saved) { deferred_.push_back(saved); }
  // The communicator once why_not made it, else NULL.
  qc_comm_t comm() const { return comm_; }
  // Waits for the side stream's work (barrier, shutdown, a checkpoint).
  void synchronize();
  // qc_comm_get_async_error: "" while the group is healthy.
  std::string async_error();

  std::mutex& mutex() { return mutex_; }

 private:
  void make(const c10::Device& device);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int size_;
  double timeout_seconds_;
  size_t max_sites_;
  std::mutex mutex_;  // one qc call on the communicator at a time
  qc_comm_t comm_ = nullptr;
  std::optional<c10::Device> device_;
  std::optional<c10::Stream> side_;
  std::unique_ptr<CallSites> sites_;
  std::vector<std::pair<std::string, qc_policy_t>> policies_;
  std::vector<CallSites::Saved> deferred_;
  std::string unavailable_;  // why this qc cannot make the communicator
};

}  // namespace qc_torch
