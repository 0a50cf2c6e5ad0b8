// qc_comm_save_state / qc_comm_load_state: a communicator's layer call
// counts in a checkpoint image (core/comm_state.h).
#include <string>

#include "core/api_checks.h"
#include "core/api_guard.h"
#include "core/comm_state.h"
#include "core/communicator.h"

using namespace qc;

extern "C" {

QC_API qc_status_t qc_comm_save_state(qc_comm_t comm, void* dst, size_t capacity, size_t* size) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    QC_RETURN_IF_ERROR(require(size, "size"));
    // The requests started before count, as they do on every other rank.
    c->requests.drain();
    const size_t need = comm_state_image_size(c->layer_calls);
    *size = need;
    if (dst == nullptr) return Status::ok();
    QC_RETURN_IF_ERROR(require_host_memory(dst, "dst"));
    if (capacity < need) {
      return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                              " bytes) is too small; the image needs " + std::to_string(need));
    }
    save_comm_state(c->layer_calls, static_cast<uint8_t*>(dst));
    return Status::ok();
  });
}

QC_API qc_status_t qc_comm_load_state(qc_comm_t comm, const void* src, size_t size) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    QC_RETURN_IF_ERROR(require(src, "src"));
    QC_RETURN_IF_ERROR(require_host_memory(src, "src"));
    // The requests started before run first, counted in the counts replaced.
    c->requests.drain();
    return load_comm_state(static_cast<const uint8_t*>(src), size, &c->layer_calls);
  });
}

}  // extern "C"
