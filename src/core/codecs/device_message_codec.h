// The device side of collectives that stage only compressed bytes
// (core/device_staging.h): message payloads encoded from and decoded into
// device memory, and the float arithmetic the allreduce algorithms do on
// their values between codec calls, enqueued on a stream. In production the CUDA kernels
// (cuda_message_codec, over codecs/device_messages.h); in the unit tests
// the CPU codecs over a fake device's memory, so the staging logic is
// tested without a GPU.
#pragma once

#include "core/codecs/codec.h"
#include "core/codecs/wire_format.h"
#include "core/status.h"

namespace qc {

class DeviceMessageCodec {
 public:
  virtual ~DeviceMessageCodec() = default;
  // The payload of the message `codec` writes for h.count float32 values at
  // `src` (header `h`, from codec.header_for), with the random bits of `key`:
  // the bytes codec.encode() writes after the header. With `residual`
  // (error feedback: h.count device floats) the encode is error-compensated
  // as codec.encode_error_compensated's: z = src + residual is encoded and
  // residual becomes z - decode(z).
  virtual Status encode(const Codec& codec, const WireHeader& h, const float* src,
                        const RandomKey& key, float* residual, uint8_t* payload,
                        void* stream) const = 0;
  // dst = (or, with accumulate, dst +=) the h.count float32 values of a
  // payload whose header `h` the caller has checked.
  virtual Status decode(const Codec& codec, const WireHeader& h, const uint8_t* payload,
                        float* dst, bool accumulate, void* stream) const = 0;

  // Float32 arithmetic on device values, each the host loop's operation
  // element by element (so the results are the host path's bit for bit):
  // dst = 0; dst += src; dst *= factor; dst = src.
  virtual Status zero(float* dst, size_t count, void* stream) const = 0;
  virtual Status add(float* dst, const float* src, size_t count, void* stream) const = 0;
  virtual Status scale(float* dst, float factor, size_t count, void* stream) const = 0;
  virtual Status copy(float* dst, const float* src, size_t count, void* stream) const = 0;
  // 16-bit data (float16 or bfloat16) to float32 values and back, as
  // cpu::to_float32 and cpu::from_float32 convert them.
  virtual Status widen(const void* src, qc_dtype_t dtype, float* dst, size_t count,
                       void* stream) const = 0;
  virtual Status narrow(const float* src, qc_dtype_t dtype, void* dst, size_t count,
                        void* stream) const = 0;
  // Waits for the work enqueued on `stream`.
  virtual Status synchronize(void* stream) const = 0;

  // Device bytes squared_norm works in.
  static constexpr size_t kNormScratchBytes = 65536 + 64;
  // *out = the sum of src[i]^2, in double, over count float32 values, once
  // the work enqueued on `stream` so far has run (it waits for it).
  // `scratch`: kNormScratchBytes of device memory, 8-byte aligned. For the
  // layer statistics only: the terms are summed in the device's order, not
  // the host loop's, so the last bits may differ from the host path's.
  virtual Status squared_norm(const float* src, size_t count, void* scratch, void* stream,
                              double* out) const = 0;
};

// The CUDA kernels' DeviceMessageCodec; nullptr in a build without CUDA.
const DeviceMessageCodec* cuda_message_codec();

}  // namespace qc
