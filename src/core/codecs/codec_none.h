// Codec "none": values travel in the input dtype, unchanged.
#pragma once

#include "core/codecs/codec.h"

namespace qc {

class CodecNone final : public Codec {
 public:
  size_t chunk_granule() const override { return 1; }
  explicit CodecNone(qc_dtype_t wire_dtype) : wire_dtype_(wire_dtype) {}

  qc_codec_t id() const override { return QC_CODEC_NONE; }
  bool is_lossless() const override { return true; }
  size_t max_encoded_size(size_t count) const override;
  bool header_for(size_t count, WireHeader* header) const override;
  Status encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                size_t capacity, size_t* written) const override;
  Status decode(const uint8_t* src, size_t size, float* dst, size_t count) const override;
  Status decode_typed(const uint8_t* src, size_t size, void* dst, size_t count,
                      qc_dtype_t dtype) const override;
  Status decode_accumulate(const uint8_t* src, size_t size, float* dst,
                           size_t count) const override;

 private:
  Status check(const uint8_t* src, size_t size, size_t count) const;
  qc_dtype_t wire_dtype_;
};

}  // namespace qc
