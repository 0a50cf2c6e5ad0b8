#include "core/codecs/codec_topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/byte_order.h"
#include "core/checked_math.h"
#include "core/policy.h"
#include "core/codecs/topk_select.h"
#include "cpu/bitstream.h"

namespace qc {
namespace {

using cpu::load_f32;
using cpu::store_f32;

constexpr size_t kEntryBytes = 8;  // u32 index, float32 value
constexpr size_t kMaxCount = 0xffffffffu;  // 32-bit indices

Status too_many_elements(size_t count) {
  return unsupported("codec topk encodes at most 4294967295 elements (32-bit indices); got " +
                     std::to_string(count));
}

}  // namespace

size_t TopkCodec::k_for(float ratio, size_t count) {
  if (count == 0) return 0;
  const double k = std::ceil(static_cast<double>(ratio) * static_cast<double>(count));
  if (!(k >= 1.0)) return 1;
  if (k >= static_cast<double>(count)) return count;
  return static_cast<size_t>(k);
}

size_t TopkCodec::max_encoded_size(size_t count) const {
  size_t entries = 0, total = 0;
  const bool fits = checked_mul(kEntryBytes, k_for(ratio_, count), &entries) &&
                    checked_sum({kWireHeaderBytes, 4, entries}, &total);
  return fits ? total : SIZE_MAX;
}

// An overflowing size first (INVALID_ARGUMENT, as every codec), then the
// index limit (UNSUPPORTED, what encode says for that count).
Status TopkCodec::encoded_size(size_t count, size_t* bytes) const {
  size_t size = 0;
  QC_RETURN_IF_ERROR(Codec::encoded_size(count, &size));
  if (count > kMaxCount) return too_many_elements(count);
  *bytes = size;
  return Status::ok();
}

Status TopkCodec::encode_impl(const float* src, float* e, size_t count, uint8_t* dst,
                              size_t capacity, size_t* written) const {
  if (count > kMaxCount) return too_many_elements(count);
  const size_t need = max_encoded_size(count);
  if (capacity < need) {
    return invalid_argument("argument 'capacity' (" + std::to_string(capacity) +
                            " bytes) is too small; the message needs " + std::to_string(need));
  }
  const size_t k = k_for(ratio_, count);

  // With error feedback z = t + e lands in e itself: e keeps z at the unsent
  // positions and is zeroed at the sent ones below.
  std::vector<TopkEntry> sent;
  bool saw_non_finite = false;
  topk_select(src, e, count, k, &sent, &saw_non_finite);

  WireHeader h;
  h.codec = QC_CODEC_TOPK;
  h.bits = 32;
  h.bucket_size = 1;
  h.flags = 0;
  h.count = count;
  h.payload_bytes = need - kWireHeaderBytes;
  write_wire_header(h, dst);
  uint8_t* p = dst + kWireHeaderBytes;
  store_le32(p, static_cast<uint32_t>(k));
  p += 4;
  for (size_t j = 0; j < k; ++j, p += kEntryBytes) {
    store_le32(p, sent[j].index);
    store_f32(p + 4, sent[j].value);
  }
  if (e != nullptr) {
    for (const TopkEntry& s : sent) e[s.index] = 0.0f;
    // Residual hygiene (cpu/codec_kernels.h), each element its own bucket:
    // more NaN/Inf values than k leave some unsent; carried, they would
    // reach a later call's output, so they are dropped. (Finite values are
    // sent as float32, so a finite residual can never overflow an encode.)
    if (saw_non_finite)
      for (size_t i = 0; i < count; ++i)
        if (!std::isfinite(e[i])) e[i] = 0.0f;
  }
  *written = need;
  return Status::ok();
}

Status TopkCodec::encode(const float* src, size_t count, const RandomKey&, uint8_t* dst,
                         size_t capacity, size_t* written) const {
  return encode_impl(src, nullptr, count, dst, capacity, written);
}

Status TopkCodec::encode_error_compensated(const float* t, float* e, size_t count,
                                           const RandomKey&, uint8_t* dst, size_t capacity,
                                           size_t* written) const {
  return encode_impl(t, e, count, dst, capacity, written);
}

Status TopkCodec::decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                              bool accumulate) const {
  WireHeader h;
  QC_RETURN_IF_ERROR(read_header_for(src, size, QC_CODEC_TOPK, count, &h));
  if (h.bits != 32 || h.bucket_size != 1) {
    return corrupt_data("codec topk message: bits " + std::to_string(h.bits) + ", bucket " +
                        std::to_string(h.bucket_size) + " where topk writes bits 32, bucket 1");
  }
  // read_wire_header checked payload_bytes == size - header; from here on
  // only sizes re-derived from k are trusted.
  if (h.payload_bytes < 4) {
    return corrupt_data("codec topk message: " + std::to_string(h.payload_bytes) +
                        " payload bytes, too short for the 4-byte k field");
  }
  const uint8_t* p = src + kWireHeaderBytes;
  const uint64_t k = load_le32(p);
  if (k > count) {
    return corrupt_data("codec topk message: k = " + std::to_string(k) + " exceeds the " +
                        std::to_string(count) + " elements");
  }
  if (h.payload_bytes != 4 + kEntryBytes * k) {
    return corrupt_data("codec topk message: " + std::to_string(h.payload_bytes) +
                        " payload bytes where k = " + std::to_string(k) + " entries need " +
                        std::to_string(4 + kEntryBytes * k));
  }
  const uint8_t* entries = p + 4;
  // Check every index before writing anything, so a corrupt message leaves
  // dst (an accumulator, possibly) untouched.
  for (uint64_t j = 0; j < k; ++j) {
    const uint32_t i = load_le32(entries + kEntryBytes * j);
    if (i >= count) {
      return corrupt_data("codec topk message: entry " + std::to_string(j) + " has index " +
                          std::to_string(i) + ", past the " + std::to_string(count) +
                          " elements");
    }
    if (j > 0 && i <= load_le32(entries + kEntryBytes * (j - 1))) {
      return corrupt_data("codec topk message: indices are not strictly increasing at entry " +
                          std::to_string(j));
    }
  }
  if (!accumulate)
    for (size_t i = 0; i < count; ++i) dst[i] = 0.0f;
  for (uint64_t j = 0; j < k; ++j) {
    const uint8_t* q = entries + kEntryBytes * j;
    const uint32_t i = load_le32(q);
    const float v = load_f32(q + 4);
    dst[i] = accumulate ? dst[i] + v : v;
  }
  return Status::ok();
}

Status TopkCodec::decode(const uint8_t* src, size_t size, float* dst, size_t count) const {
  return decode_impl(src, size, dst, count, false);
}

Status TopkCodec::decode_accumulate(const uint8_t* src, size_t size, float* dst,
                                    size_t count) const {
  return decode_impl(src, size, dst, count, true);
}

}  // namespace qc
