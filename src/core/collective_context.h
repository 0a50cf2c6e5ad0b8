// One collective call as the executors see it: who am I, how big is the
// group, encode/decode through the call's codec, and send/receive messages
// to peers. Executors (core/executors/) talk only to this class, never to a
// transport; schedules know neither.
//
// Every message starts with an envelope (24 bytes): magic "QCMG", the step
// within the call, the call's sequence number, and the call's signature (a
// hash of collective, count, dtype, op, layer, policy and the layers' call
// indices). A receiver whose
// own signature differs knows the ranks disagree: QC_ERROR_MISMATCH.
#pragma once

#include <cstdint>
#include <new>
#include <vector>

#include "core/codecs/codec.h"
#include "core/executors/input_norm.h"
#include "core/schedules/schedule.h"
#include "core/transports/transport.h"

namespace qc {

class DeviceMemory;
class DeviceMessageCodec;

constexpr size_t kEnvelopeBytes = 24;

// A message buffer: envelope space followed by the payload.
class Message {
 public:
  // Makes room for a payload of up to `capacity` bytes (keeps the allocation).
  void reserve_payload(size_t capacity) {
    // A saturated size (max_encoded_size's SIZE_MAX) fails as memory that
    // cannot be had, instead of wrapping to a small buffer.
    if (capacity > SIZE_MAX - kEnvelopeBytes) throw std::bad_alloc();
    bytes_.resize(kEnvelopeBytes + capacity);
  }
  uint8_t* payload() { return bytes_.data() + kEnvelopeBytes; }
  const uint8_t* payload() const { return bytes_.data() + kEnvelopeBytes; }
  size_t payload_capacity() const { return bytes_.size() - kEnvelopeBytes; }
  size_t payload_size() const { return payload_size_; }
  void set_payload_size(size_t size) { payload_size_ = size; }

 private:
  friend class CollectiveContext;
  std::vector<uint8_t> bytes_ = std::vector<uint8_t>(kEnvelopeBytes);
  size_t payload_size_ = 0;
};

// Buffers a communicator keeps from call to call, so a steady stream of
// collectives of one size stops allocating (and page-faulting) after the
// first. Capacity only grows; destroy the communicator to give it back.
struct Scratch {
  std::vector<Message> messages;
  std::vector<float> values;
  std::vector<float> estimate;  // the error estimate's decoded copy
  std::vector<uint8_t> residual_loaded;  // per unit of lazily loaded residuals
  std::vector<int32_t> sums32;           // the native algorithm's integer sums
  std::vector<int64_t> sums64;
  Schedule schedule;  // the host algorithms' steps, rebuilt by each call
};

// What a layer keeps between calls for policy.scale_update_period (paper 001
// §3.2): the messages its last refresh call encoded, in encode order. Every
// algorithm encodes the same sequence of blocks on every call of one shape,
// so encode i of a later call takes the scales of message i; the receivers
// need nothing, since every message still carries its scales.
struct ScaleMemory {
  uint64_t shape = 0;   // the call signature the messages belong to
  uint64_t calls = 0;   // calls of this shape since (and including) the refresh
  std::vector<std::vector<uint8_t>> messages;
  float norm = 0.0f;    // the native algorithm's agreed norm at the refresh
};

// The bytes a payload of `payload` bytes takes in device memory laid out in
// slots: each starts on a 32-byte boundary of the (cudaMalloc'd, 256-byte
// aligned) buffer, the alignment a payload has behind the 32-byte header of
// a message qc_codec_encode writes into a cudaMalloc'd buffer, which is what the
// kernels are tested with. Larger slots would stage padding.
inline size_t device_payload_slot(size_t payload) { return (payload + 31) / 32 * 32; }

// A call whose values (the algorithms' `data`) are device memory and whose
// codec runs there (core/device_staging.h): encode, decode and the values
// arithmetic are enqueued on `stream`; the messages stay host memory, and
// only their payloads cross, through `payload`.
struct DeviceValues {
  const DeviceMemory* mem = nullptr;
  const DeviceMessageCodec* codec = nullptr;
  void* stream = nullptr;
  uint8_t* payload = nullptr;  // device bytes for the payload of the call's largest message
  size_t payload_capacity = 0;
  void* norm_scratch = nullptr;  // DeviceMessageCodec::kNormScratchBytes for squared_norm
  float* values = nullptr;     // device floats for zeroed_values
  size_t values_capacity = 0;
};

struct CallCounters {
  uint64_t wire_bytes = 0;
  double codec_seconds = 0;
  double transport_seconds = 0;
  double codec_seconds_in_flight = 0;  // of codec_seconds, with transfers posted
};

class CollectiveContext {
 public:
  CollectiveContext(Transport& transport, const Codec& codec, Scratch& scratch,
                    uint64_t sequence, uint64_t signature, Deadline deadline);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CallCounters& counters() const { return counters_; }

  size_t max_encoded_size(size_t count) const { return codec_.max_encoded_size(count); }

  // `count` reusable message buffers. Call once per algorithm run: a later
  // call may move the buffers the earlier pointer points to.
  Message* messages(size_t count) {
    if (scratch_.messages.size() < count) scratch_.messages.resize(count);
    return scratch_.messages.data();
  }
  // A reusable schedule for one host algorithm run (built anew by each:
  // only its memory is reused). Not for a run inside another's.
  Schedule* schedule_scratch() { return &scratch_.schedule; }
  // `count` reusable integers, not zeroed (host memory; the native
  // algorithm's sums: int32 where they fit, else int64).
  void integer_scratch(size_t count, int32_t** out) { *out = grown(scratch_.sums32, count); }
  void integer_scratch(size_t count, int64_t** out) { *out = grown(scratch_.sums64, count); }
  // `count` reusable floats, zeroed (device memory for a call on device values).
  Status zeroed_values(size_t count, float** values);
  // dst += src, element by element, where the call's values are.
  Status add_values(float* dst, const float* src, size_t count);
  // dst = src (nothing when they are the same memory), where the values are.
  Status copy_values(float* dst, const float* src, size_t count);

  // From now on the call's values are device memory (see DeviceValues), and
  // so are the residuals set_residual gives. No scale reuse or error
  // estimate: their state is host memory.
  void set_device_values(const DeviceValues& device) { device_ = device; }
  bool values_on_device() const { return device_.codec != nullptr; }

  // The call's result is more than the cache holds until anything reads it
  // (an emulation's N results together, or one huge result): decode_result
  // writes it past the cache. Host values only.
  void set_output_outgrows_cache(bool on) { output_outgrows_cache_ = on; }

  // Error feedback for this call: `residual` holds one slot per element of
  // the `count`-element tensor (error_buffer.h explains why one is enough).
  // From now on encode() is error-compensated (paper 000 Alg. 1, DQE): it
  // sends z = src + residual[offset..] and leaves z - decode(z) there.
  // The policy's seed for stochastic rounding (part of every RandomKey).
  void set_seed(uint64_t seed) { seed_ = seed; }
  // The random stream of the call's layer (RandomKey::stream; run_collective
  // sets it for a call on one layer).
  void set_stream(uint64_t stream) { stream_ = stream; }

  void set_residual(float* residual, size_t count) {
    residual_ = residual;
    residual_count_ = count;
  }
  // After set_residual: the call starts from the `committed` residuals
  // (set_residual's count of them), copied into the working ones a unit of
  // kResidualUnit slots at a time, when an encode first touches the unit,
  // where the encode then finds them in cache (a separate copy pass over a
  // large tensor costs as much as the encode). load_untouched_residuals()
  // copies the units no encode touched; call it before the working
  // residuals are committed.
  void set_residual_source(const float* committed);
  void load_untouched_residuals();
  static constexpr size_t kResidualUnit = 4096;

  // The input's norm, measured a slice at a time while this call waits
  // for transfers (input_norm.h); the caller finishes it.
  void set_input_norm(InputNorm* norm) { input_norm_ = norm; }
  // Before a wait: one slice of such work, if any is left.
  void work_while_waiting() {
    if (input_norm_ != nullptr) input_norm_->step();
  }

  // Scale reuse for this call: with refresh, encode() computes scales and
  // keeps a copy of each message in *memory; without, encode i reuses the
  // scales of memory->messages[i] (when the codec has scales).
  void set_scale_memory(ScaleMemory* memory, bool refresh) {
    scale_memory_ = memory;
    scale_refresh_ = refresh;
    if (refresh) memory->messages.clear();
  }

  // Encode `count` values into msg's payload (resized as needed).
  // element_offset is the values' position in the tensor: it keys the
  // random bits of stochastic rounding and, with error feedback, the slots.
  Status encode(const float* src, size_t count, uint64_t element_offset, Message* msg);
  // The random key encode() uses for the block starting at element_offset,
  // for codecs that run elsewhere (on the device) and must draw the same bits.
  RandomKey random_key(uint64_t element_offset) const;
  // Codec time spent outside encode/decode (device kernels), for the stats.
  void add_codec_seconds(double seconds) { counters_.codec_seconds += seconds; }
  Status decode(const uint8_t* data, size_t size, float* dst, size_t count);
  // decode() into the call's result; after set_output_outgrows_cache(true),
  // decoded in cache, then copied past it (cpu/cache_size.h). The same values.
  Status decode_result(const uint8_t* data, size_t size, float* dst, size_t count);
  Status decode_accumulate(const uint8_t* data, size_t size, float* dst, size_t count);

  // Non-blocking point to point. `step` names the message within the call;
  // sender and receiver must use the same step. The message must stay alive
  // and unchanged until wait() returns. `frame` is the payload capacity the
  // receiver posts for this message (its reserve_payload), which the sender
  // computes from the call's shape just as the receiver does: a transport
  // that needs exact receive sizes (NCCL) sends the payload padded to it.
  Status post_send(int peer, uint32_t step, Message* msg, size_t frame, Request* req);
  // Receives into msg (capacity: msg's payload capacity).
  Status post_recv(int peer, uint32_t step, Message* msg, Request* req);
  // The transport's turn to move pending transfers (Transport::progress).
  Status progress() { return transport_.progress(); }
  // Pipelining (ScheduleShape::chunk): pieces of about `values` float32
  // values for the schedules that cut blocks (0: whole blocks), set by the
  // communicator (QC_PIPELINE_CHUNK).
  void set_pipeline_chunk(size_t values) { pipeline_chunk_ = values; }
  // The chunk for blocks of at most `block_values` values under this call's
  // codec: the set chunk, raised so that a block has at most kMaxPieces
  // pieces (every piece is a message and a transport tag), rounded up to
  // the codec's granule (Codec::chunk_granule); 0 when the codec cannot be
  // cut, the values are device memory, or pipelining is off.
  static constexpr size_t kMaxPieces = 1024;
  size_t pipeline_chunk(size_t block_values) const;
  // Transport::transfers_overlap_compute of this call's transport.
  bool transfers_overlap_compute() const { return transport_.transfers_overlap_compute(); }
  // Waits for every request; then checks the envelopes of the received
  // messages, whose Message* are given in the same order as their requests.
  Status wait(Request* reqs, size_t count, Message* const* recv_msgs, size_t recv_count);

  // Measure the relative error of the first lossy encode of this call
  // (one extra decode of one message): error_estimate() afterwards gives
  // ||x - decode(encode(x))|| / ||x||, or -1 if nothing was encoded.
  void request_error_estimate() { estimate_error_ = true; }
  double error_estimate() const;

  // The transport's own float32 sum, preceded by a check that every rank is
  // in this call (the signature), since a native collective has no envelope.
  bool has_native_float_allreduce() const { return transport_.has_native_float_allreduce(); }
  // Only the check that every rank is in this call (the signature), for
  // native steps that send no envelope of their own.
  Status agree();
  // The same check over the call's own messages, on any transport: ceil(log2
  // n) rounds in which rank r sends an envelope (no payload) to r + 2^k and
  // receives one from r - 2^k. Some rank next to a disagreeing one sees its
  // signature, fails with QC_ERROR_MISMATCH and breaks the group, so every
  // rank fails; the pattern depends on the group size alone, so ranks that
  // disagree on who talks to whom (a broadcast's root) still meet here.
  Status agree_by_messages();
  // Every rank's `value` in (*all)[rank], over the call's own messages:
  // each rank sends its value (8 bytes behind an envelope) to every other
  // and receives theirs. The envelopes are checked as everywhere, so this
  // also agrees on the call (a sparse allreduce's row counts, which may
  // differ between ranks, travel here before anything sized by them).
  Status allgather_u64(uint64_t value, std::vector<uint64_t>* all) {
    return allgather_u64s(std::vector<uint64_t>{value}, all);
  }
  // The same for `mine.size()` values per rank (every rank's same count):
  // (*all)[r * mine.size() + k] is rank r's value k.
  Status allgather_u64s(const std::vector<uint64_t>& mine, std::vector<uint64_t>* all);
  Status native_allreduce_float(const float* send, float* recv, size_t count);
  // The transport's float sum (or average) of device buffers, enqueued on
  // `stream` after the agreement: a rank whose buffers the transport cannot
  // take, or whose own preparation failed (`local`), says so in the
  // agreement, so every rank fails it and none enqueues.
  Status enqueue_device_allreduce_float(const float* send, float* recv, size_t count,
                                        bool average, void* stream, const Status& local);

  // Only the agreement, for a call on device buffers that the transport
  // takes as they are (`send`, `recv`): a rank whose buffers it cannot take
  // (transport.h: check_device_buffers), or whose own preparation failed
  // (`local`), agrees on another value, so every rank fails here, that one
  // with its own status, the peers with MISMATCH, and none enqueues work
  // its peers would wait for on the device.
  Status agree_on_device_buffers(const float* send, const float* recv,
                                 const Status& local = Status::ok());

  // Stream-ordered calls on device values (allreduce_enqueued): the
  // payloads stay in device memory the algorithm lays out and travel
  // without envelope or wire header, the transport's sends and receives
  // enqueued on the call's stream like the kernels, nothing awaited. Every
  // size is fixed by the call's shape, which agree_on_device_buffers showed
  // to be every rank's.
  // The payload bytes of a block of `count` values.
  Status payload_bytes(size_t count, size_t* bytes) const;
  // The device memory the call's payloads may use (DeviceValues::payload).
  uint8_t* device_payloads() const { return device_.payload; }
  size_t device_payload_capacity() const { return device_.payload_capacity; }
  // encode() and decode()/decode_accumulate() of one block on the device,
  // its payload at `payload` (the same random keys, error feedback and
  // bytes as the messages of encode()).
  Status encode_payload(const float* src, size_t count, uint64_t element_offset,
                        uint8_t* payload);
  Status decode_payload(const uint8_t* payload, float* dst, size_t count, bool accumulate);
  // The sends and receives of `ops` (device memory), one group enqueued on
  // the call's stream; none is nothing.
  Status enqueue_group(const DeviceTransfer* ops, size_t count);

  // A failure of this rank's device work ("rank R could not <step>: ..."),
  // in words its peers can act on (the group breaks with it, so they read
  // it too).
  Status device_failure(const char* step, const Status& cause) const;

  // Shorthands for the common patterns.
  Status send(int peer, uint32_t step, Message* msg, size_t frame);
  Status recv(int peer, uint32_t step, Message* msg);
  Status send_recv(int send_peer, Message* send_msg, size_t send_frame, int recv_peer,
                   Message* recv_msg, uint32_t step);

 private:
  // agree_on_device_buffers without the counters.
  Status agree_on_buffers(const float* send, const float* recv, const Status& local);
  Status encode_on_device(const float* src, size_t count, uint64_t element_offset, Message* msg);
  // The residuals of elements [element_offset, +count), or null without
  // error feedback; an internal error outside the buffer.
  Status residual_slots(uint64_t element_offset, size_t count, float** slots);
  // Books codec work that began at `start` (and whether it overlapped transfers).
  void count_codec(Clock::time_point start);
  void load_residual_unit(size_t unit);
  Status decode_on_device(const uint8_t* data, size_t size, float* dst, size_t count,
                          bool accumulate);
  // A transport tag is the call's sequence number and the step's low 20 bits.
  static constexpr uint32_t kTagStepMask = 0xfffffu;
  uint64_t tag(uint32_t step) const { return (sequence_ << 20) | (step & kTagStepMask); }
  // `tag`: the receive's transport tag, whose step the envelope must repeat.
  Status check_envelope(const Message& msg, size_t received, int peer, uint64_t tag) const;

  Transport& transport_;
  const Codec& codec_;
  template <class T>
  static T* grown(std::vector<T>& v, size_t count) {
    if (v.size() < count) v.resize(count);
    return v.data();
  }
  Scratch& scratch_;
  uint64_t sequence_;
  uint64_t signature_;
  Deadline deadline_;
  int rank_;
  int size_;
  CallCounters counters_;
  uint64_t seed_ = 0;
  uint64_t stream_ = 0;
  float* residual_ = nullptr;
  size_t residual_count_ = 0;
  const float* residual_source_ = nullptr;  // set_residual_source's; null: loaded
  InputNorm* input_norm_ = nullptr;
  size_t in_flight_ = 0;  // transfers posted and not yet awaited
  ScaleMemory* scale_memory_ = nullptr;
  bool scale_refresh_ = false;
  bool output_outgrows_cache_ = false;
  DeviceValues device_;
  size_t pipeline_chunk_ = 0;
  size_t encodes_ = 0;
  bool estimate_error_ = false;
  bool estimated_ = false;
  double error_sq_ = 0;
  double signal_sq_ = 0;
};

}  // namespace qc
