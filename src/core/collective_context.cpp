#include "core/collective_context.h"

#include "cpu/codec_kernels.h"

#include "core/byte_order.h"
#include "core/codecs/device_message_codec.h"
#include "core/device_memory.h"
#include "core/policy.h"
#include "cpu/codec_kernels.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace qc {
namespace {

const uint8_t kEnvelopeMagic[4] = {'Q', 'C', 'M', 'G'};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

CollectiveContext::CollectiveContext(Transport& transport, const Codec& codec, Scratch& scratch,
                                     uint64_t sequence, uint64_t signature, Deadline deadline)
    : transport_(transport),
      codec_(codec),
      scratch_(scratch),
      sequence_(sequence),
      signature_(signature ^ transport.instance_id()),
      deadline_(deadline),
      rank_(transport.rank()),
      size_(transport.size()) {}

Status CollectiveContext::encode(const float* src, size_t count, uint64_t element_offset,
                                 Message* msg) {
  if (device_.codec != nullptr) return encode_on_device(src, count, element_offset, msg);
  const auto start = Clock::now();
  const size_t capacity = codec_.max_encoded_size(count);
  if (msg->payload_capacity() < capacity) msg->reserve_payload(capacity);
  const RandomKey key = random_key(element_offset);
  size_t written = 0;
  float* slots = nullptr;  // this block's residuals, with error feedback
  Status s = residual_slots(element_offset, count, &slots);
  if (!s) return s;
  const size_t index = encodes_++;
  const bool reuse = scale_memory_ != nullptr && codec_.has_scales();
  if (reuse && !scale_refresh_ && index < scale_memory_->messages.size()) {
    const std::vector<uint8_t>& previous = scale_memory_->messages[index];
    s = codec_.encode_reusing_scales(src, slots, count, key, previous.data(), previous.size(),
                                     msg->payload(), msg->payload_capacity(), &written);
  } else if (slots != nullptr) {
    s = codec_.encode_error_compensated(src, slots, count, key, msg->payload(),
                                        msg->payload_capacity(), &written);
  } else {
    s = codec_.encode(src, count, key, msg->payload(), msg->payload_capacity(), &written);
  }
  if (s && reuse && scale_refresh_) {
    scale_memory_->messages.resize(index + 1);
    scale_memory_->messages[index].assign(msg->payload(), msg->payload() + written);
  }
  msg->set_payload_size(written);
  if (s && estimate_error_ && !estimated_ && count > 0) {
    estimated_ = true;
    // The kernels' squared norm (vectorised): the estimate covers the whole
    // first message, which for the native algorithm is the whole tensor.
    const cpu::KernelTable& k = cpu::kernels();
    double err = 0;
    const double sig = k.squared_norm(src, count);
    if (residual_ != nullptr) {
      // The new residual is exactly the compensated value's error (relative
      // to the uncompensated input: the old residual is gone by now).
      err = k.squared_norm(residual_ + element_offset, count);
    } else {
      std::vector<float>& decoded = scratch_.estimate;  // kept across calls: no allocation
      decoded.resize(count);
      if (codec_.decode(msg->payload(), written, decoded.data(), count)) {
        for (size_t i = 0; i < count; ++i) decoded[i] = src[i] - decoded[i];
        err = k.squared_norm(decoded.data(), count);
      }
    }
    error_sq_ = err;
    signal_sq_ = sig;
  }
  count_codec(start);
  return s;
}

Status CollectiveContext::residual_slots(uint64_t element_offset, size_t count,
                                         float** slots) {
  *slots = nullptr;
  if (residual_ == nullptr) return Status::ok();
  if (element_offset > residual_count_ || count > residual_count_ - element_offset) {
    return internal_error("error-compensated encode of elements [" +
                          std::to_string(element_offset) + ", " +
                          std::to_string(element_offset + count) + ") outside the " +
                          std::to_string(residual_count_) + "-element error buffer");
  }
  if (residual_source_ != nullptr && count > 0) {
    const size_t last = (element_offset + count - 1) / kResidualUnit;
    for (size_t u = element_offset / kResidualUnit; u <= last; ++u) load_residual_unit(u);
  }
  *slots = residual_ + element_offset;
  return Status::ok();
}

void CollectiveContext::count_codec(Clock::time_point start) {
  const double seconds = seconds_since(start);
  counters_.codec_seconds += seconds;
  if (in_flight_ > 0) counters_.codec_seconds_in_flight += seconds;
}

void CollectiveContext::set_residual_source(const float* committed) {
  residual_source_ = committed;
  scratch_.residual_loaded.assign((residual_count_ + kResidualUnit - 1) / kResidualUnit, 0);
}

void CollectiveContext::load_residual_unit(size_t unit) {
  if (scratch_.residual_loaded[unit] != 0) return;
  scratch_.residual_loaded[unit] = 1;
  const size_t begin = unit * kResidualUnit;
  const size_t end = std::min(begin + kResidualUnit, residual_count_);
  std::memcpy(residual_ + begin, residual_source_ + begin, (end - begin) * sizeof(float));
}

void CollectiveContext::load_untouched_residuals() {
  if (residual_source_ == nullptr) return;
  for (size_t u = 0; u < scratch_.residual_loaded.size(); ++u) load_residual_unit(u);
  residual_source_ = nullptr;
}

size_t CollectiveContext::pipeline_chunk(size_t block_values) const {
  const size_t granule = codec_.chunk_granule();
  // Device values stay whole: each piece's payload would cross on its own,
  // and the overlap there is the GPU's (not measured on a GPU yet).
  if (pipeline_chunk_ == 0 || granule == 0 || device_.codec != nullptr) return 0;
  const size_t fewest = block_values / kMaxPieces + 1;
  const size_t chunk = pipeline_chunk_ > fewest ? pipeline_chunk_ : fewest;
  if (chunk > SIZE_MAX - granule) return 0;
  return (chunk + granule - 1) / granule * granule;
}

RandomKey CollectiveContext::random_key(uint64_t element_offset) const {
  RandomKey key;
  key.seed = seed_;
  key.rank = static_cast<uint32_t>(rank_);
  key.stream = stream_;
  key.element_offset = element_offset;
  return key;
}

double CollectiveContext::error_estimate() const {
  if (!estimated_) return -1.0;
  if (signal_sq_ <= 0) return error_sq_ > 0 ? -1.0 : 0.0;
  return std::sqrt(error_sq_ / signal_sq_);
}

Status CollectiveContext::decode(const uint8_t* data, size_t size, float* dst, size_t count) {
  if (device_.codec != nullptr) return decode_on_device(data, size, dst, count, false);
  const auto start = Clock::now();
  Status s = codec_.decode(data, size, dst, count);
  count_codec(start);
  return s;
}

Status CollectiveContext::decode_result(const uint8_t* data, size_t size, float* dst,
                                        size_t count) {
  // A block that does not fit a core's own caches would be read back from
  // memory by the copy: decoded in place instead.
  constexpr size_t kMostStaged = 64 * 1024;
  if (!output_outgrows_cache_ || device_.codec != nullptr || count > kMostStaged) {
    return decode(data, size, dst, count);
  }
  // One staging block per thread, not per rank: an emulation's ranks take
  // turns on a thread, and one block stays in that core's cache where 128
  // would not. Nothing between the decode and the copy lets a rank's fiber
  // give its thread away.
  thread_local std::vector<float> staged;
  if (staged.size() < count) staged.resize(count);
  QC_RETURN_IF_ERROR(decode(data, size, staged.data(), count));
  cpu::kernels().copy_streaming(dst, staged.data(), count);
  return Status::ok();
}

Status CollectiveContext::decode_accumulate(const uint8_t* data, size_t size, float* dst,
                                            size_t count) {
  if (device_.codec != nullptr) return decode_on_device(data, size, dst, count, true);
  const auto start = Clock::now();
  Status s = codec_.decode_accumulate(data, size, dst, count);
  count_codec(start);
  return s;
}

Status CollectiveContext::zeroed_values(size_t count, float** values) {
  if (device_.codec == nullptr) {
    scratch_.values.assign(count, 0.0f);
    *values = scratch_.values.data();
    return Status::ok();
  }
  if (count > device_.values_capacity) {
    return internal_error(std::to_string(count) + " device values asked for, " +
                          std::to_string(device_.values_capacity) + " reserved");
  }
  Status s = device_.codec->zero(device_.values, count, device_.stream);
  if (!s) return device_failure("zero its values on the device", s);
  *values = device_.values;
  return Status::ok();
}

Status CollectiveContext::add_values(float* dst, const float* src, size_t count) {
  if (device_.codec == nullptr) {
    for (size_t i = 0; i < count; ++i) dst[i] += src[i];
    return Status::ok();
  }
  Status s = device_.codec->add(dst, src, count, device_.stream);
  return s ? s : device_failure("add its values on the device", s);
}

Status CollectiveContext::copy_values(float* dst, const float* src, size_t count) {
  if (dst == src || count == 0) return Status::ok();
  if (device_.codec == nullptr) {
    std::memcpy(dst, src, count * sizeof(float));
    return Status::ok();
  }
  Status s = device_.codec->copy(dst, src, count, device_.stream);
  return s ? s : device_failure("copy its values on the device", s);
}

Status CollectiveContext::device_failure(const char* step, const Status& cause) const {
  return Status(cause.code(), "rank " + std::to_string(rank_) + " could not " + step + ": " +
                                  cause.message());
}

Status CollectiveContext::payload_bytes(size_t count, size_t* bytes) const {
  WireHeader h;
  if (!codec_.header_for(count, &h)) {
    return internal_error(std::string("codec ") + codec_name(codec_.id()) +
                          " has no fixed payload for " + std::to_string(count) + " values");
  }
  *bytes = h.payload_bytes;
  return Status::ok();
}

Status CollectiveContext::encode_payload(const float* src, size_t count, uint64_t element_offset,
                                         uint8_t* payload) {
  if (device_.codec == nullptr || scale_memory_ != nullptr) {
    return internal_error("a payload encoded on the device needs device values and no scale reuse");
  }
  const auto start = Clock::now();
  float* slots = nullptr;  // device residuals, with error feedback
  QC_RETURN_IF_ERROR(residual_slots(element_offset, count, &slots));
  WireHeader h;
  if (!codec_.header_for(count, &h)) {
    return internal_error(std::string("codec ") + codec_name(codec_.id()) + " cannot encode " +
                          std::to_string(count) + " device values");
  }
  ++encodes_;
  if (h.payload_bytes > 0) {
    Status s = device_.codec->encode(codec_, h, src, random_key(element_offset), slots, payload,
                                     device_.stream);
    if (!s) return device_failure("encode its values on the device", s);
  }
  count_codec(start);
  return Status::ok();
}

Status CollectiveContext::decode_payload(const uint8_t* payload, float* dst, size_t count,
                                         bool accumulate) {
  WireHeader h;
  if (device_.codec == nullptr || !codec_.header_for(count, &h)) {
    return internal_error("a payload decoded on the device needs device values and a fixed "
                          "layout");
  }
  const auto start = Clock::now();
  if (h.payload_bytes > 0) {
    Status s = device_.codec->decode(codec_, h, payload, dst, accumulate, device_.stream);
    if (!s) return device_failure("decode a message on the device", s);
  }
  count_codec(start);
  return Status::ok();
}

Status CollectiveContext::enqueue_group(const DeviceTransfer* ops, size_t count) {
  if (count == 0) return Status::ok();
  const auto start = Clock::now();
  Status s = transport_.enqueue_device_group(ops, count, device_.stream);
  for (size_t i = 0; i < count; ++i) counters_.wire_bytes += ops[i].send ? ops[i].bytes : 0;
  counters_.transport_seconds += seconds_since(start);
  return s;
}

// The message the host codec writes, with the payload from the device codec
// (the kernels write the CPU's bytes): only the payload crosses.
Status CollectiveContext::encode_on_device(const float* src, size_t count,
                                           uint64_t element_offset, Message* msg) {
  if (scale_memory_ != nullptr) {
    return internal_error("scale reuse keeps host copies of messages; a call on device values "
                          "has none");
  }
  WireHeader h;
  if (!codec_.header_for(count, &h) || h.payload_bytes > device_.payload_capacity) {
    return internal_error(std::string("codec ") + codec_name(codec_.id()) +
                          " cannot encode " + std::to_string(count) +
                          " device values into the reserved payload");
  }
  const size_t size = kWireHeaderBytes + h.payload_bytes;
  if (msg->payload_capacity() < size) msg->reserve_payload(size);
  write_wire_header(h, msg->payload());
  QC_RETURN_IF_ERROR(encode_payload(src, count, element_offset, device_.payload));
  if (h.payload_bytes > 0) {
    const auto start = Clock::now();
    Status s = device_.mem->to_host(msg->payload() + kWireHeaderBytes, device_.payload,
                                    h.payload_bytes, device_.stream);
    if (!s) return device_failure("encode its values on the device", s);
    count_codec(start);
  }
  msg->set_payload_size(size);
  return Status::ok();
}

// The host decoders' checks on the header (the device kernels take their
// sizes from it), then the payload to the device and the decode there.
Status CollectiveContext::decode_on_device(const uint8_t* data, size_t size, float* dst,
                                           size_t count, bool accumulate) {
  const auto start = Clock::now();
  WireHeader got, want;
  QC_RETURN_IF_ERROR(read_header_for(data, size, codec_.id(), count, &got));
  if (!codec_.header_for(count, &want) || want.payload_bytes > device_.payload_capacity) {
    return internal_error(std::string("codec ") + codec_name(codec_.id()) +
                          " cannot decode " + std::to_string(count) +
                          " device values from the reserved payload");
  }
  if (got.bits != want.bits || got.bucket_size != want.bucket_size) {
    return mismatch("message has bits " + std::to_string(got.bits) + ", bucket " +
                    std::to_string(got.bucket_size) + "; expected bits " +
                    std::to_string(want.bits) + ", bucket " + std::to_string(want.bucket_size));
  }
  if (got.payload_bytes != want.payload_bytes) {
    return corrupt_data(std::string("codec ") + codec_name(codec_.id()) + " message: " +
                        std::to_string(got.payload_bytes) + " payload bytes where " +
                        std::to_string(count) + " elements need " +
                        std::to_string(want.payload_bytes));
  }
  if (want.payload_bytes > 0) {
    Status s = device_.mem->to_device(device_.payload, data + kWireHeaderBytes,
                                      want.payload_bytes, device_.stream);
    if (!s) return device_failure("decode a message on the device", s);
  }
  count_codec(start);
  return decode_payload(device_.payload, dst, count, accumulate);
}

Status CollectiveContext::post_send(int peer, uint32_t step, Message* msg, size_t frame,
                                     Request* req) {
  if (msg->payload_size() > frame) {
    return internal_error("step " + std::to_string(step) + ": a " +
                          std::to_string(msg->payload_size()) +
                          "-byte payload exceeds its receiver's capacity of " +
                          std::to_string(frame) + " bytes");
  }
  const auto start = Clock::now();
  uint8_t* env = msg->bytes_.data();
  uint8_t envelope[kEnvelopeBytes];
  for (int i = 0; i < 4; ++i) envelope[i] = kEnvelopeMagic[i];
  store_le32(envelope + 4, step);
  store_le64(envelope + 8, sequence_);
  store_le64(envelope + 16, signature_);
  // One message may go to several peers (allgathers); once posted it is
  // being read, so a repost must not write to it, not even the same bytes.
  if (std::memcmp(env, envelope, kEnvelopeBytes) != 0) std::memcpy(env, envelope, kEnvelopeBytes);
  const size_t bytes = kEnvelopeBytes + msg->payload_size();
  Status s = transport_.post_send(peer, tag(step), env, bytes, kEnvelopeBytes + frame, req);
  counters_.wire_bytes += bytes;
  counters_.transport_seconds += seconds_since(start);
  if (s) ++in_flight_;
  return s;
}

Status CollectiveContext::post_recv(int peer, uint32_t step, Message* msg, Request* req) {
  Status s = transport_.post_recv(peer, tag(step), msg->bytes_.data(), msg->bytes_.size(), req);
  if (s) ++in_flight_;
  return s;
}

Status CollectiveContext::check_envelope(const Message& msg, size_t received, int peer,
                                         uint64_t tag) const {
  const uint8_t* env = msg.bytes_.data();
  // Words only for a message that fails: every message passes here.
  auto from = [&] {
    return " from rank " + std::to_string(peer) + " to rank " + std::to_string(rank_);
  };
  if (received < kEnvelopeBytes) return corrupt_data("truncated message" + from());
  for (int i = 0; i < 4; ++i) {
    if (env[i] != kEnvelopeMagic[i]) return corrupt_data("message" + from() + " has a bad magic");
  }
  if (load_le64(env + 8) != sequence_) {
    return mismatch("message" + from() + " belongs to call " + std::to_string(load_le64(env + 8)) +
                    " but the receiver is in call " + std::to_string(sequence_));
  }
  if (load_le64(env + 16) != signature_) {
    return mismatch("message" + from() +
                    " comes from a different collective: the ranks disagree on the count, "
                    "dtype, op, layer, policy or layer call index (qc_comm_load_state) of "
                    "this call");
  }
  // The transport matched the tag, but a transport may keep fewer tag bits
  // than qc's 64 (MPI: a 15-bit hash), so the envelope's step is compared
  // too: a message of another step must never be read as this one's data.
  const uint32_t step = load_le32(env + 4);
  const uint32_t expected = static_cast<uint32_t>(tag) & kTagStepMask;
  if ((step & kTagStepMask) != expected) {
    return mismatch("message" + from() + " is step " + std::to_string(step) +
                    " of its call, but the receiver expects step " + std::to_string(expected));
  }
  return Status::ok();
}

Status CollectiveContext::wait(Request* reqs, size_t count, Message* const* recv_msgs,
                               size_t recv_count) {
  const auto start = Clock::now();
  Status s = transport_.wait_all(reqs, count, deadline_);
  counters_.transport_seconds += seconds_since(start);
  in_flight_ -= count < in_flight_ ? count : in_flight_;
  QC_RETURN_IF_ERROR(s);
  size_t r = 0;
  for (size_t i = 0; i < count && r < recv_count; ++i) {
    if (reqs[i].kind != Request::Kind::kRecv) continue;
    Message* msg = recv_msgs[r++];
    QC_RETURN_IF_ERROR(check_envelope(*msg, reqs[i].bytes, reqs[i].peer, reqs[i].tag));
    // Same call on both sides (the envelope says so), so a frame other than
    // this receive's capacity is qc's own disagreement about a message size:
    // harmless where sizes may differ, a hang on NCCL, hence checked here.
    if (reqs[i].frame != 0 && reqs[i].frame != reqs[i].capacity) {
      return internal_error("step " + std::to_string(reqs[i].tag & kTagStepMask) + ": rank " +
                            std::to_string(reqs[i].peer) + " framed its message for " +
                            std::to_string(reqs[i].frame) + " bytes, rank " +
                            std::to_string(rank_) + " posted " +
                            std::to_string(reqs[i].capacity));
    }
    msg->set_payload_size(reqs[i].bytes - kEnvelopeBytes);
  }
  return Status::ok();
}

Status CollectiveContext::native_allreduce_float(const float* send, float* recv, size_t count) {
  const auto start = Clock::now();
  Status s = transport_.agree(signature_, deadline_);
  if (s) s = transport_.allreduce_float(send, recv, count, deadline_);
  // The agreement's two words, then ring-optimal 2 (n-1)/n of the data.
  counters_.wire_bytes += size_ > 1 ? 2 * (size_ - 1) * (count * 4 + 16) / size_ : 0;
  counters_.transport_seconds += seconds_since(start);
  return s;
}

Status CollectiveContext::enqueue_device_allreduce_float(const float* send, float* recv,
                                                         size_t count, bool average,
                                                         void* stream, const Status& local) {
  const auto start = Clock::now();
  Status s = agree_on_buffers(send, recv, local);
  if (s) s = transport_.enqueue_device_allreduce_float(send, recv, count, average, stream);
  counters_.wire_bytes += size_ > 1 ? 2 * (size_ - 1) * (count * 4 + 16) / size_ : 0;
  counters_.transport_seconds += seconds_since(start);
  return s;
}

Status CollectiveContext::agree_on_buffers(const float* send, const float* recv,
                                           const Status& local) {
  const Status usable = local ? transport_.check_device_buffers(send, recv) : local;
  // Any other value fails every rank's agreement with MISMATCH.
  Status s = transport_.agree(usable ? signature_ : ~signature_, deadline_);
  return usable ? s : usable;
}

Status CollectiveContext::agree_on_device_buffers(const float* send, const float* recv,
                                                  const Status& local) {
  const auto start = Clock::now();
  Status s = agree_on_buffers(send, recv, local);
  counters_.wire_bytes += size_ > 1 ? 2 * (size_ - 1) * 16 / size_ : 0;
  counters_.transport_seconds += seconds_since(start);
  return s;
}

Status CollectiveContext::agree() {
  const auto start = Clock::now();
  Status s = transport_.agree(signature_, deadline_);
  counters_.wire_bytes += size_ > 1 ? 2 * (size_ - 1) * 16 / size_ : 0;
  counters_.transport_seconds += seconds_since(start);
  return s;
}

Status CollectiveContext::agree_by_messages() {
  constexpr uint32_t kAgreementStep = 0xf0000;  // + round; no schedule uses these steps
  Message out, in;
  for (int k = 1, round = 0; k < size_; k <<= 1, ++round) {
    Request reqs[2];
    Message* recv_msgs[1] = {&in};
    const uint32_t step = kAgreementStep + static_cast<uint32_t>(round);
    in.reserve_payload(0);
    QC_RETURN_IF_ERROR(post_send((rank_ + k) % size_, step, &out, 0, &reqs[0]));
    QC_RETURN_IF_ERROR(post_recv((rank_ - k + size_) % size_, step, &in, &reqs[1]));
    QC_RETURN_IF_ERROR(wait(reqs, 2, recv_msgs, 1));
  }
  return Status::ok();
}

Status CollectiveContext::allgather_u64s(const std::vector<uint64_t>& mine,
                                         std::vector<uint64_t>* all) {
  constexpr uint32_t kCountsStep = 0xf8000;  // no schedule uses this step
  const size_t k = mine.size();
  const size_t bytes = 8 * k;
  all->assign(static_cast<size_t>(size_) * k, 0);
  std::copy(mine.begin(), mine.end(), all->begin() + static_cast<ptrdiff_t>(rank_ * k));
  if (size_ == 1) return Status::ok();
  Message out;
  out.reserve_payload(bytes);
  for (size_t i = 0; i < k; ++i) store_le64(out.payload() + 8 * i, mine[i]);
  out.set_payload_size(bytes);
  std::vector<Message> in(static_cast<size_t>(size_ - 1));
  std::vector<Message*> recv_msgs;
  std::vector<Request> reqs(2 * static_cast<size_t>(size_ - 1));
  size_t posted = 0;
  for (int d = 1; d < size_; ++d) {
    QC_RETURN_IF_ERROR(post_send((rank_ + d) % size_, kCountsStep, &out, bytes, &reqs[posted++]));
  }
  for (int d = 1; d < size_; ++d) {
    Message& m = in[static_cast<size_t>(d - 1)];
    m.reserve_payload(bytes);
    QC_RETURN_IF_ERROR(post_recv((rank_ - d + size_) % size_, kCountsStep, &m, &reqs[posted++]));
    recv_msgs.push_back(&m);
  }
  QC_RETURN_IF_ERROR(wait(reqs.data(), posted, recv_msgs.data(), recv_msgs.size()));
  for (int d = 1; d < size_; ++d) {
    const int from = (rank_ - d + size_) % size_;
    const Message& m = in[static_cast<size_t>(d - 1)];
    if (m.payload_size() != bytes) {
      return corrupt_data("rank " + std::to_string(from) + " sent " +
                          std::to_string(m.payload_size()) + " bytes of counts, not " +
                          std::to_string(bytes));
    }
    for (size_t i = 0; i < k; ++i) {
      (*all)[static_cast<size_t>(from) * k + i] = load_le64(m.payload() + 8 * i);
    }
  }
  return Status::ok();
}

Status CollectiveContext::send(int peer, uint32_t step, Message* msg, size_t frame) {
  Request req;
  QC_RETURN_IF_ERROR(post_send(peer, step, msg, frame, &req));
  return wait(&req, 1, nullptr, 0);
}

Status CollectiveContext::recv(int peer, uint32_t step, Message* msg) {
  Request req;
  QC_RETURN_IF_ERROR(post_recv(peer, step, msg, &req));
  return wait(&req, 1, &msg, 1);
}

Status CollectiveContext::send_recv(int send_peer, Message* send_msg, size_t send_frame,
                                    int recv_peer, Message* recv_msg, uint32_t step) {
  Request reqs[2];
  QC_RETURN_IF_ERROR(post_send(send_peer, step, send_msg, send_frame, &reqs[0]));
  QC_RETURN_IF_ERROR(post_recv(recv_peer, step, recv_msg, &reqs[1]));
  return wait(reqs, 2, &recv_msg, 1);
}

}  // namespace qc
