#include "core/communicator.h"

#include <string>

#include "cpu/codec_kernels.h"

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
  // The kernels' fixed order (cpu/codec_kernels.h): the same bits on every ISA.
  return cpu::kernels().squared_norm(x, count);
}

}  // namespace qc
