// The codec of a fused call (qc_allreduce_segments): one flat buffer made of
// several layers, each with its own policy. An algorithm encodes a range of
// the flat buffer as usual; this codec cuts the range at segment borders and
// encodes each piece with its segment's codec, so buckets never straddle
// segments and one message per step carries every segment it touches.
//
// Message: a sequence of parts, each
//   u32 segment index   u32 reserved (0)   u64 first element (in the flat
//   buffer)   u64 part bytes   then the segment codec's own message
// (self-describing, wire_format.h). Parts are in element order and cover
// the range without gaps; a decoder checks all of that.
//
// The algorithms pass the range's position in the buffer as the random
// key's element_offset (collective_context.cpp), which is how encode knows
// where it is; decode learns it from the first part. Each part draws its
// random bits from its segment's own stream, indexed from the segment's
// first element, as a call of that layer alone would.
#pragma once

#include <memory>
#include <vector>

#include "core/codecs/codec.h"

namespace qc {

constexpr size_t kSegmentPartHeaderBytes = 24;

struct CodecSegment {
  size_t begin = 0;  // first element in the flat buffer
  size_t count = 0;
  std::unique_ptr<Codec> codec;
  uint64_t seed = 0;      // the segment policy's stochastic rounding seed
  uint64_t stream = 0;    // its layer's call (layer_stream, call_stats.h)
  bool feedback = false;  // error-compensated encodes for this segment
};

class SegmentedCodec final : public Codec {
 public:
  explicit SegmentedCodec(std::vector<CodecSegment> segments);

  // Not a wire codec of its own: its parts carry their codecs' ids.
  qc_codec_t id() const override { return QC_CODEC_NONE; }
  bool is_lossless() const override;
  size_t max_encoded_size(size_t count) const override;
  Status encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                size_t capacity, size_t* written) const override;
  Status decode(const uint8_t* src, size_t size, float* dst, size_t count) const override;
  Status decode_accumulate(const uint8_t* src, size_t size, float* dst,
                           size_t count) const override;
  Status encode_error_compensated(const float* t, float* e, size_t count, const RandomKey& key,
                                  uint8_t* dst, size_t capacity, size_t* written) const override;

 private:
  Status encode_parts(const float* src, float* residual, size_t count, const RandomKey& key,
                      uint8_t* dst, size_t capacity, size_t* written) const;
  Status decode_parts(const uint8_t* src, size_t size, float* dst, size_t count,
                      bool accumulate) const;
  // Index of the segment holding element `element` (segments are sorted;
  // empty ones are skipped).
  size_t segment_of(size_t element) const;

  std::vector<CodecSegment> segments_;
};

}  // namespace qc
