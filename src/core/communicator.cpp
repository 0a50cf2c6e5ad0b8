#include "core/communicator.h"

#include <string>

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

double squared_norm(const float* x, size_t count) {
  // Eight partial sums in lanes of one array: independent chains the
  // compiler vectorizes (a reduction it may not reorder otherwise), added
  // pairwise at the end, so the result does not depend on the ISA.
  constexpr size_t kLanes = 8;
  double lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lane[k] += double(x[i + k]) * double(x[i + k]);
  }
  for (; i < count; ++i) lane[0] += double(x[i]) * double(x[i]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace qc
