// A stand-in for the CUDA runtime in the unit tests (qc::DeviceMemory): its
// "device" blocks are host memory it hands out, so code that tells device
// from host pointers and copies between them runs without a GPU. It counts
// the copies and records each one's stream. One instance per thread.
#ifndef QC_TESTS_UNIT_FAKE_DEVICE_H
#define QC_TESTS_UNIT_FAKE_DEVICE_H

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "core/host_staging.h"

namespace qcfake {

class FakeDevice final : public qc::DeviceMemory {
 public:
  // A "device" block of `bytes`, filled with `fill`.
  void* alloc(size_t bytes, unsigned char fill = 0xEE) const {
    blocks_.emplace_back(bytes == 0 ? 1 : bytes, fill);
    return blocks_.back().data();
  }
  // A device block holding `host`'s bytes.
  void* upload(const std::vector<uint8_t>& host) {
    void* p = alloc(host.size());
    std::memcpy(p, host.data(), host.size());
    return p;
  }
  std::vector<uint8_t> download(const void* p, size_t bytes) const {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + bytes);
  }

  bool is_device(const void* p) const override { return block_of(p, 1) != nullptr; }

  qc::Status to_host(void* dst, const void* src, size_t bytes, void* stream) const override {
    return copy("to_host", dst, src, bytes, stream, fail_to_host, /*src_on_device=*/true);
  }
  qc::Status to_device(void* dst, const void* src, size_t bytes, void* stream) const override {
    return copy("to_device", dst, src, bytes, stream, fail_to_device, /*src_on_device=*/false);
  }
  qc::Status alloc_host(size_t bytes, void** p) const override {
    ++host_allocations;
    ++live_host;
    *p = std::malloc(bytes == 0 ? 1 : bytes);
    return qc::Status::ok();
  }
  void free_host(void* p) const override {
    --live_host;
    std::free(p);
  }
  qc::Status alloc_device(size_t bytes, void** p) const override {
    ++live_device;
    *p = alloc(bytes);
    return qc::Status::ok();
  }
  void free_device(void* p) const override {
    --live_device;
    (void)p;  // blocks live as long as the fake
  }

  // Events: the fake's streams run their work at once, so an event is only
  // bookkeeping; what matters is who recorded, waited for or freed what.
  qc::Status create_event(void** event) const override {
    events_.push_back(Event{});
    *event = &events_.back();
    ++live_events;
    return qc::Status::ok();
  }
  void destroy_event(void* event) const override {
    static_cast<Event*>(event)->destroyed = true;
    --live_events;
  }
  qc::Status record_event(void* event, void* stream) const override {
    static_cast<Event*>(event)->stream = stream;
    static_cast<Event*>(event)->queried = false;
    ++event_records;
    return qc::Status::ok();
  }
  qc::Status stream_wait_event(void* stream, void* event) const override {
    stream_waits.push_back({stream, static_cast<Event*>(event)->stream});
    return qc::Status::ok();
  }
  // Each host wait's first query is recorded; with events_never_finish the
  // work never finishes (a peer that failed before its part).
  qc::Status query_event(void* event, bool* done) const override {
    auto* e = static_cast<Event*>(event);
    if (!e->queried) host_waits.push_back(e->stream);
    e->queried = !events_never_finish;
    *done = !events_never_finish;
    return qc::Status::ok();
  }
  bool events_never_finish = false;

  bool fail_to_host = false;
  bool fail_to_device = false;
  mutable int copies_to_host = 0;
  mutable int copies_to_device = 0;
  mutable size_t bytes_to_host = 0;
  mutable size_t bytes_to_device = 0;
  mutable size_t largest_copy = 0;  // bytes, either way
  mutable std::atomic<int> live_device{0};
  mutable int host_allocations = 0;
  mutable std::atomic<int> live_host{0};
  mutable std::vector<void*> streams;  // the stream of every copy
  mutable int live_events = 0;
  mutable int event_records = 0;
  // (waiting stream, stream the event was recorded on) of each device wait.
  mutable std::vector<std::pair<void*, void*>> stream_waits;
  // The stream each host wait's event was recorded on.
  mutable std::vector<void*> host_waits;

 private:
  const std::vector<unsigned char>* block_of(const void* p, size_t bytes) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const auto& b : blocks_) {
      const auto lo = reinterpret_cast<uintptr_t>(b.data());
      if (a >= lo && a + bytes <= lo + b.size()) return &b;
    }
    return nullptr;
  }

  qc::Status copy(const char* what, void* dst, const void* src, size_t bytes, void* stream,
                  bool fail, bool src_on_device) const {
    streams.push_back(stream);
    ++(src_on_device ? copies_to_host : copies_to_device);
    (src_on_device ? bytes_to_host : bytes_to_device) += bytes;
    if (bytes > largest_copy) largest_copy = bytes;
    if (fail) return qc::internal_error(std::string("fake ") + what + " failed");
    const void* dev = src_on_device ? src : dst;
    const void* host = src_on_device ? dst : src;
    if (block_of(dev, bytes) == nullptr) ADD_FAILURE() << what << ": not " << bytes << " device bytes";
    if (is_device(host)) ADD_FAILURE() << what << ": the host side is device memory";
    std::memcpy(dst, src, bytes);
    return qc::Status::ok();
  }

  struct Event {
    void* stream = nullptr;
    bool destroyed = false;
    bool queried = false;  // since its last record
  };
  mutable std::deque<std::vector<unsigned char>> blocks_;  // never moved: a deque
  mutable std::deque<Event> events_;
};

}  // namespace qcfake

#endif  // QC_TESTS_UNIT_FAKE_DEVICE_H
