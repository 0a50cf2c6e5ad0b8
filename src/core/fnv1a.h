// FNV-1a 64: the hash of call signatures (what ranks must agree on) and of
// error buffer images (their checksum).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qc {

inline uint64_t fnv1a64(const void* data, size_t size, uint64_t hash = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace qc
