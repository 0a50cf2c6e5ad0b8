// qc_work.cpp - see qc_work.h.
#include "qc_work.h"

#include <c10/core/StreamGuard.h>

#include <stdexcept>
#include <string>

namespace qc_torch {

QcWork::QcWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs,
               std::vector<c10::Device> devices)
    : c10d::Work(rank, op),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::move(devices))) {}

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

namespace qc_torch {

void QcWork::finish_on_stream(CudaGroup& group) {
  device_ = &group;
  const c10::Stream side = group.side();
  // The copy-backs and factors run on the side stream, after qc's calls;
  // the Future records its event there (it records on the current stream).
  c10::StreamGuard on_side(side);
  std::exception_ptr failure;
  try {
    for (auto& step : after_) step();
    for (const auto& t : keep_) group.used_on_side(t);
    for (const auto& t : outputs_) group.used_on_side(t);
  } catch (const std::exception& e) {
    failure = std::make_exception_ptr(
        std::runtime_error(std::string("qc: copying the result back failed: ") + e.what()));
  }
  keep_.clear();
  after_.clear();
  done_ = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
  done_->record(side);
  if (failure) {
    finish(failure);
    future_->setError(failure);
    return;
  }
  future_->markCompleted(c10::IValue(outputs_));
  finish();
}

bool QcWork::wait(std::chrono::milliseconds timeout) {
  if (device_ == nullptr) return c10d::Work::wait(timeout);
  if (exception()) std::rethrow_exception(exception());
  done_->block(device_->current());
  const std::string error = device_->async_error();
  if (!error.empty()) throw std::runtime_error(error);
  return true;
}

bool QcWork::isCompleted() {
  if (device_ == nullptr) return c10d::Work::isCompleted();
  return exception() != nullptr || done_->query();
}

}  // namespace qc_torch
