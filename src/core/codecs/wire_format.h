// The header every encoded message starts with (32 bytes, little-endian):
//
//   offset size  field
//        0    4  magic "QCWF"
//        4    1  format version (kWireFormatVersion)
//        5    1  codec (qc_codec_t)
//        6    1  bits per code (for none/fp16/bf16: the value width, 32 or 16)
//        7    1  dtype of the values that follow (qc_dtype_t; codec-specific meaning)
//        8    4  bucket size in elements
//       12    4  flags (bit 0: stochastic rounding; bit 1, global codecs
//                only: the shared scale is the max-abs, not the L2 norm)
//       16    8  element count
//       24    8  payload length in bytes (exactly what follows the header)
//
// A decoder parses and checks the header before it looks at the payload.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace qc {

constexpr size_t kWireHeaderBytes = 32;
constexpr uint8_t kWireFormatVersion = 1;
constexpr uint32_t kWireFlagStochastic = 1u;
// Tells how the encoder chose the scale; decoding does not depend on it.
constexpr uint32_t kWireFlagMaxAbsScale = 2u;

struct WireHeader {
  uint8_t version = kWireFormatVersion;
  uint8_t codec = 0;
  uint8_t bits = 0;
  uint8_t dtype = 0;
  uint32_t bucket_size = 0;
  uint32_t flags = 0;
  uint64_t count = 0;
  uint64_t payload_bytes = 0;
};

void write_wire_header(const WireHeader& header, uint8_t* dst);
// Checks the magic, the version, the enum fields, and that the payload length
// is exactly size - kWireHeaderBytes. Codec-specific checks are the codec's.
Status read_wire_header(const uint8_t* src, size_t size, WireHeader* header);

}  // namespace qc
