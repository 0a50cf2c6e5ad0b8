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
  // Four partial sums: independent chains the compiler can overlap.
  double a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    a += double(x[i]) * x[i];
    b += double(x[i + 1]) * x[i + 1];
    c += double(x[i + 2]) * x[i + 2];
    d += double(x[i + 3]) * x[i + 3];
  }
  for (; i < count; ++i) a += double(x[i]) * x[i];
  return (a + b) + (c + d);
}

}  // namespace qc
