// Test-only: the object a handle names (src/core/handle_table.h), for tests
// that call the internal drivers or replace a communicator's transport. The
// lease is released at once: the test owns the handle and destroys it only
// after it is done with the object. NULL gives NULL.
#pragma once

#include <stdexcept>

#include "core/api_checks.h"
#include "core/communicator.h"
#include "core/error_buffer.h"

namespace qct {

template <typename T>
T* object_of(qc::HandleTable<T>& table, const void* handle) {
  if (handle == nullptr) return nullptr;
  auto lease = table.lease(qc::handle_value(handle), /*collective=*/false);
  if (!lease) throw std::invalid_argument("qct::internals_of: not a live handle");
  return lease.get();
}

inline qc::Communicator* internals_of(qc_comm_t comm) {
  return object_of(qc::live_communicators(), comm);
}

inline qc::ErrorBuffer* internals_of(qc_error_buffer_t error_buffer) {
  return object_of(qc::live_error_buffers(), error_buffer);
}

}  // namespace qct
