// The one wrapper around every exported function: runs the body, records a
// failure's message for qc_last_error(), and stops every C++ exception at the
// ABI boundary.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "core/log.h"
#include "core/status.h"

namespace qc {

template <typename Body>
qc_status_t api_call(const char* function, Body&& body) noexcept {
  Status status;
  set_log_rank(-1);  // until the call takes a communicator (lease_comm)
  try {
    status = body();
  } catch (const std::bad_alloc&) {
    status = Status(QC_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    status = internal_error(std::string("unexpected exception: ") + e.what());
  } catch (...) {
    status = internal_error("unexpected non-standard exception");
  }
  // Like errno, a success leaves the previous failure's message in place.
  if (!status.is_ok()) try {
    std::string message = std::string(function) + ": " + status.message();
    // A failure of the group (a peer timed out, aborted, disagreed or sent
    // garbage) is worth a line in the log too; its message names the peer.
    const qc_status_t code = status.code();
    if (code == QC_ERROR_TIMEOUT || code == QC_ERROR_TRANSPORT || code == QC_ERROR_MISMATCH ||
        code == QC_ERROR_CORRUPT_DATA) {
      log_info(std::string(qc_status_string(code)) + " in " + message);
    }
    set_last_error(std::move(message));
  } catch (...) {
    // Out of memory while formatting the message: the status still reports it.
  }
  return status.code();
}

}  // namespace qc

#define QC_API_CALL(body) ::qc::api_call(__func__, [&]() -> ::qc::Status body)
