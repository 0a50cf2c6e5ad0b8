// Entry points of the stand-alone codecs.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/api_checks.h"
#include "core/api_guard.h"
#include "core/codecs/codec.h"
#include "core/policy.h"
#include "cpu/dtype_convert.h"

using namespace qc;

extern "C" {

QC_API qc_status_t qc_encoded_size(const qc_policy_t* policy, size_t count, size_t* max_bytes) {
  return QC_API_CALL({
    qc_policy_t p;
    QC_RETURN_IF_ERROR(read_policy(policy, "policy", &p));
    QC_RETURN_IF_ERROR(require(max_bytes, "max_bytes"));
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count, sizeof(float), 1, "count", &bytes));
    std::unique_ptr<Codec> codec;
    // The size of codec none depends on the dtype; report the float32 bound,
    // which covers the 16-bit dtypes too.
    QC_RETURN_IF_ERROR(make_codec(p, QC_DTYPE_FLOAT32, &codec));
    *max_bytes = codec->max_encoded_size(count);
    return Status::ok();
  });
}

QC_API qc_status_t qc_encode(const qc_policy_t* policy, const void* src, size_t count,
                             qc_dtype_t dtype, void* dst, size_t capacity, size_t* written) {
  return QC_API_CALL({
    qc_policy_t p;
    QC_RETURN_IF_ERROR(read_policy(policy, "policy", &p));
    QC_RETURN_IF_ERROR(check_dtype(dtype));
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count, dtype_size(dtype), 1, "count", &bytes));
    QC_RETURN_IF_ERROR(require_buffer(src, bytes, "src"));
    QC_RETURN_IF_ERROR(require(dst, "dst"));
    QC_RETURN_IF_ERROR(require(written, "written"));
    std::unique_ptr<Codec> codec;
    QC_RETURN_IF_ERROR(make_codec(p, dtype, &codec));
    RandomKey key;
    key.seed = p.seed;
    // The input goes straight to the codec (the quantized and cast codecs
    // widen 16-bit input as their kernels read it: no conversion pass), unless
    // it overlaps dst or is a misaligned float32 array: then it is read into
    // a float32 copy first, as it always was.
    const auto s0 = reinterpret_cast<uintptr_t>(src);
    const auto d0 = reinterpret_cast<uintptr_t>(dst);
    const bool overlaps = bytes > 0 && capacity > 0 && s0 < d0 + capacity && d0 < s0 + bytes;
    const bool misaligned = dtype == QC_DTYPE_FLOAT32 && s0 % alignof(float) != 0;
    if (overlaps || misaligned) {
      std::vector<float> values(count);
      cpu::to_float32(src, dtype, values.data(), count);
      return codec->encode(values.data(), count, key, static_cast<uint8_t*>(dst), capacity,
                           written);
    }
    return codec->encode_typed(src, dtype, count, key, static_cast<uint8_t*>(dst), capacity,
                               written);
  });
}

QC_API qc_status_t qc_decode(const void* src, size_t size, void* dst, size_t count,
                             qc_dtype_t dtype) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require(src, "src"));
    QC_RETURN_IF_ERROR(check_dtype(dtype));
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count, dtype_size(dtype), 1, "count", &bytes));
    QC_RETURN_IF_ERROR(require_buffer(dst, bytes, "dst"));
    WireHeader header;
    QC_RETURN_IF_ERROR(read_wire_header(static_cast<const uint8_t*>(src), size, &header));
    if (header.count != count) {
      return mismatch("argument 'count' is " + std::to_string(count) + " but the message holds " +
                      std::to_string(header.count) + " elements");
    }
    std::unique_ptr<Codec> codec;
    QC_RETURN_IF_ERROR(make_codec_for_header(header, &codec));
    std::vector<float> values(count);
    QC_RETURN_IF_ERROR(codec->decode(static_cast<const uint8_t*>(src), size, values.data(), count));
    cpu::from_float32(values.data(), dtype, dst, count);
    return Status::ok();
  });
}

}  // extern "C"
