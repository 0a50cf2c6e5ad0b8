#include "core/codecs/device_messages.h"

#include <memory>
#include <string>

#include "core/codecs/codec.h"
#include "core/codecs/wire_format.h"
#include "core/policy.h"
#include "cpu/codec_kernels.h"
#include "cuda/device_codec.h"

namespace qc {
namespace {

bool quantized(qc_codec_t c) {
  return c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_ONEBIT;
}
bool cast(qc_codec_t c) { return c == QC_CODEC_FP16 || c == QC_CODEC_BF16; }

Status no_kernel(qc_codec_t c, const char* what) {
  return unsupported(std::string("codec ") + codec_name(c) + " has no CUDA kernel for " + what +
                     " yet; pass host memory (the CPU path takes every codec)");
}

size_t meta_bytes(const WireHeader& h) {
  const size_t per_bucket = h.codec == QC_CODEC_MINMAX ? 8 : 4;
  return cpu::bucket_count(h.count, h.bucket_size) * per_bucket;
}

}  // namespace

Status encode_message_on_device(const qc_policy_t& policy, const void* src, size_t count,
                                qc_dtype_t dtype, uint8_t* dst, size_t capacity,
                                size_t* written) {
  std::unique_ptr<Codec> codec;
  QC_RETURN_IF_ERROR(make_codec(policy, dtype, &codec));
  const qc_codec_t c = codec->id();
  WireHeader h;
  if (!(quantized(c) || cast(c)) || !codec->header_for(count, &h))
    return no_kernel(c, "device memory");
  if (cast(c) && dtype != QC_DTYPE_FLOAT32) return no_kernel(c, "16-bit device input");
  const size_t need = kWireHeaderBytes + h.payload_bytes;
  if (capacity < need) {
    return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                            " bytes) is too small; the message needs " + std::to_string(need));
  }
  uint8_t header[kWireHeaderBytes];
  write_wire_header(h, header);
  QC_RETURN_IF_ERROR(cuda::copy_to_device(dst, header, kWireHeaderBytes));
  uint8_t* payload = dst + kWireHeaderBytes;
  if (cast(c)) {
    QC_RETURN_IF_ERROR(cuda::cast_encode(c, static_cast<const float*>(src), count, payload, nullptr));
  } else {
    cuda::DeviceQuantArgs a;
    a.codec = c;
    a.bits = h.bits;
    a.bucket = h.bucket_size;
    a.stochastic = (h.flags & kWireFlagStochastic) != 0;
    a.rng = cpu::make_random_stream(policy.seed, 0, 0);  // as qc_encode on the CPU
    a.input_dtype = dtype;
    QC_RETURN_IF_ERROR(
        cuda::quant_encode(src, nullptr, count, a, payload, payload + meta_bytes(h), nullptr));
  }
  QC_RETURN_IF_ERROR(cuda::synchronize(nullptr));
  *written = need;
  return Status::ok();
}

Status decode_message_on_device(const uint8_t* src, size_t size, void* dst, size_t count,
                                qc_dtype_t dtype) {
  uint8_t header[kWireHeaderBytes];
  if (size >= kWireHeaderBytes) QC_RETURN_IF_ERROR(cuda::copy_to_host(header, src, kWireHeaderBytes));
  WireHeader h;
  QC_RETURN_IF_ERROR(read_wire_header(header, size, &h));  // a short message fails here unread
  if (h.count != count) {
    return mismatch("argument 'count' is " + std::to_string(count) + " but the message holds " +
                    std::to_string(h.count) + " elements");
  }
  std::unique_ptr<Codec> codec;
  QC_RETURN_IF_ERROR(make_codec_for_header(h, &codec));
  const qc_codec_t c = codec->id();
  WireHeader expected;
  if (!(quantized(c) || cast(c)) || !codec->header_for(count, &expected))
    return no_kernel(c, "device memory");
  if (dtype != QC_DTYPE_FLOAT32) return no_kernel(c, "16-bit device output");
  if (expected.payload_bytes != h.payload_bytes) {
    return corrupt_data("encoded message has a payload of " + std::to_string(h.payload_bytes) +
                        " bytes; its header fields need " + std::to_string(expected.payload_bytes));
  }
  const uint8_t* payload = src + kWireHeaderBytes;
  float* out = static_cast<float*>(dst);
  if (cast(c)) {
    QC_RETURN_IF_ERROR(cuda::cast_decode(c, payload, count, out, false, nullptr));
  } else {
    QC_RETURN_IF_ERROR(cuda::quant_decode(c, payload, payload + meta_bytes(h), count, h.bits,
                                          h.bucket_size, out, false, nullptr));
  }
  return cuda::synchronize(nullptr);
}

}  // namespace qc
