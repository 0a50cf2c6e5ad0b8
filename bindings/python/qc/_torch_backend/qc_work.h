// qc_work.h - a c10d::Work over qc requests (qc_iallreduce ...).
//
// A Work holds the requests of one torch call (a list of tensors may start
// several), the tensors they read and write (alive until completion), and
// what must happen after success (copying staged results back). The
// backend's completer thread runs complete(): it waits on the requests in
// order, runs the copy-backs, then marks the Work finished (what
// isCompleted and wait look at, Work's own mechanism) and completes the
// Future with the output tensors, or with the error carrying qc's message.
// DDP uses getFuture(); FSDP2 and user code use wait().
//
// On CUDA tensors (CudaGroup) there are no requests: the calls are already
// enqueued on the group's side stream when the backend calls
// finish_on_stream(), which queues the copy-backs there too, records an
// event and completes the Future on that stream (as NCCL's process group
// does). wait() then makes the caller's current stream wait for the event
// and returns without blocking the host; isCompleted() asks the event.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <c10/core/Event.h>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "call_sites.h"
#include "cuda_group.h"
#include "qc.h"

namespace qc_torch {

class QcWork : public c10d::Work {
 public:
  // devices: those of a CUDA-lane Work's outputs (its Future completes on
  // their streams), empty on the host lane.
  QcWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs,
         std::vector<c10::Device> devices = {});
  ~QcWork() override;

  // Takes a started request; `residuals` (or NULL) goes back to the
  // backend's sites when it completes.
  void add_request(qc_request_t request, qc_error_buffer_t residuals);
  void keep_alive(const at::Tensor& tensor) { keep_.push_back(tensor); }
  bool on_device() const { return device_ != nullptr; }
  // Runs after every request succeeded, before the Work is finished.
  void after_success(std::function<void()> step) { after_.push_back(std::move(step)); }
  bool empty() const { return requests_.empty(); }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

  // Completer thread only: wait for the requests, then finish.
  void complete(CallSites& sites);

  // The CUDA path: the Work's calls were enqueued on group's side stream.
  void finish_on_stream(CudaGroup& group);
  bool wait(std::chrono::milliseconds timeout) override;
  bool isCompleted() override;

 private:
  std::vector<qc_request_t> requests_;
  std::vector<qc_error_buffer_t> residuals_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  std::vector<std::function<void()>> after_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  // The CUDA path: the event after the Work's last call on the side stream.
  CudaGroup* device_ = nullptr;
  std::unique_ptr<c10::Event> done_;
};

}  // namespace qc_torch
