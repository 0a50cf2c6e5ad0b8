#include "core/status.h"

namespace qc {
namespace {
// Thread-local on purpose: a message describes only the calling thread's last
// qc call (NCCL's process-global buffer is the cautionary tale).
thread_local std::string t_last_error;
}  // namespace

void set_last_error(const std::string& message) { t_last_error = message; }
const char* last_error() { return t_last_error.c_str(); }

}  // namespace qc
