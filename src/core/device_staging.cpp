#include "core/device_staging.h"

#include <chrono>
#include <cstring>
#include <string>

#include "core/algorithms/algorithm.h"
#if defined(QC_HAVE_CUDA)
#include "core/codecs/device_messages.h"
#include "cuda/device_codec.h"
#include "cuda/device_runtime.h"
#endif

namespace qc {
namespace {

#if defined(QC_HAVE_CUDA)
class CudaMessageCodec final : public DeviceMessageCodec {
 public:
  Status encode(const Codec& /*codec*/, const WireHeader& h, const float* src,
                const RandomKey& key, float* residual, uint8_t* payload,
                void* stream) const override {
    return encode_payload_on_device(h, QC_DTYPE_FLOAT32, src, key, residual, payload, stream);
  }
  Status decode(const Codec& /*codec*/, const WireHeader& h, const uint8_t* payload, float* dst,
                bool accumulate, void* stream) const override {
    return decode_payload_on_device(h, payload, dst, accumulate, stream);
  }
  Status zero(float* dst, size_t count, void* stream) const override {
    return cuda::zero_values(dst, count, stream);
  }
  Status add(float* dst, const float* src, size_t count, void* stream) const override {
    return cuda::add_values(dst, src, count, stream);
  }
  Status scale(float* dst, float factor, size_t count, void* stream) const override {
    return cuda::scale_values(dst, factor, count, stream);
  }
  Status copy(float* dst, const float* src, size_t count, void* stream) const override {
    return cuda::copy_on_device(dst, src, count * sizeof(float), stream);
  }
  Status widen(const void* src, qc_dtype_t dtype, float* dst, size_t count,
               void* stream) const override {
    return cuda::widen_values(src, dtype, dst, count, stream);
  }
  Status narrow(const float* src, qc_dtype_t dtype, void* dst, size_t count,
                void* stream) const override {
    return cuda::narrow_values(src, dtype, dst, count, stream);
  }
  Status synchronize(void* stream) const override { return cuda::synchronize(stream); }
  Status squared_norm(const float* src, size_t count, void* scratch, void* stream,
                      double* out) const override {
    static_assert(cuda::kNormScratchBytes <= kNormScratchBytes, "the norm kernels need more");
    QC_RETURN_IF_ERROR(cuda::squared_norm_on_device(src, count, scratch, stream));
    return cuda::copy_to_host_after(out, cuda::squared_norm_result(scratch), sizeof(double),
                                    stream);
  }
};
#endif

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

const DeviceMessageCodec* cuda_message_codec() {
#if defined(QC_HAVE_CUDA)
  static const CudaMessageCodec* const codec = new CudaMessageCodec();  // stateless, never freed
  return codec;
#else
  return nullptr;
#endif
}

namespace {

// The codecs the device stages compressed: none gains nothing; topk and the
// global codecs have no staged path yet. Scale reuse keeps host copies of
// earlier messages to encode against.
bool codec_stages_compressed(const qc_policy_t& policy, const Codec& codec) {
  switch (codec.id()) {
    case QC_CODEC_MINMAX:
    case QC_CODEC_QSGD:
    case QC_CODEC_ONEBIT:
    case QC_CODEC_FP16:
    case QC_CODEC_BF16:
      return policy.scale_update_period <= 1;
    default:
      return false;
  }
}

}  // namespace

bool alltoall_stages_compressed(const qc_policy_t& policy, const Codec& codec, size_t count,
                                WireHeader* header) {
  return codec_stages_compressed(policy, codec) && count > 0 && codec.header_for(count, header);
}

bool allreduce_stages_compressed(const qc_policy_t& policy, const Codec& codec,
                                 qc_algorithm_t algorithm, size_t count) {
  WireHeader header;
  // Native sums the global codecs' integer codes on the host.
  if (!is_step_algorithm(algorithm)) return false;
  return codec_stages_compressed(policy, codec) && count > 0 && codec.header_for(count, &header);
}

namespace {

// DeviceValues with payload memory only, at `device`.
DeviceValues payload_values(const DeviceMemory& mem, const DeviceMessageCodec& device_codec,
                            void* stream, unsigned char* device, size_t payload_capacity) {
  DeviceValues values;
  values.mem = &mem;
  values.codec = &device_codec;
  values.stream = stream;
  values.payload = device;
  values.payload_capacity = payload_capacity;
  return values;
}

}  // namespace

Status reserve_device_payloads(size_t payload_bytes, const DeviceMemory& mem,
                               const DeviceMessageCodec& device_codec, HostStaging& staging,
                               void* stream, DeviceValues* values) {
  unsigned char* device = nullptr;
  QC_RETURN_IF_ERROR(staging.reserve_device(mem, payload_bytes, &device));
  *values = payload_values(mem, device_codec, stream, device, payload_bytes);
  return Status::ok();
}

Status reserve_device_values(const Codec& codec, size_t count, int ranks, size_t payload_area,
                             const DeviceMemory& mem, const DeviceMessageCodec& device_codec,
                             HostStaging& staging, void* stream, DeviceValues* values) {
  // No block an algorithm encodes exceeds the whole tensor (the tree and the
  // folded ranks of recursive doubling send it all); SRA's sum is one of
  // `ranks` blocks.
  WireHeader largest;
  if (!codec.header_for(count, &largest)) {
    return internal_error("no fixed message layout for the device values");
  }
  const size_t payload_capacity = payload_area > 0 ? payload_area : largest.payload_bytes;
  const size_t payload = device_payload_slot(payload_capacity);
  const size_t norm = device_payload_slot(DeviceMessageCodec::kNormScratchBytes);
  const size_t floats = (count + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks);
  unsigned char* device = nullptr;
  QC_RETURN_IF_ERROR(
      staging.reserve_device(mem, payload + norm + floats * sizeof(float), &device));
  *values = payload_values(mem, device_codec, stream, device, payload_capacity);
  values->norm_scratch = device + payload;
  values->values = reinterpret_cast<float*>(device + payload + norm);
  values->values_capacity = floats;
  return Status::ok();
}

Status alltoall_with_device_codec(CollectiveContext& ctx, const Codec& codec,
                                  const WireHeader& header, const DeviceMemory& mem,
                                  const DeviceMessageCodec& device_codec, HostStaging& staging,
                                  const float* send, float* recv, size_t count_per_rank,
                                  void* stream, double* sq_norm) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t blocks = static_cast<size_t>(n);
  const size_t payload = header.payload_bytes;
  const size_t slot = device_payload_slot(payload);
  // Device and host: blocks out-going slots, then blocks incoming ones; the
  // device also the norm's scratch.
  unsigned char* device = nullptr;
  unsigned char* host = nullptr;
  QC_RETURN_IF_ERROR(staging.reserve_device(
      mem, 2 * blocks * slot + DeviceMessageCodec::kNormScratchBytes, &device));
  QC_RETURN_IF_ERROR(staging.reserve(mem, 2 * blocks * slot, &host));
  unsigned char* device_in = device + blocks * slot;
  unsigned char* host_in = host + blocks * slot;
  Status s = device_codec.squared_norm(send, blocks * count_per_rank, device + 2 * blocks * slot,
                                       stream, sq_norm);
  if (!s) return ctx.device_failure("measure its input on the device", s);

  // 1. Every block encoded on the device, in alltoall_pairwise's order and
  // with its random keys, then only the payloads copied to the host.
  auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < n && s; ++k) {
    const size_t to = static_cast<size_t>((r + k) % n);
    s = device_codec.encode(codec, header, send + to * count_per_rank,
                            ctx.random_key(to * count_per_rank), /*residual=*/nullptr,
                            device + to * slot, stream);
  }
  if (s) s = mem.to_host(host, device, blocks * slot, stream);
  if (!s) return ctx.device_failure("encode its blocks on the device", s);
  ctx.add_codec_seconds(seconds_since(start));

  // 2. The messages: the header every block shares, then its payload.
  uint8_t head[kWireHeaderBytes];
  write_wire_header(header, head);
  const size_t frame = ctx.max_encoded_size(count_per_rank);
  Message* msgs = ctx.messages(2 * blocks);
  Message* out = msgs;
  Message* in = msgs + blocks;
  for (size_t j = 0; j < blocks; ++j) {
    if (j == static_cast<size_t>(r)) continue;  // the own block stays on the device
    out[j].reserve_payload(frame);
    std::memcpy(out[j].payload(), head, kWireHeaderBytes);
    std::memcpy(out[j].payload() + kWireHeaderBytes, host + j * slot, payload);
    out[j].set_payload_size(kWireHeaderBytes + payload);
  }
  QC_RETURN_IF_ERROR(alltoall_exchange(ctx, out, in, count_per_rank));

  // 3. Every received header checked on the host, before a kernel reads a
  // byte: it must be this call's (the same codec, count and layout), since
  // the device kernels take their sizes from it.
  for (size_t from = 0; from < blocks; ++from) {
    if (from == static_cast<size_t>(r)) continue;
    const Message& m = in[from];
    WireHeader got;
    QC_RETURN_IF_ERROR(read_header_for(m.payload(), m.payload_size(), codec.id(),
                                       count_per_rank, &got));
    if (std::memcmp(m.payload(), head, kWireHeaderBytes) != 0) {
      return corrupt_data("the alltoall block from rank " + std::to_string(from) +
                          " has another header than this call's blocks");
    }
    std::memcpy(host_in + from * slot, m.payload() + kWireHeaderBytes, payload);
  }

  // 4. The payloads to the device, every block decoded there.
  start = std::chrono::steady_clock::now();
  s = mem.to_device(device_in, host_in, blocks * slot, stream);
  for (size_t from = 0; from < blocks && s; ++from) {
    const unsigned char* src =
        from == static_cast<size_t>(r) ? device + from * slot : device_in + from * slot;
    s = device_codec.decode(codec, header, src, recv + from * count_per_rank,
                            /*accumulate=*/false, stream);
  }
  if (s) s = device_codec.synchronize(stream);
  if (!s) return ctx.device_failure("decode the received blocks on the device", s);
  ctx.add_codec_seconds(seconds_since(start));
  return s;
}

}  // namespace qc
