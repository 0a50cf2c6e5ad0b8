// The tables of live handles: a qc_comm_t or qc_error_buffer_t is a number
// that names an entry here, never the address of the object.
//
// Why numbers and not addresses: a C caller holds nothing but the handle,
// and a handle that was destroyed looks like any other. With addresses, a
// destroyed handle whose memory malloc gave to a new object of the same kind
// would be live again, and a stale qc_comm_destroy would destroy someone
// else's communicator. Handle values come from one process-wide counter and
// are never reused, so a destroyed handle stays invalid forever, whatever the
// allocator does (DESIGN.md, "The C ABI: rules").
//
// Why leases: an entry point that uses an object holds a Lease for the whole
// call, and a destroy waits until no lease is left, so an object is never
// freed under a call running on another thread (a watchdog destroying a
// communicator whose collective is blocked). How a destroy makes those calls
// end is the caller's business (qc_comm_destroy aborts the transport;
// qc_error_buffer_destroy refuses while the buffer is in use).
//
// Why global state: handles are process-wide, any thread may pass any
// handle. One mutex per table; its cost is a hash lookup per call that takes
// a handle, nothing next to a collective. The tables are function-local
// statics that are never destroyed, so a handle destroyed during static
// destruction (or by a thread still running at exit) still finds its table.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace qc {

// The next handle value: odd, so it never equals an aligned object address a
// caller might pass by mistake, and never 0 (NULL). Shared by every table,
// so a communicator passed as an error buffer is never taken for a live one.
// On 32-bit platforms values repeat after 2^31 handles.
inline uintptr_t next_handle_value() {
  static std::atomic<uintptr_t> counter{0};
  return (counter.fetch_add(1, std::memory_order_relaxed) + 1) * 2 + 1;
}

template <typename T>
class HandleTable {
  struct Entry {
    std::unique_ptr<T> object;
    int leases = 0;             // calls now using the object
    int collective_leases = 0;  // those of them that may wait for peers
    bool closing = false;       // a destroy has begun: no new leases
  };

 public:
  // Keeps a live object from being freed while a call uses it.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept {
      if (this != &other) {
        release();
        std::swap(table_, other.table_);
        std::swap(handle_, other.handle_);
        std::swap(object_, other.object_);
        std::swap(collective_, other.collective_);
      }
      return *this;
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }

    T* get() const { return object_; }
    T* operator->() const { return object_; }
    T& operator*() const { return *object_; }
    explicit operator bool() const { return object_ != nullptr; }

   private:
    friend class HandleTable;
    void release() noexcept {
      if (table_ != nullptr) table_->release(handle_, collective_);
      table_ = nullptr;
      object_ = nullptr;
    }
    HandleTable* table_ = nullptr;
    uintptr_t handle_ = 0;
    T* object_ = nullptr;
    bool collective_ = false;
  };

  // What a destroy found when it closed an entry.
  enum class Use { kNotLive, kIdle, kQueries, kCollectives };

  // Takes ownership of `object`; returns its new handle value.
  uintptr_t add(std::unique_ptr<T> object) {
    const uintptr_t handle = next_handle_value();
    std::lock_guard<std::mutex> lock(mutex_);
    live_[handle].object = std::move(object);
    return handle;
  }

  // A lease on the object of `handle`, or an empty one when the handle is
  // not live (destroyed, being destroyed, or never made here) or, for an
  // `exclusive` lease, when another call holds one (*busy is set then).
  // `collective`: the call may wait for peers, which a destroy must
  // interrupt.
  Lease lease(uintptr_t handle, bool collective, bool exclusive = false, bool* busy = nullptr) {
    Lease out;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(handle);
    if (it == live_.end() || it->second.closing) return out;
    if (exclusive && it->second.leases > 0) {
      if (busy != nullptr) *busy = true;
      return out;
    }
    ++it->second.leases;
    if (collective) ++it->second.collective_leases;
    out.table_ = this;
    out.handle_ = handle;
    out.object_ = it->second.object.get();
    out.collective_ = collective;
    return out;
  }

  // First half of a destroy: no new lease is given from here on. *object
  // gets the object (still owned here) so the caller can interrupt the
  // calls that use it. kNotLive: destroyed already, or never made here.
  Use close(uintptr_t handle, T** object) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(handle);
    if (it == live_.end() || it->second.closing) return Use::kNotLive;
    it->second.closing = true;
    *object = it->second.object.get();
    if (it->second.collective_leases > 0) return Use::kCollectives;
    return it->second.leases > 0 ? Use::kQueries : Use::kIdle;
  }

  // How many calls hold a lease on `handle` now (diagnostics and tests).
  int leases(uintptr_t handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(handle);
    return it == live_.end() ? 0 : it->second.leases;
  }

  // Undoes close() for a destroy that refuses to go on.
  void reopen(uintptr_t handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(handle);
    if (it != live_.end()) it->second.closing = false;
  }

  // Second half of a destroy: waits until the last lease is released, then
  // hands the object over (the caller frees it, outside the table's lock).
  std::unique_ptr<T> take_when_unused(uintptr_t handle) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = live_.find(handle);
    if (it == live_.end()) return nullptr;
    // A reference, not the iterator: an add() while this waits may rehash.
    Entry& entry = it->second;
    released_.wait(lock, [&] { return entry.leases == 0; });
    std::unique_ptr<T> object = std::move(entry.object);
    live_.erase(handle);
    return object;
  }

 private:
  void release(uintptr_t handle, bool collective) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(handle);
    if (it == live_.end()) return;
    --it->second.leases;
    if (collective) --it->second.collective_leases;
    if (it->second.closing && it->second.leases == 0) released_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable released_;
  std::unordered_map<uintptr_t, Entry> live_;
};

struct Communicator;
struct ErrorBuffer;

HandleTable<Communicator>& live_communicators();
HandleTable<ErrorBuffer>& live_error_buffers();

}  // namespace qc
