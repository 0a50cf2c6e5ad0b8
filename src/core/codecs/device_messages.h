// qc_codec_encode and qc_codec_decode on device memory (CUDA builds only): the header is
// the one the CPU codec writes (Codec::header_for), the payload comes from
// the CUDA kernels (src/cuda/device_codec.h), which write the CPU's bytes.
// Both calls are synchronous, like their host versions: on return the
// message (or the decoded values) is in device memory.
//
// Covered: minmax, qsgd and onebit (float32, float16 or bfloat16 input),
// fp16, bf16, global_linear, global_exp, the block-scaled codecs (MX,
// nvfp4) and none (float32 input); float32 output. topk and the other dtypes are QC_ERROR_UNSUPPORTED with a message
// saying to pass host memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/codecs/codec.h"
#include "core/codecs/wire_format.h"
#include "core/status.h"
#include "qc.h"

namespace qc {

// The payload of a message with header `h` (from the codec's header_for):
// encoded from h.count values of `dtype` at `src`, or decoded as float32
// into `dst` (added to it, with accumulate); device memory, enqueued on
// `stream` (a cudaStream_t, NULL: the default stream) and not waited for.
// Random bits are keyed as the CPU codecs key them (key.seed, key.rank,
// key.stream; key.element_offset is the index of element 0), so the bytes are
// the CPU's. With `residual` (float32 input, any codec but none) the encode
// is error-compensated in the same pass (z = src + residual encoded,
// residual = z - decode(z)); codec none refuses it.
// The header's fields are trusted: decode callers check them first (as
// decode_message_on_device does), and the global and block-scaled codecs'
// payload checks are theirs too.
Status encode_payload_on_device(const WireHeader& h, qc_dtype_t dtype, const void* src,
                                const RandomKey& key, float* residual, uint8_t* payload,
                                void* stream);
Status decode_payload_on_device(const WireHeader& h, const uint8_t* payload, float* dst,
                                bool accumulate, void* stream);

Status encode_message_on_device(const qc_policy_t& policy, const void* src, size_t count,
                                qc_dtype_t dtype, uint8_t* dst, size_t capacity,
                                size_t* written);
Status decode_message_on_device(const uint8_t* src, size_t size, void* dst, size_t count,
                                qc_dtype_t dtype);

}  // namespace qc
