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
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "call_sites.h"
#include "qc.h"

namespace qc_torch {

class QcWork : public c10d::Work {
 public:
  QcWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs);
  ~QcWork() override;

  // Takes a started request; `residuals` (or NULL) goes back to `sites`
  // when it completes.
  void add_request(qc_request_t request, qc_error_buffer_t residuals);
  void keep_alive(const at::Tensor& tensor) { keep_.push_back(tensor); }
  // Runs after every request succeeded, before the Work is finished.
  void after_success(std::function<void()> step) { after_.push_back(std::move(step)); }
  bool empty() const { return requests_.empty(); }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

  // Completer thread only: wait for the requests, then finish.
  void complete(CallSites& sites);

 private:
  std::vector<qc_request_t> requests_;
  std::vector<qc_error_buffer_t> residuals_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  std::vector<std::function<void()>> after_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace qc_torch
