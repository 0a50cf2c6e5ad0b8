// The block-scaled codecs: OCP Microscaling v1.0 (mxfp8 = E4M3,
// mxfp8_e5m2, mxfp6 = E2M3, mxfp6_e3m2, mxfp4 = E2M1, mxint8: 32 elements
// sharing an E8M0 power-of-two scale) and NVIDIA's nvfp4 (E2M1, 16
// elements sharing an E4M3 scale, one float32 scale per message).
//
//   header (32 bytes) | nvfp4 only: f32 S | one scale byte per block |
//   codes: ceil(count * bits / 8) bytes, the little-endian bitstream
//
// The arithmetic is cpu/block_formats.h's; docs/wire-format.md ("Block-
// scaled formats") states every rule. The element width and block size are
// the format's: the policy's bits and bucket_size do not apply.
#pragma once

#include "core/codecs/codec.h"
#include "cpu/block_formats.h"
#include "cpu/codec_kernels.h"

namespace qc {

// True for the codecs this file implements.
bool is_block_scaled(qc_codec_t codec);

// The kernels' arguments for a block-scaled codec (format, block, nvfp4,
// rounding), without the random key: the CPU tables' and the CUDA kernels'.
cpu::BlockArgs block_kernel_args(qc_codec_t codec, bool stochastic);

// The payload checks of a message whose header and size the caller has
// checked: nvfp4's message scale S (finite, >= 0) and block scales (sign bit
// clear), at `scales` (the payload's start; MX: not read), and the unused
// high bits of the last code byte. The decoders run them before writing.
Status check_block_scaled_payload(qc_codec_t codec, size_t count, const uint8_t* scales,
                                  uint8_t last_byte);

class BlockScaledCodec final : public Codec {
 public:
  // `codec` must be a block-scaled codec (is_block_scaled).
  BlockScaledCodec(qc_codec_t codec, bool stochastic);

  qc_codec_t id() const override { return codec_; }
  bool is_lossless() const override { return false; }
  size_t max_encoded_size(size_t count) const override;
  // MX blocks are independent; nvfp4's message scale spans the message.
  size_t chunk_granule() const override { return nvfp4_ ? 0 : block_; }
  Status encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                size_t capacity, size_t* written) const override;
  Status encode_error_compensated(const float* t, float* e, size_t count, const RandomKey& key,
                                  uint8_t* dst, size_t capacity, size_t* written) const override;
  Status decode(const uint8_t* src, size_t size, float* dst, size_t count) const override;
  Status decode_accumulate(const uint8_t* src, size_t size, float* dst,
                           size_t count) const override;
  bool header_for(size_t count, WireHeader* header) const override;

  const cpu::ElementFormat& format() const { return format_; }
  size_t block() const { return block_; }

 private:
  Status encode_impl(const float* t, float* e, size_t count, const RandomKey& key, uint8_t* dst,
                     size_t capacity, size_t* written) const;
  // The message's checks, all before decode writes anything.
  Status check_message(const uint8_t* src, size_t size, size_t count) const;
  Status decode_impl(const uint8_t* src, size_t size, float* dst, size_t count,
                     bool accumulate) const;
  size_t scale_bytes(size_t count) const;  // S (nvfp4) and the block scales

  qc_codec_t codec_;
  cpu::ElementFormat format_;
  size_t block_;
  bool nvfp4_;
  bool stochastic_;
};

}  // namespace qc
