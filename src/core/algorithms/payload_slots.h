// What the stream-ordered algorithms (the *_enqueued.cpp files) share: the
// payload slots they lay out in the call's device payload memory, and the
// groups of device sends and receives they enqueue.
//
// Every payload of such a call has a size fixed by the call's shape, so each
// algorithm lays its slots out before the call (to reserve the memory, with
// the codec) and again in the call (with the context), by one function of
// the same arguments: the two layouts cannot drift apart. Nothing is awaited
// between steps: the stream runs a slot's decode before the next step's
// encode or receive overwrites it, so a slot may serve several steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/codecs/codec.h"
#include "core/collective_context.h"
#include "core/transports/transport.h"

namespace qc {

// The payload bytes of a block of `count` values under the call's codec.
using PayloadSizeOf = std::function<Status(size_t count, size_t* bytes)>;
PayloadSizeOf payload_size_of(const Codec& codec);
PayloadSizeOf payload_size_of(const CollectiveContext& ctx);

class PayloadSlots {
 public:
  explicit PayloadSlots(PayloadSizeOf size_of) : size_of_(std::move(size_of)) {}

  // A slot for the payload of `count` values; *index names it.
  Status add(size_t count, size_t* index);
  // The payload of `count` values, as add() sizes it.
  Status payload(size_t count, size_t* bytes) const { return size_of_(count, bytes); }

  size_t size() const { return bytes_.size(); }
  // The payload the slot was made for.
  size_t bytes(size_t index) const { return bytes_[index]; }
  // The device memory the slots take in all (each rounded to device_payload_slot).
  size_t total() const { return total_; }

  // Places the slots at the start of the call's device payload memory;
  // an internal error if they do not fit in what was reserved.
  Status bind(const CollectiveContext& ctx, const char* algorithm);
  uint8_t* at(size_t index) const { return base_ + offsets_[index]; }

 private:
  PayloadSizeOf size_of_;
  std::vector<size_t> bytes_;
  std::vector<size_t> offsets_;
  size_t total_ = 0;
  uint8_t* base_ = nullptr;
};

// One group of device sends and receives. Empty payloads (blocks of no
// values) are left out; both sides leave them out alike, since every size
// is the call's.
class DeviceGroup {
 public:
  void send(int peer, const uint8_t* data, size_t bytes);
  void recv(int peer, uint8_t* data, size_t bytes);
  // Every slot of [first, last), each its own transfer.
  void send_slots(int peer, const PayloadSlots& slots, size_t first, size_t last);
  void recv_slots(int peer, const PayloadSlots& slots, size_t first, size_t last);
  // Enqueues the group on the call's stream (nothing when empty) and
  // starts a new one.
  Status enqueue(CollectiveContext& ctx);

 private:
  std::vector<DeviceTransfer> ops_;
};

// The allgathers' end: slot b holds block b of `nblocks` (partition.h's
// blocks of `count` values), decoded into data's range of it, every block.
Status decode_blocks_enqueued(CollectiveContext& ctx, const PayloadSlots& slots, float* data,
                              size_t count, size_t nblocks);

}  // namespace qc
