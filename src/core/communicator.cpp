#include "core/communicator.h"

#include <string>

#include "core/executors/input_norm.h"

namespace qc {
namespace {

Status broken_status(const Status& cause) {
  return Status(cause.code(), "the communicator is broken by an earlier failure (" +
                                  cause.message() +
                                  "); destroy it and create a new one");
}

}  // namespace

Status check_healthy(const Communicator* comm) {
  Status failure = comm->transport->failure();
  return failure ? Status::ok() : broken_status(failure);
}

double input_norm_for_stats(const Communicator& comm, const float* x, size_t count) {
  if (comm.emulated) return 0.0;
  // InputNorm's slices and order, wherever the slices run.
  return InputNorm::of(x, count);
}

}  // namespace qc
