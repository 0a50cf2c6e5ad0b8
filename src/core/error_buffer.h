// Error-feedback residuals for one tensor (paper 000 Alg. 1's E), and what
// they belong to.
//
// Every algorithm encodes each element at most once per rank and call (ring:
// the partial sum of its chunk at the hop that rank forwards it, or the
// owner's final encode; recursive doubling and tree likewise; SRA: the
// worker's contribution to another rank's chunk, or the server's sum of its
// own chunk; native: the rank's codes on the shared grid). So one residual
// per element is enough: slot i holds the error of this rank's one encode of
// element i. For SRA that makes slot i the worker residual of paper 004 §5
// outside the rank's chunk and the server residual inside it (the worker
// residual of the rank's own chunk is always zero: a rank never encodes data
// it keeps).
//
// Which encode a slot belongs to depends on the rank, the group size, the
// algorithm and the codec grid, so the buffer records them (the binding).
// Rank and size are fixed once known; a changed algorithm or codec makes the
// residuals meaningless, so they are reset (residual_binding.cpp).
#pragma once

#include <vector>

#include "core/device_residuals.h"
#include "core/error_buffer_grid.h"
#include "core/fnv1a.h"
#include "core/handle_table.h"
#include "core/status.h"

namespace qc {

// What a qc_error_buffer_t names: owned by live_error_buffers()
// (core/handle_table.h) from qc_error_buffer_create to
// qc_error_buffer_destroy; the entry points reach it through a lease.
struct ErrorBuffer {
  ErrorBuffer() = default;
  ErrorBuffer(const ErrorBuffer&) = delete;
  ErrorBuffer& operator=(const ErrorBuffer&) = delete;

  // Rank and group size, -1 until known (at creation from the communicator,
  // or at first use for emulation buffers).
  int rank = -1;
  int size = -1;
  bool bound = false;  // grid is valid: the buffer has been used (or loaded)
  qc::ErrorBufferGrid grid;
  std::vector<float> residual;
  // The residuals of device calls stay on the device between calls; while
  // device.newer(), `residual` is stale: residuals_to_host updates it.
  qc::DeviceResiduals device;
};

// Checkpoint image, little-endian:
//    0 magic "QCEB"          4 u32 format version (2)
//    8 u64 element count    16 i32 rank (-1: unknown)   20 i32 group size
//   24 i32 algorithm        28 i32 codec   32 i32 bits   36 i32 bucket size
//   40 i32 group_size       44 u32 flags (bit 0: bound; others zero)
//   48 u64 FNV-1a 64 of bytes [0, 48) and of the payload
//   56 payload: the residuals as float32
constexpr size_t kErrorBufferHeaderBytes = 56;

size_t error_buffer_image_size(const ErrorBuffer& buffer);
void save_error_buffer(const ErrorBuffer& buffer, uint8_t* dst);
// Checks everything before changing anything: on failure the buffer is as it was.
Status load_error_buffer(ErrorBuffer* buffer, const uint8_t* src, size_t size);
double error_buffer_norm(const ErrorBuffer& buffer);
// Before the host reads `residual`: the device's residuals, when newer.
Status residuals_to_host(ErrorBuffer* buffer);

}  // namespace qc
