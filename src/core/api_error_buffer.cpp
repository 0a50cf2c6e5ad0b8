// Entry points of the error buffers.
#include <algorithm>
#include <memory>
#include <string>

#include "core/api_checks.h"
#include "core/api_guard.h"
#include "core/communicator.h"
#include "core/error_buffer.h"

using namespace qc;

extern "C" {

QC_API qc_status_t qc_error_buffer_create(qc_comm_t comm, size_t count,
                                          qc_error_buffer_t* error_buffer) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require(error_buffer, "error_buffer"));
    if (comm != nullptr) QC_RETURN_IF_ERROR(require_comm(comm));
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count, sizeof(float), 1, "count", &bytes));
    auto buffer = std::make_unique<qc_error_buffer_s>();
    if (comm != nullptr) {
      buffer->rank = comm->transport->rank();
      buffer->size = comm->transport->size();
    }
    buffer->residual.assign(count, 0.0f);
    *error_buffer = buffer.release();
    return Status::ok();
  });
}

QC_API qc_status_t qc_error_buffer_destroy(qc_error_buffer_t error_buffer) {
  return QC_API_CALL({
    if (error_buffer == nullptr) return Status::ok();
    // Taken out of the registry first: of two destroys of one handle, only
    // one gets to delete it.
    if (!live_error_buffers().remove(error_buffer)) {
      return check_live_error_buffer(error_buffer, "error_buffer");
    }
    delete error_buffer;
    return Status::ok();
  });
}

QC_API qc_status_t qc_error_buffer_reset(qc_error_buffer_t error_buffer) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require_error_buffer(error_buffer));
    std::fill(error_buffer->residual.begin(), error_buffer->residual.end(), 0.0f);
    error_buffer->device.host_changed();
    return Status::ok();
  });
}

QC_API qc_status_t qc_error_buffer_norm(qc_error_buffer_t error_buffer, double* l2_norm) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require_error_buffer(error_buffer));
    QC_RETURN_IF_ERROR(require(l2_norm, "l2_norm"));
    QC_RETURN_IF_ERROR(residuals_to_host(error_buffer));
    *l2_norm = error_buffer_norm(*error_buffer);
    return Status::ok();
  });
}

QC_API qc_status_t qc_error_buffer_save(qc_error_buffer_t error_buffer, void* dst,
                                        size_t capacity, size_t* size) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require_error_buffer(error_buffer));
    QC_RETURN_IF_ERROR(require(size, "size"));
    const size_t need = error_buffer_image_size(*error_buffer);
    *size = need;
    if (dst == nullptr) return Status::ok();
    QC_RETURN_IF_ERROR(require_host_memory(dst, "dst"));
    if (capacity < need) {
      return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                              " bytes) is too small; the image needs " + std::to_string(need));
    }
    QC_RETURN_IF_ERROR(residuals_to_host(error_buffer));
    save_error_buffer(*error_buffer, static_cast<uint8_t*>(dst));
    return Status::ok();
  });
}

QC_API qc_status_t qc_error_buffer_load(qc_error_buffer_t error_buffer, const void* src,
                                        size_t size) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require_error_buffer(error_buffer));
    QC_RETURN_IF_ERROR(require(src, "src"));
    QC_RETURN_IF_ERROR(require_host_memory(src, "src"));
    return load_error_buffer(error_buffer, static_cast<const uint8_t*>(src), size);
  });
}

}  // extern "C"
