// The codec interface: bit layouts and math, never who sends what.
// Every codec works on float32 (the working precision of all reductions) and
// writes self-describing messages (wire_format.h). Later codecs plug in here
// and in make_codec(); the algorithms need no change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/codecs/wire_format.h"
#include "core/status.h"

namespace qc {

// Where the random bits of stochastic rounding come from: a counter-based
// generator keyed by these, so a rerun with the same seed is bit-identical.
// `stream` names the layer and that layer's call index (layer_stream in
// call_stats.h), so a layer draws the same bits whatever other layers did.
struct RandomKey {
  uint64_t seed = 0;
  uint32_t rank = 0;
  uint64_t stream = 0;
  uint64_t element_offset = 0;
};

class Codec {
 public:
  virtual ~Codec() = default;

  virtual qc_codec_t id() const = 0;
  // True when decode(encode(x)) == x for every x representable in the input
  // dtype, which lets error feedback be folded in before the collective.
  virtual bool is_lossless() const = 0;
  // Bytes encode() may write for `count` elements, header included, or
  // SIZE_MAX when that does not fit in size_t: the arithmetic is checked
  // (core/checked_math.h) and saturates instead of wrapping around, so an
  // absurd count gives a size no buffer has, never a small one.
  virtual size_t max_encoded_size(size_t count) const = 0;
  // Whether a block may be encoded in pieces with the bits it gets whole,
  // and on what boundaries: pieces must start a multiple of this many
  // values from the block's start (a bucketed codec's bucket size; 1 for
  // codecs that encode each value alone). 0: never in pieces (top-k picks
  // over the whole block). Pipelined schedules cut blocks on it.
  virtual size_t chunk_granule() const { return 0; }
  // max_encoded_size as a status, for entry points whose count comes from
  // the caller (qc_codec_encoded_size, qc_codec_encode): QC_ERROR_INVALID_ARGUMENT
  // naming 'count' where the size does not fit in size_t, and the codec's
  // own limits on count (topk: QC_ERROR_UNSUPPORTED past 2^32 - 1 elements,
  // as its encode).
  virtual Status encoded_size(size_t count, size_t* bytes) const;

  virtual Status encode(const float* src, size_t count, const RandomKey& key, uint8_t* dst,
                        size_t capacity, size_t* written) const = 0;
  // encode() of count values of `dtype` (float32, float16 or bfloat16; src
  // may be unaligned). The result equals widening src to float32 (exact) and
  // calling encode(); this default does just that through a scratch vector,
  // and codecs whose kernels read 16-bit input directly override it.
  virtual Status encode_typed(const void* src, qc_dtype_t dtype, size_t count,
                              const RandomKey& key, uint8_t* dst, size_t capacity,
                              size_t* written) const;
  virtual Status decode(const uint8_t* src, size_t size, float* dst, size_t count) const = 0;
  // decode() into count values of `dtype` at dst (float16 and bfloat16:
  // any alignment; each value the float32 decode rounded to nearest even).
  // Like decode(), a refused message writes nothing. This default decodes
  // into a float32 scratch vector and narrows it; codecs whose messages
  // decode in independent pieces override it to narrow block by block in
  // cache (one pass over memory; decode_in_blocks below).
  virtual Status decode_typed(const uint8_t* src, size_t size, void* dst, size_t count,
                              qc_dtype_t dtype) const;
  // dst += decode(src), in one pass.
  virtual Status decode_accumulate(const uint8_t* src, size_t size, float* dst,
                                   size_t count) const = 0;
  // Error-compensated encode (paper 000 Alg. 1, DQE): z = t + e; encode z;
  // e = z - decode(z). The generic version uses a scratch buffer; codecs
  // override it with a fused kernel.
  virtual Status encode_error_compensated(const float* t, float* e, size_t count,
                                          const RandomKey& key, uint8_t* dst, size_t capacity,
                                          size_t* written) const;

  // The header encode() writes for `count` elements, for codecs whose
  // message layout is fixed by count alone (the bucketed and the cast
  // codecs); false for the others. The CUDA path (device_messages.h) writes
  // this header next to the payload its kernels produce, so a message
  // encoded on the GPU carries the same header as one from the CPU.
  virtual bool header_for(size_t count, WireHeader* header) const {
    (void)count;
    (void)header;
    return false;
  }

  // Scale reuse (policy.scale_update_period, paper 001 §3.2): true when
  // this codec's messages carry per-bucket scales that a later encode can
  // take over instead of computing them.
  virtual bool has_scales() const { return false; }
  // encode() (error-compensated when e != nullptr, as above) with the scales
  // of `previous`, an earlier message of this codec for the same count:
  // values outside the reused range saturate (codec_kernels.h). A previous
  // message that does not fit (another codec, count or layout) is ignored
  // and the scales are computed. Codecs without scales just encode.
  virtual Status encode_reusing_scales(const float* src, float* e, size_t count,
                                       const RandomKey& key, const uint8_t* previous,
                                       size_t previous_size, uint8_t* dst, size_t capacity,
                                       size_t* written) const;

 protected:
  // decode_typed's one pass for a message already checked: decode_block(
  // first, n, out) decodes values [first, first + n) into out, with first a
  // multiple of `granule` (where the codec's pieces start: a bucket on a
  // byte of the codes); each block is narrowed to dtype into dst while it
  // is in cache.
  static void decode_in_blocks(size_t count, size_t granule, qc_dtype_t dtype, void* dst,
                               const std::function<void(size_t, size_t, float*)>& decode_block);
};

// Reads and checks a message's header for a decoder of `codec` expecting
// `count` elements: a damaged header is QC_ERROR_CORRUPT_DATA, another codec
// or count QC_ERROR_MISMATCH. Codec-specific fields are the caller's to check.
Status read_header_for(const uint8_t* src, size_t size, qc_codec_t codec, size_t count,
                       WireHeader* header);

// The codec for `policy` on data whose ABI dtype is `dtype`, or
// QC_ERROR_UNSUPPORTED for a codec this build does not have.
Status make_codec(const qc_policy_t& policy, qc_dtype_t dtype, std::unique_ptr<Codec>* codec);
// The codec that decodes a message with this header (for qc_codec_decode).
Status make_codec_for_header(const WireHeader& header, std::unique_ptr<Codec>* codec);

}  // namespace qc
