// Error buffers meet calls: whether a buffer fits a call, and the working
// copy of its residuals a call runs on (comm->residual_work on the host, a
// device block for device calls), which becomes the buffer's only when the
// call succeeds (error_buffer.h says what a binding is).
#pragma once

#include <cstddef>
#include <string>

#include "core/codecs/device_message_codec.h"
#include "core/communicator.h"
#include "core/device_memory.h"
#include "core/error_buffer.h"

namespace qc {

// An error buffer fits a call when it has the call's count and belongs to
// this rank of a group of this size (or has not met a group yet).
Status check_error_buffer_binding(const ErrorBuffer& eb, int rank, int size, size_t count);

// How warnings name a single-layer call.
std::string layer_label(const char* layer);

// Whether a call on `grid` starts `eb` from zero: its residuals were
// computed on another grid (they would be noise), said in a warning naming
// `what`.
bool residuals_reset(const ErrorBuffer& eb, const ErrorBufferGrid& grid, const std::string& what);

// Copies the error buffer's residuals into comm->residual_work for a call
// on `grid`, after checking that the buffer fits; a buffer computed on
// another grid starts from zero, with a warning naming `what`. With
// `lazy_source`, nothing is copied where the buffer's residuals are kept:
// *lazy_source points at them, for CollectiveContext::set_residual_source
// (null when the call starts from zero, already in residual_work).
Status load_residuals(Communicator* comm, ErrorBuffer& eb, const ErrorBufferGrid& grid,
                      size_t count, const std::string& what,
                      const float** lazy_source = nullptr);

// The buffer now holds residuals of this rank's encodes on `grid`.
void bind_error_buffer(const Communicator* comm, ErrorBuffer* eb, const ErrorBufferGrid& grid);

// After a successful call: the working residuals become the buffer's.
void commit_residuals(Communicator* comm, ErrorBuffer* eb, const ErrorBufferGrid& grid);

// The device twin of load_residuals: the working residuals of a device
// call on `grid`, on the device (device_residuals.h), after the same checks.
Status device_residuals_for(const Communicator* comm, const DeviceMemory& mem,
                            const DeviceMessageCodec& device_codec, ErrorBuffer* eb,
                            const ErrorBufferGrid& grid, size_t count, const char* layer,
                            void* stream, float** work);

}  // namespace qc
