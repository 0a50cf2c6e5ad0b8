#include "core/codecs/device_messages.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "core/codecs/codec.h"
#include "core/codecs/codec_block_scaled.h"
#include "core/codecs/wire_format.h"
#include "core/dtype.h"
#include "core/policy.h"
#include "cpu/codec_kernels.h"
#include "cuda/device_codec.h"

namespace qc {
namespace {

bool quantized(qc_codec_t c) {
  return c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_ONEBIT;
}
bool cast(qc_codec_t c) { return c == QC_CODEC_FP16 || c == QC_CODEC_BF16; }
bool global(qc_codec_t c) { return c == QC_CODEC_GLOBAL_LINEAR || c == QC_CODEC_GLOBAL_EXP; }
// The codecs with CUDA kernels (the rest run on the host only).
bool on_device(qc_codec_t c) {
  return c == QC_CODEC_NONE || quantized(c) || cast(c) || global(c) || is_block_scaled(c);
}

// The global decoders' checks on the CPU (codec_global.cpp), with the two
// payload bytes they need read back from the device: the norm is NaN or a
// finite value >= 0, and the unused high bits of the last code byte are 0.
Status check_global_payload(qc_codec_t c, const WireHeader& h, const uint8_t* payload) {
  float norm;
  QC_RETURN_IF_ERROR(cuda::copy_to_host(&norm, payload, 4));
  if (!std::isnan(norm) && !(norm >= 0.0f && std::isfinite(norm))) {
    return corrupt_data(std::string("codec ") + codec_name(c) + " message: norm " +
                        std::to_string(norm) + " is neither NaN nor a finite value >= 0");
  }
  const size_t used_bits = (h.count * h.bits) % 8;
  if (used_bits != 0) {
    uint8_t last;
    QC_RETURN_IF_ERROR(cuda::copy_to_host(&last, payload + h.payload_bytes - 1, 1));
    if ((last >> used_bits) != 0) {
      return corrupt_data(std::string("codec ") + codec_name(c) +
                          " message: unused high bits of the last code byte are not zero");
    }
  }
  return Status::ok();
}

// The block-scaled decoders' checks on the CPU (check_block_scaled_payload),
// with the bytes they read copied back: nvfp4's S and block scales, and the
// last code byte.
Status check_block_payload(qc_codec_t c, const WireHeader& h, const uint8_t* payload) {
  const size_t count = static_cast<size_t>(h.count);
  std::vector<uint8_t> scales;
  if (c == QC_CODEC_NVFP4) {
    scales.resize(4 + groups_of(count, 16));
    QC_RETURN_IF_ERROR(cuda::copy_to_host(scales.data(), payload, scales.size()));
  }
  uint8_t last = 0;
  if (h.payload_bytes > 0) {
    QC_RETURN_IF_ERROR(cuda::copy_to_host(&last, payload + h.payload_bytes - 1, 1));
  }
  return check_block_scaled_payload(c, count, scales.data(), last);
}

Status no_kernel(qc_codec_t c, const char* what) {
  return unsupported(std::string("codec ") + codec_name(c) + " has no CUDA kernel for " + what +
                     " yet; pass host memory (the CPU path takes every codec)");
}

// Only for headers whose payload size the codec has checked (so this fits).
size_t meta_bytes(const WireHeader& h) {
  const size_t per_bucket = h.codec == QC_CODEC_MINMAX ? 8 : 4;
  return groups_of(static_cast<size_t>(h.count), h.bucket_size) * per_bucket;
}

}  // namespace

Status encode_payload_on_device(const WireHeader& h, qc_dtype_t dtype, const void* src,
                                const RandomKey& key, float* residual, uint8_t* payload,
                                void* stream) {
  const qc_codec_t c = static_cast<qc_codec_t>(h.codec);
  const size_t count = static_cast<size_t>(h.count);
  const float* src32 = static_cast<const float*>(src);
  const bool stochastic = (h.flags & kWireFlagStochastic) != 0;
  // The CPU codecs' random stream and element index (codec_quantized.cpp).
  const cpu::RandomStream rng = cpu::make_random_stream(key.seed, key.rank, key.stream);
  if (residual != nullptr && (c == QC_CODEC_NONE || dtype != QC_DTYPE_FLOAT32)) {
    return internal_error(std::string("no error-compensated device encode for codec ") +
                          codec_name(c) + " on " + dtype_name(dtype) + " input");
  }
  if (c == QC_CODEC_NONE) {
    return cuda::copy_on_device(payload, src, h.payload_bytes, stream);
  }
  if (cast(c)) return cuda::cast_encode(c, src32, residual, count, payload, stream);
  if (global(c)) {
    const bool max_abs_scale = (h.flags & kWireFlagMaxAbsScale) != 0;
    return cuda::global_encode(c, h.bits, stochastic, max_abs_scale, rng, key.element_offset,
                               src32, residual, count, payload, payload + 4, stream);
  }
  if (is_block_scaled(c)) {
    cpu::BlockArgs a = block_kernel_args(c, stochastic);
    a.rng = rng;
    a.index_base = key.element_offset;
    return cuda::block_encode(a, src32, residual, count, payload, stream);
  }
  cuda::DeviceQuantArgs a;
  a.codec = c;
  a.bits = h.bits;
  a.bucket = h.bucket_size;
  a.stochastic = stochastic;
  a.rng = rng;
  a.index_base = key.element_offset;
  a.input_dtype = dtype;
  return cuda::quant_encode(src, residual, count, a, payload, payload + meta_bytes(h), stream);
}

Status decode_payload_on_device(const WireHeader& h, const uint8_t* payload, float* out,
                                bool accumulate, void* stream) {
  const qc_codec_t c = static_cast<qc_codec_t>(h.codec);
  const size_t count = static_cast<size_t>(h.count);
  if (c == QC_CODEC_NONE) {
    if (h.dtype == QC_DTYPE_FLOAT32) {
      // No collective stages codec none compressed: there is nothing to save.
      if (accumulate) return internal_error("no accumulating device decode for codec none");
      return cuda::copy_on_device(out, payload, h.payload_bytes, stream);
    }
    // 16-bit values widen exactly as the fp16/bf16 codecs decode
    const qc_codec_t as = h.dtype == QC_DTYPE_FLOAT16 ? QC_CODEC_FP16 : QC_CODEC_BF16;
    return cuda::cast_decode(as, payload, count, out, accumulate, stream);
  }
  if (cast(c)) return cuda::cast_decode(c, payload, count, out, accumulate, stream);
  if (global(c)) {
    return cuda::global_decode(c, h.bits, payload, payload + 4, count, out, accumulate, stream);
  }
  if (is_block_scaled(c)) {
    return cuda::block_decode(block_kernel_args(c, false), payload, count, out, accumulate, stream);
  }
  return cuda::quant_decode(c, payload, payload + meta_bytes(h), count, h.bits, h.bucket_size, out,
                            accumulate, stream);
}

Status encode_message_on_device(const qc_policy_t& policy, const void* src, size_t count,
                                qc_dtype_t dtype, uint8_t* dst, size_t capacity,
                                size_t* written) {
  std::unique_ptr<Codec> codec;
  QC_RETURN_IF_ERROR(make_codec(policy, dtype, &codec));
  size_t size = 0;  // a count whose message cannot exist fails here, naming 'count'
  QC_RETURN_IF_ERROR(codec->encoded_size(count, &size));
  const qc_codec_t c = codec->id();
  WireHeader h;
  if (!on_device(c) || !codec->header_for(count, &h)) return no_kernel(c, "device memory");
  if (!quantized(c) && dtype != QC_DTYPE_FLOAT32) return no_kernel(c, "16-bit device input");
  const size_t need = kWireHeaderBytes + h.payload_bytes;
  if (capacity < need) {
    return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                            " bytes) is too small; the message needs " + std::to_string(need));
  }
  uint8_t header[kWireHeaderBytes];
  write_wire_header(h, header);
  QC_RETURN_IF_ERROR(cuda::copy_to_device(dst, header, kWireHeaderBytes));
  RandomKey key;  // as qc_codec_encode on the CPU: rank 0, stream 0, offset 0
  key.seed = policy.seed;
  QC_RETURN_IF_ERROR(
      encode_payload_on_device(h, dtype, src, key, /*residual=*/nullptr, dst + kWireHeaderBytes,
                               nullptr));
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
  if (!on_device(c) || !codec->header_for(count, &expected)) return no_kernel(c, "device memory");
  if (dtype != QC_DTYPE_FLOAT32) return no_kernel(c, "16-bit device output");
  // Sizes come from the codec's own parameters, so a lying header cannot
  // make a kernel read past the message (as on the CPU).
  if (expected.payload_bytes != h.payload_bytes || expected.bucket_size != h.bucket_size) {
    return corrupt_data("encoded message: payload of " + std::to_string(h.payload_bytes) +
                        " bytes, bucket " + std::to_string(h.bucket_size) + ", where its fields need " +
                        std::to_string(expected.payload_bytes) + " bytes, bucket " +
                        std::to_string(expected.bucket_size));
  }
  const uint8_t* payload = src + kWireHeaderBytes;
  if (global(c)) QC_RETURN_IF_ERROR(check_global_payload(c, h, payload));
  if (is_block_scaled(c)) QC_RETURN_IF_ERROR(check_block_payload(c, h, payload));
  QC_RETURN_IF_ERROR(decode_payload_on_device(h, payload, static_cast<float*>(dst), false, nullptr));
  return cuda::synchronize(nullptr);
}

}  // namespace qc
