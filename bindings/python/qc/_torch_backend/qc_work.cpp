// qc_work.cpp - see qc_work.h.
#include "qc_work.h"

#include <stdexcept>
#include <string>

namespace qc_torch {

QcWork::QcWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, op),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

QcWork::~QcWork() {
  // complete() freed them; a Work dropped before it ran (start failed)
  // still releases the handles (the requests themselves run to the end).
  for (qc_request_t r : requests_) qc_request_free(r);
}

void QcWork::add_request(qc_request_t request, qc_error_buffer_t residuals) {
  requests_.push_back(request);
  residuals_.push_back(residuals);
}

void QcWork::complete(CallSites& sites) {
  std::string error;
  for (size_t i = 0; i < requests_.size(); ++i) {
    const qc_status_t status = qc_request_wait(requests_[i]);
    if (status != QC_SUCCESS && error.empty()) {
      error = std::string("qc: ") + qc_status_string(status) + ": " + qc_last_error();
    }
    qc_request_free(requests_[i]);
    sites.release(residuals_[i]);
  }
  requests_.clear();
  if (error.empty()) {
    try {
      for (auto& step : after_) step();
    } catch (const std::exception& e) {
      error = std::string("qc: copying the result back failed: ") + e.what();
    }
  }
  keep_.clear();
  after_.clear();
  std::exception_ptr failure =
      error.empty() ? nullptr : std::make_exception_ptr(std::runtime_error(error));
  finish(failure);
  if (failure) {
    future_->setError(failure);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

}  // namespace qc_torch
