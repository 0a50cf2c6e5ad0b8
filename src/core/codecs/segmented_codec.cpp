#include "core/codecs/segmented_codec.h"

#include <algorithm>
#include <string>

#include "core/byte_order.h"
#include "core/checked_math.h"

namespace qc {

SegmentedCodec::SegmentedCodec(std::vector<CodecSegment> segments)
    : segments_(std::move(segments)) {}

bool SegmentedCodec::is_lossless() const {
  return std::all_of(segments_.begin(), segments_.end(),
                     [](const CodecSegment& s) { return s.count == 0 || s.codec->is_lossless(); });
}

size_t SegmentedCodec::max_encoded_size(size_t count) const {
  // Wherever the range lies, segment i contributes at most min(count, its
  // length) elements, as one part.
  size_t bound = 0;
  for (const CodecSegment& s : segments_) {
    if (s.count == 0) continue;
    const size_t part = s.codec->max_encoded_size(std::min(count, s.count));
    if (!checked_sum({bound, kSegmentPartHeaderBytes, part}, &bound)) return SIZE_MAX;
  }
  return bound;
}

size_t SegmentedCodec::segment_of(size_t element) const {
  // The last segment whose begin is <= element and that is not empty.
  auto it = std::upper_bound(segments_.begin(), segments_.end(), element,
                             [](size_t e, const CodecSegment& s) { return e < s.begin; });
  size_t i = static_cast<size_t>(it - segments_.begin());
  while (i > 0 && segments_[i - 1].count == 0) --i;
  return i == 0 ? 0 : i - 1;
}

Status SegmentedCodec::encode_parts(const float* src, float* residual, size_t count,
                                    const RandomKey& key, uint8_t* dst, size_t capacity,
                                    size_t* written) const {
  size_t out = 0;
  const size_t start = static_cast<size_t>(key.element_offset);
  size_t pos = start;
  const size_t end = start + count;
  size_t i = count > 0 ? segment_of(start) : segments_.size();
  for (; pos < end && i < segments_.size(); ++i) {
    const CodecSegment& s = segments_[i];
    if (s.count == 0 || s.begin + s.count <= pos) continue;
    const size_t part_end = std::min(end, s.begin + s.count);
    const size_t n = part_end - pos;
    if (capacity - out < kSegmentPartHeaderBytes) {
      return internal_error("segmented encode: message capacity too small");
    }
    uint8_t* head = dst + out;
    out += kSegmentPartHeaderBytes;
    RandomKey part_key = key;
    part_key.seed = s.seed;
    part_key.stream = s.stream;
    // Indexed within the layer: its bits are those of its own stream.
    part_key.element_offset = pos - s.begin;
    size_t part_bytes = 0;
    const float* from = src + (pos - start);
    Status st = residual != nullptr && s.feedback
                    ? s.codec->encode_error_compensated(from, residual + (pos - start), n,
                                                        part_key, dst + out, capacity - out,
                                                        &part_bytes)
                    : s.codec->encode(from, n, part_key, dst + out, capacity - out, &part_bytes);
    QC_RETURN_IF_ERROR(st);
    store_le32(head, static_cast<uint32_t>(i));
    store_le32(head + 4, 0);
    store_le64(head + 8, pos);
    store_le64(head + 16, part_bytes);
    out += part_bytes;
    pos = part_end;
  }
  if (pos != end) {
    return internal_error("segmented encode: elements [" + std::to_string(pos) + ", " +
                          std::to_string(end) + ") lie outside every segment");
  }
  *written = out;
  return Status::ok();
}

Status SegmentedCodec::encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                              size_t capacity, size_t* written) const {
  return encode_parts(src, nullptr, count, key, dst, capacity, written);
}

Status SegmentedCodec::encode_error_compensated(const float* t, float* e, size_t count,
                                                const RandomKey& key, uint8_t* dst,
                                                size_t capacity, size_t* written) const {
  return encode_parts(t, e, count, key, dst, capacity, written);
}

Status SegmentedCodec::decode_parts(const uint8_t* src, size_t size, float* dst, size_t count,
                                    bool accumulate) const {
  size_t in = 0;
  size_t done = 0;
  uint64_t first = 0;
  size_t last_segment = 0;
  while (in < size) {
    if (size - in < kSegmentPartHeaderBytes) {
      return corrupt_data("fused message: truncated part header");
    }
    const uint32_t index = load_le32(src + in);
    const uint32_t reserved = load_le32(src + in + 4);
    const uint64_t begin = load_le64(src + in + 8);
    const uint64_t bytes = load_le64(src + in + 16);
    in += kSegmentPartHeaderBytes;
    if (index >= segments_.size() || reserved != 0 || (done > 0 && index <= last_segment)) {
      return corrupt_data("fused message: a part names segment " + std::to_string(index) +
                          " of " + std::to_string(segments_.size()) + " or is out of order");
    }
    const CodecSegment& s = segments_[index];
    if (done == 0) first = begin;
    const uint64_t seg_end = uint64_t(s.begin) + s.count;
    if (done == count || begin != first + done || begin < s.begin || begin >= seg_end ||
        bytes > size - in) {
      return corrupt_data("fused message: the part at element " + std::to_string(begin) +
                          " does not continue the range or lies outside segment " +
                          std::to_string(index));
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(seg_end - begin, count - done));
    float* out = dst + done;
    Status st = accumulate ? s.codec->decode_accumulate(src + in, bytes, out, n)
                           : s.codec->decode(src + in, bytes, out, n);
    QC_RETURN_IF_ERROR(st);
    in += bytes;
    done += n;
    last_segment = index;
  }
  if (done != count) {
    return corrupt_data("fused message carries " + std::to_string(done) + " elements, expected " +
                        std::to_string(count));
  }
  return Status::ok();
}

Status SegmentedCodec::decode(const uint8_t* src, size_t size, float* dst, size_t count) const {
  return decode_parts(src, size, dst, count, false);
}

Status SegmentedCodec::decode_accumulate(const uint8_t* src, size_t size, float* dst,
                                         size_t count) const {
  return decode_parts(src, size, dst, count, true);
}

}  // namespace qc
