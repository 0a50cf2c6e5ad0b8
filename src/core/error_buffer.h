// Error-feedback residuals for one tensor (paper 000 Alg. 1's E).
#pragma once

#include <vector>

#include "core/status.h"

struct qc_error_buffer_s {
  qc_comm_t comm = nullptr;  // the communicator it belongs to; nullptr: any (emulation)
  std::vector<float> residual;
};

namespace qc {

// Checkpoint image: a 32-byte little-endian header (magic "QCEB", format
// version, reserved, element count, FNV-1a 64 checksum of the payload) and
// the residuals as little-endian float32.
constexpr size_t kErrorBufferHeaderBytes = 32;

size_t error_buffer_image_size(const qc_error_buffer_s& buffer);
void save_error_buffer(const qc_error_buffer_s& buffer, uint8_t* dst);
Status load_error_buffer(qc_error_buffer_s* buffer, const uint8_t* src, size_t size);
double error_buffer_norm(const qc_error_buffer_s& buffer);

uint64_t fnv1a64(const void* data, size_t size, uint64_t hash = 0xcbf29ce484222325ull);

}  // namespace qc
