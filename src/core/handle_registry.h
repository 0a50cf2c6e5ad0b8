// The registry of live handles: every qc_comm_s and qc_error_buffer_s that
// exists is in it, from its constructor to its destructor.
//
// Why global state: a C caller holds nothing but a pointer, and a pointer
// that was destroyed (or never came from qc) looks like any other. Without a
// record of what qc handed out, qc_comm_rank(destroyed_comm, ...) or a second
// qc_comm_destroy is a use-after-free inside the library, i.e. a crash or
// silent memory corruption far from the mistake. With it, every entry point
// that takes a handle answers QC_ERROR_INVALID_ARGUMENT with a message that
// names the argument (qc.h: "nothing aborts the process"). The set must be
// process-wide because handles are: any thread may pass any handle.
//
// Cost: one mutex and one hash lookup per call that takes a handle (and one
// insert / erase per create / destroy), which is nothing next to a
// collective. Limit: memory that a new handle of the same kind reuses after
// a destroy is live again, so a stale pointer that happens to equal a new
// handle is not detected (as with any allocator-based check).
//
// Header-only: the two registries are function-local statics created on
// first use and never destroyed, so a handle destroyed during static
// destruction (or by a thread still running at exit) still finds its
// registry.
#pragma once

#include <mutex>
#include <unordered_set>

namespace qc {

class HandleRegistry {
 public:
  void add(const void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(handle);
  }
  // Forgets `handle`; false when it was not live (destroyed twice, foreign).
  bool remove(const void* handle) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.erase(handle) != 0;
  }
  bool contains(const void* handle) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(handle) != 0;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_set<const void*> live_;
};

// Communicators (qc_comm_s) and error buffers (qc_error_buffer_s) are kept
// apart, so that one passed as the other is not taken for live.
inline HandleRegistry& live_communicators() {
  static HandleRegistry* registry = new HandleRegistry();  // never destroyed: see above
  return *registry;
}

inline HandleRegistry& live_error_buffers() {
  static HandleRegistry* registry = new HandleRegistry();  // never destroyed: see above
  return *registry;
}

}  // namespace qc
