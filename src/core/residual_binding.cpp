#include "core/residual_binding.h"

#include <string>

#include "core/log.h"
#include "core/policy.h"

namespace qc {
namespace {

std::string describe_grid(const ErrorBufferGrid& g) {
  if (g.codec == kFusedGridCodec) {
    return std::string("algorithm ") + algorithm_name(g.algorithm) +
           ", a fused layout (qc_allreduce_segments) with layout hash " +
           std::to_string(g.bits) + "/" + std::to_string(g.bucket_size);
  }
  return std::string("algorithm ") + algorithm_name(g.algorithm) + ", codec " +
         codec_name(g.codec) + " (bits " + std::to_string(g.bits) + ", bucket " +
         std::to_string(g.bucket_size) + ", group size " + std::to_string(g.group_size) + ")";
}

}  // namespace

Status check_error_buffer_binding(const ErrorBuffer& eb, int rank, int size, size_t count) {
  if (eb.residual.size() != count) {
    return mismatch("argument 'error_buffer' holds " + std::to_string(eb.residual.size()) +
                    " residuals but the call reduces " + std::to_string(count) + " elements");
  }
  if (eb.rank >= 0 && (eb.rank != rank || eb.size != size)) {
    return mismatch("argument 'error_buffer' belongs to rank " + std::to_string(eb.rank) +
                    " of a group of " + std::to_string(eb.size) + " but is used by rank " +
                    std::to_string(rank) + " of a group of " + std::to_string(size));
  }
  return Status::ok();
}

std::string layer_label(const char* layer) {
  return "layer '" + std::string(layer != nullptr ? layer : "*") + "'";
}

bool residuals_reset(const ErrorBuffer& eb, const ErrorBufferGrid& grid,
                     const std::string& what) {
  if (!eb.bound || eb.grid == grid) return false;
  log_warning(what + ": the error buffer's residuals were computed with " +
              describe_grid(eb.grid) + " and this call uses " + describe_grid(grid) +
              "; they are reset to zero");
  return true;
}

Status load_residuals(Communicator* comm, ErrorBuffer& eb, const ErrorBufferGrid& grid,
                      size_t count, const std::string& what, const float** lazy_source) {
  if (lazy_source != nullptr) *lazy_source = nullptr;
  Status fits = check_error_buffer_binding(eb, comm->transport->rank(), comm->transport->size(),
                                          count);
  // A device call left the newest residuals on the device.
  if (fits) fits = residuals_to_host(&eb);
  if (!fits) {
    // The peers are already in (or about to enter) this call: break the
    // group so that they fail at once instead of waiting for this rank
    // until the timeout (qc.h: after a MISMATCH the communicator is broken).
    comm->transport->abort(fits);
    return fits;
  }
  std::vector<float>& residual = comm->residual_work;
  if (residuals_reset(eb, grid, what)) {
    residual.assign(count, 0.0f);
  } else if (lazy_source != nullptr) {
    residual.resize(count);
    *lazy_source = eb.residual.data();
  } else {
    residual = eb.residual;
  }
  return Status::ok();
}

void bind_error_buffer(const Communicator* comm, ErrorBuffer* eb, const ErrorBufferGrid& grid) {
  eb->rank = comm->transport->rank();
  eb->size = comm->transport->size();
  eb->bound = true;
  eb->grid = grid;
}

void commit_residuals(Communicator* comm, ErrorBuffer* eb, const ErrorBufferGrid& grid) {
  eb->residual.swap(comm->residual_work);
  bind_error_buffer(comm, eb, grid);
}

Status device_residuals_for(const Communicator* comm, const DeviceMemory& mem,
                            const DeviceMessageCodec& device_codec, ErrorBuffer* eb,
                            const ErrorBufferGrid& grid, size_t count, const char* layer,
                            void* stream, float** work) {
  QC_RETURN_IF_ERROR(check_error_buffer_binding(*eb, comm->transport->rank(),
                                                comm->transport->size(), count));
  const bool reset = residuals_reset(*eb, grid, layer_label(layer));
  Status s = eb->device.begin(mem, device_codec, eb->residual, reset, stream, work);
  if (!s) {
    return Status(s.code(), "rank " + std::to_string(comm->transport->rank()) +
                                " could not load its residuals on the device: " + s.message());
  }
  return s;
}

}  // namespace qc
