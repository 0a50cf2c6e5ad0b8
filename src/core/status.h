// Status: a qc_status_t with a message, the currency of every internal call.
// The core never throws across modules on purpose; functions return Status and
// the API layer turns it into the return code plus the thread's last error.
#pragma once

#include <string>
#include <utility>

#include "qc.h"

namespace qc {

class Status {
 public:
  Status() = default;
  Status(qc_status_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == QC_SUCCESS; }
  explicit operator bool() const { return is_ok(); }
  qc_status_t code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  qc_status_t code_ = QC_SUCCESS;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {QC_ERROR_INVALID_ARGUMENT, std::move(m)}; }
inline Status unsupported(std::string m) { return {QC_ERROR_UNSUPPORTED, std::move(m)}; }
inline Status mismatch(std::string m) { return {QC_ERROR_MISMATCH, std::move(m)}; }
inline Status corrupt_data(std::string m) { return {QC_ERROR_CORRUPT_DATA, std::move(m)}; }
inline Status timeout_error(std::string m) { return {QC_ERROR_TIMEOUT, std::move(m)}; }
inline Status transport_error(std::string m) { return {QC_ERROR_TRANSPORT, std::move(m)}; }
inline Status internal_error(std::string m) { return {QC_ERROR_INTERNAL, std::move(m)}; }

// Sets the calling thread's last error ("" clears it). The text is prefixed
// by the API function name by the entry guard, not here.
void set_last_error(const std::string& message);
const char* last_error();

}  // namespace qc

#define QC_RETURN_IF_ERROR(expr)          \
  do {                                    \
    ::qc::Status qc_status_tmp_ = (expr); \
    if (!qc_status_tmp_) return qc_status_tmp_; \
  } while (0)
