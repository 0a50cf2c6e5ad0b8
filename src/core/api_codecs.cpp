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
#if defined(QC_HAVE_CUDA)
#include "core/codecs/device_messages.h"
#include "cuda/device_runtime.h"
#endif

using namespace qc;

namespace {

// Device memory goes to the CUDA kernels, host memory to the CPU; a call
// that mixes them is refused (neither side can read the other's pointer).
// Without a CUDA build (or device) every pointer is host memory.
enum class Where { kHost, kDevice };

Status locate(const void* a, const char* name_a, const void* b, const char* name_b, Where* where) {
  *where = Where::kHost;
#if defined(QC_HAVE_CUDA)
  // A NULL pointer (count 0) takes the other's side.
  const bool da = cuda::is_device_memory(a), db = cuda::is_device_memory(b);
  if (a != nullptr && b != nullptr && da != db) {
    return invalid_argument(std::string("argument '") + (da ? name_a : name_b) +
                            "' is CUDA device memory but '" + (da ? name_b : name_a) +
                            "' is host memory; pass both on the host or both on the device");
  }
  if (da || db) *where = Where::kDevice;
#else
  (void)a, (void)name_a, (void)b, (void)name_b;
#endif
  return Status::ok();
}

}  // namespace

extern "C" {

QC_API qc_status_t qc_codec_encoded_size(const qc_policy_t* policy, size_t count, size_t* max_bytes) {
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
    // Checked: a size past SIZE_MAX is an error, never a wrapped-around one.
    size_t size = 0;
    QC_RETURN_IF_ERROR(codec->encoded_size(count, &size));
    *max_bytes = size;
    return Status::ok();
  });
}

QC_API qc_status_t qc_codec_encode(const qc_policy_t* policy, const void* src, size_t count,
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
    Where where;
    QC_RETURN_IF_ERROR(locate(src, "src", dst, "dst", &where));
#if defined(QC_HAVE_CUDA)
    if (where == Where::kDevice)
      return encode_message_on_device(p, src, count, dtype, static_cast<uint8_t*>(dst), capacity,
                                      written);
#endif
    std::unique_ptr<Codec> codec;
    QC_RETURN_IF_ERROR(make_codec(p, dtype, &codec));
    size_t need = 0;  // a count whose message cannot exist fails here, naming 'count'
    QC_RETURN_IF_ERROR(codec->encoded_size(count, &need));
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

QC_API qc_status_t qc_codec_decode(const void* src, size_t size, void* dst, size_t count,
                             qc_dtype_t dtype) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require(src, "src"));
    QC_RETURN_IF_ERROR(check_dtype(dtype));
    size_t bytes = 0;
    QC_RETURN_IF_ERROR(check_byte_count(count, dtype_size(dtype), 1, "count", &bytes));
    QC_RETURN_IF_ERROR(require_buffer(dst, bytes, "dst"));
    Where where;
    QC_RETURN_IF_ERROR(locate(src, "src", dst, "dst", &where));
#if defined(QC_HAVE_CUDA)
    if (where == Where::kDevice)
      return decode_message_on_device(static_cast<const uint8_t*>(src), size, dst, count, dtype);
#endif
    WireHeader header;
    QC_RETURN_IF_ERROR(read_wire_header(static_cast<const uint8_t*>(src), size, &header));
    if (header.count != count) {
      return mismatch("argument 'count' is " + std::to_string(count) + " but the message holds " +
                      std::to_string(header.count) + " elements");
    }
    std::unique_ptr<Codec> codec;
    QC_RETURN_IF_ERROR(make_codec_for_header(header, &codec));
    // The output goes straight into dst: every codec checks the whole
    // message before its first write, so a corrupt one still leaves dst
    // untouched; 16-bit output is narrowed block by block as it is decoded
    // (Codec::decode_typed). A scratch copy only where the kernels cannot
    // write dst directly: a dst overlapping the message, or a misaligned
    // float32 dst.
    const auto s0 = reinterpret_cast<uintptr_t>(src);
    const auto d0 = reinterpret_cast<uintptr_t>(dst);
    const bool overlaps = bytes > 0 && size > 0 && s0 < d0 + bytes && d0 < s0 + size;
    if (!overlaps && (dtype != QC_DTYPE_FLOAT32 || d0 % alignof(float) == 0)) {
      return codec->decode_typed(static_cast<const uint8_t*>(src), size, dst, count, dtype);
    }
    std::vector<float> values(count);
    QC_RETURN_IF_ERROR(codec->decode(static_cast<const uint8_t*>(src), size, values.data(), count));
    cpu::from_float32(values.data(), dtype, dst, count);
    return Status::ok();
  });
}

}  // extern "C"
