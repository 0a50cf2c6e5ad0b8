// The process-wide handle tables (handle_table.h) and the entry points' way
// into them (api_checks.h).
#include "core/handle_table.h"

#include <string>

#include "core/api_checks.h"
#include "core/communicator.h"
#include "core/error_buffer.h"
#include "core/log.h"

namespace qc {

// Never destroyed: see handle_table.h.
HandleTable<Communicator>& live_communicators() {
  static auto* table = new HandleTable<Communicator>();
  return *table;
}

HandleTable<ErrorBuffer>& live_error_buffers() {
  static auto* table = new HandleTable<ErrorBuffer>();
  return *table;
}

Status lease_comm(qc_comm_t comm, bool collective, CommLease* out, const char* arg) {
  QC_RETURN_IF_ERROR(require(comm, arg));
  *out = live_communicators().lease(handle_value(comm), collective);
  if (*out) {
    set_log_rank((*out)->transport->rank());  // this call's log lines name its rank
    return Status::ok();
  }
  return invalid_argument(std::string("argument '") + arg +
                          "' is not a live qc communicator (destroyed, or not created by "
                          "qc_comm_create*)");
}

Status lease_optional_error_buffer(qc_error_buffer_t error_buffer, const std::string& arg,
                                   ErrorBufferLease* out) {
  if (error_buffer == nullptr) return Status::ok();
  // Exclusive: the residuals serve one call at a time (a norm taken while a
  // collective swaps them in would read freed memory).
  bool busy = false;
  *out = live_error_buffers().lease(handle_value(error_buffer), /*collective=*/false,
                                    /*exclusive=*/true, &busy);
  if (*out) return Status::ok();
  if (busy) {
    return invalid_argument("argument '" + arg +
                            "' is in use by a call running on another thread; an error buffer "
                            "serves one call at a time");
  }
  return invalid_argument("argument '" + arg +
                          "' is not a live qc error buffer (destroyed, or not created by "
                          "qc_error_buffer_create)");
}

Status lease_error_buffer(qc_error_buffer_t error_buffer, ErrorBufferLease* out, const char* arg) {
  QC_RETURN_IF_ERROR(require(error_buffer, arg));
  return lease_optional_error_buffer(error_buffer, arg, out);
}

}  // namespace qc
