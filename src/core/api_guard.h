// The one wrapper around every exported function: runs the body, records a
// failure's message for qc_last_error(), and stops every C++ exception at the
// ABI boundary.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "core/status.h"

namespace qc {

template <typename Body>
qc_status_t api_call(const char* function, Body&& body) noexcept {
  Status status;
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
    set_last_error(std::string(function) + ": " + status.message());
  } catch (...) {
    // Out of memory while formatting the message: the status still reports it.
  }
  return status.code();
}

}  // namespace qc

#define QC_API_CALL(body) ::qc::api_call(__func__, [&]() -> ::qc::Status body)
