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
    CommLease c;
    if (comm != nullptr) QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count, sizeof(float), 1, "count", &bytes));
    auto buffer = std::make_unique<ErrorBuffer>();
    if (comm != nullptr) {
      buffer->rank = c->transport->rank();
      buffer->size = c->transport->size();
    }
    buffer->residual.assign(count, 0.0f);
    *error_buffer = reinterpret_cast<qc_error_buffer_t>(live_error_buffers().add(std::move(buffer)));
    return Status::ok();
  });
}

QC_API qc_status_t qc_error_buffer_destroy(qc_error_buffer_t error_buffer) {
  return QC_API_CALL({
    if (error_buffer == nullptr) return Status::ok();
    const uintptr_t handle = handle_value(error_buffer);
    ErrorBuffer* object = nullptr;
    // Closed first: of two destroys of one handle only one goes on.
    switch (live_error_buffers().close(handle, &object)) {
      case HandleTable<ErrorBuffer>::Use::kNotLive: {
        ErrorBufferLease none;
        return lease_error_buffer(error_buffer, &none);  // the "not live" message
      }
      case HandleTable<ErrorBuffer>::Use::kCollectives:
      case HandleTable<ErrorBuffer>::Use::kQueries:
        // A call on another thread holds it; that call may wait for peers
        // until its timeout, so this refuses rather than waits.
        live_error_buffers().reopen(handle);
        return invalid_argument(
            "argument 'error_buffer' is in use by a call running on another thread (a "
            "collective, or a query); destroy it after that call has returned");
      case HandleTable<ErrorBuffer>::Use::kIdle:
        break;
    }
    live_error_buffers().take_when_unused(handle).reset();
    return Status::ok();
  });
}

QC_API qc_status_t qc_error_buffer_reset(qc_error_buffer_t error_buffer) {
  return QC_API_CALL({
    ErrorBufferLease eb;
    QC_RETURN_IF_ERROR(lease_error_buffer(error_buffer, &eb));
    std::fill(eb->residual.begin(), eb->residual.end(), 0.0f);
    eb->device.host_changed();
    return Status::ok();
  });
}

QC_API qc_status_t qc_error_buffer_norm(qc_error_buffer_t error_buffer, double* l2_norm) {
  return QC_API_CALL({
    ErrorBufferLease eb;
    QC_RETURN_IF_ERROR(lease_error_buffer(error_buffer, &eb));
    QC_RETURN_IF_ERROR(require(l2_norm, "l2_norm"));
    QC_RETURN_IF_ERROR(residuals_to_host(eb.get()));
    *l2_norm = error_buffer_norm(*eb);
    return Status::ok();
  });
}

QC_API qc_status_t qc_error_buffer_save(qc_error_buffer_t error_buffer, void* dst,
                                        size_t capacity, size_t* size) {
  return QC_API_CALL({
    ErrorBufferLease eb;
    QC_RETURN_IF_ERROR(lease_error_buffer(error_buffer, &eb));
    QC_RETURN_IF_ERROR(require(size, "size"));
    const size_t need = error_buffer_image_size(*eb);
    *size = need;
    if (dst == nullptr) return Status::ok();
    QC_RETURN_IF_ERROR(require_host_memory(dst, "dst"));
    if (capacity < need) {
      return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                              " bytes) is too small; the image needs " + std::to_string(need));
    }
    QC_RETURN_IF_ERROR(residuals_to_host(eb.get()));
    save_error_buffer(*eb, static_cast<uint8_t*>(dst));
    return Status::ok();
  });
}

QC_API qc_status_t qc_error_buffer_load(qc_error_buffer_t error_buffer, const void* src,
                                        size_t size) {
  return QC_API_CALL({
    ErrorBufferLease eb;
    QC_RETURN_IF_ERROR(lease_error_buffer(error_buffer, &eb));
    QC_RETURN_IF_ERROR(require(src, "src"));
    QC_RETURN_IF_ERROR(require_host_memory(src, "src"));
    return load_error_buffer(eb.get(), static_cast<const uint8_t*>(src), size);
  });
}

}  // extern "C"
