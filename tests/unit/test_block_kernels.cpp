// The block-scaled codecs' kernels (cpu/codec_kernels.h: block_encode,
// block_decode; cpu/block_formats.h the arithmetic): every SIMD table this
// CPU has (AVX2, AVX-512) equals the scalar one bit for bit, for the seven
// formats, both roundings, with and without error feedback: payload bytes
// (nvfp4's S, the scale bytes, the codes), residuals, decode and
// decode-accumulate, on awkward counts and inputs with NaN, Inf,
// subnormals, zeros, huge values and ties. The scalar kernels themselves
// are checked byte for byte against an independent reference
// (bindings/python/tests/test_mx_reference.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/codec_kernels.h"
#include "cpu/random.h"
#include "kernel_test_data.h"

namespace {

using namespace qc_kernel_test;
using qc::cpu::BlockArgs;
using qc::cpu::ElementFormat;
using qc::cpu::Isa;
using qc::cpu::KernelTable;

struct Format {
  const char* name;
  ElementFormat format;
  bool nvfp4;
};

const Format kFormats[] = {
    {"mxfp8", qc::cpu::kE4M3, false}, {"mxfp8_e5m2", qc::cpu::kE5M2, false},
    {"mxfp6", qc::cpu::kE2M3, false}, {"mxfp6_e3m2", qc::cpu::kE3M2, false},
    {"mxfp4", qc::cpu::kE2M1, false}, {"mxint8", qc::cpu::kInt8, false},
    {"nvfp4", qc::cpu::kE2M1, true},
};

const size_t kCounts[] = {0, 1, 15, 16, 17, 31, 32, 33, 100, 1000, 4099};

std::vector<const KernelTable*> simd_tables() {
  std::vector<const KernelTable*> t;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (const KernelTable* k = qc::cpu::kernels_for(isa)) t.push_back(k);
  return t;
}

BlockArgs args_for(const Format& f, bool stochastic) {
  BlockArgs a;
  a.format = f.format;
  a.block = f.nvfp4 ? 16 : 32;
  a.nvfp4 = f.nvfp4;
  a.stochastic = stochastic;
  a.rng = qc::cpu::make_random_stream(42, 3, 7);
  a.index_base = 1000;
  return a;
}

size_t payload_bytes(const BlockArgs& a, size_t count) {
  const size_t blocks = count == 0 ? 0 : (count - 1) / a.block + 1;
  return (a.nvfp4 ? 4 : 0) + blocks + (count * static_cast<size_t>(a.format.bits) + 7) / 8;
}

// Inputs that stress the element rounding: every kind of kernel test data,
// and blocks spanning many binades (tiny values next to large ones), and
// values that scale onto the element grid's ties.
std::vector<std::vector<float>> inputs(size_t count, uint64_t seed) {
  std::vector<std::vector<float>> out;
  for (Data kind : {Data::kPlain, Data::kSpecial, Data::kTies, Data::kConstant, Data::kHuge})
    out.push_back(make_data(count, kind, seed));
  std::vector<float> span(count);
  Rng rng(seed + 9);
  for (size_t i = 0; i < count; ++i)
    span[i] = rng.uniform() * std::ldexp(1.0f, static_cast<int>(rng.next() % 60) - 40);
  out.push_back(span);
  // Whole zero blocks (+0 and -0) among others, and blocks so small next to
  // the largest value that nvfp4's scale rounds to zero: the blocks the
  // SIMD fast paths hand to the scalar block_scale.
  std::vector<float> holes = make_data(count, Data::kPlain, seed + 11);
  for (size_t i = 0; i < count; ++i) {
    const size_t block16 = i / 16;
    if (block16 % 3 == 1) holes[i] = (i % 2) != 0 ? -0.0f : 0.0f;
    if (block16 % 5 == 2) holes[i] *= 1e-30f;
  }
  if (count > 0) holes[count / 2] = 3e30f;
  out.push_back(holes);
  return out;
}

TEST(BlockKernels, EveryIsaMatchesScalarEncode) {
  const KernelTable* scalar = qc::cpu::kernels_for(Isa::kScalar);
  ASSERT_NE(scalar, nullptr);
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD table on this CPU";
  for (const Format& f : kFormats) {
    for (bool stochastic : {false, true}) {
      const BlockArgs a = args_for(f, stochastic);
      for (size_t count : kCounts) {
        uint64_t seed = 0;
        for (const std::vector<float>& x : inputs(count, 100 + count)) {
          ++seed;
          for (bool with_e : {false, true}) {
            std::vector<float> e0(count);
            for (size_t i = 0; i < count; ++i) e0[i] = with_e ? x[(i * 7) % count] * 0.01f : 0;
            std::vector<uint8_t> want(payload_bytes(a, count) + 16, 0xA5);
            std::vector<float> want_e = e0;
            scalar->block_encode(x.data(), with_e ? want_e.data() : nullptr, count, a, want.data());
            for (const KernelTable* k : tables) {
              SCOPED_TRACE(std::string(f.name) + (stochastic ? " stochastic" : " nearest") +
                           " " + k->name + " count " + std::to_string(count) + " input " +
                           std::to_string(seed) + (with_e ? " with e" : ""));
              std::vector<uint8_t> got(want.size(), 0xA5);
              std::vector<float> got_e = e0;
              k->block_encode(x.data(), with_e ? got_e.data() : nullptr, count, a, got.data());
              for (size_t i = 0; i < want.size(); ++i)
                ASSERT_EQ(got[i], want[i]) << "payload byte " << i << " of " << want.size() - 16;
              ASSERT_EQ(first_float_diff(got_e, want_e), -1);
            }
          }
        }
      }
    }
  }
}

// nvfp4's first pass parks each chunk's block amax in the 64-byte aligned
// line inside the chunk's code bytes: the payload at every offset from a
// line, so that the parked line is every possible place in the chunk.
TEST(BlockKernels, NvfpMatchesScalarAtEveryPayloadAlignment) {
  const KernelTable* scalar = qc::cpu::kernels_for(Isa::kScalar);
  ASSERT_NE(scalar, nullptr);
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD table on this CPU";
  const BlockArgs a = args_for(kFormats[6], false);
  ASSERT_TRUE(a.nvfp4);
  const size_t count = 5 * 16 * 16 + 23;  // 5 chunks of 16 blocks, then a tail
  const std::vector<float> x = make_data(count, Data::kPlain, 9);
  const size_t bytes = payload_bytes(a, count);
  std::vector<uint8_t> want(bytes);
  scalar->block_encode(x.data(), nullptr, count, a, want.data());
  std::vector<uint8_t> buffer(bytes + 2 * 64 + 16);
  const uintptr_t base = reinterpret_cast<uintptr_t>(buffer.data());
  uint8_t* const line = buffer.data() + ((64 - base % 64) % 64);
  for (const KernelTable* k : tables) {
    for (size_t shift = 0; shift < 64; ++shift) {
      SCOPED_TRACE(std::string(k->name) + " payload at line + " + std::to_string(shift));
      std::fill(buffer.begin(), buffer.end(), uint8_t{0xA5});
      k->block_encode(x.data(), nullptr, count, a, line + shift);
      ASSERT_EQ(std::memcmp(line + shift, want.data(), bytes), 0);
      for (uint8_t* p = buffer.data(); p < line + shift; ++p) ASSERT_EQ(*p, 0xA5);
      for (uint8_t* p = line + shift + bytes; p < buffer.data() + buffer.size(); ++p)
        ASSERT_EQ(*p, 0xA5);
    }
  }
}

// A message of 8 MiB or more parks the amax with streaming stores (past the
// caches) instead of plain ones: the same bytes.
TEST(BlockKernels, NvfpLargeMessageMatchesScalar) {
  const KernelTable* scalar = qc::cpu::kernels_for(Isa::kScalar);
  ASSERT_NE(scalar, nullptr);
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD table on this CPU";
  const BlockArgs a = args_for(kFormats[6], false);
  const size_t count = (size_t{8} << 20) / sizeof(float) + 16 * 16 + 37;
  const std::vector<float> x = make_data(count, Data::kPlain, 21);
  std::vector<uint8_t> want(payload_bytes(a, count));
  scalar->block_encode(x.data(), nullptr, count, a, want.data());
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->name);
    std::vector<uint8_t> got(want.size() + 16, 0xA5);
    k->block_encode(x.data(), nullptr, count, a, got.data() + 3);  // unaligned codes
    ASSERT_EQ(std::memcmp(got.data() + 3, want.data(), want.size()), 0);
    for (size_t i = 3 + want.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 0xA5);
  }
}

TEST(BlockKernels, EveryIsaMatchesScalarDecodeOfAnyPayload) {
  const KernelTable* scalar = qc::cpu::kernels_for(Isa::kScalar);
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD table on this CPU";
  for (const Format& f : kFormats) {
    const BlockArgs a = args_for(f, false);
    for (size_t count : kCounts) {
      // Random payloads that pass the codec's checks: nvfp4's S finite and
      // >= 0, its scale bytes without the sign bit.
      Rng rng(count + 5);
      std::vector<uint8_t> payload(payload_bytes(a, count));
      for (uint8_t& b : payload) b = static_cast<uint8_t>(rng.next());
      const size_t blocks = count == 0 ? 0 : (count - 1) / a.block + 1;
      if (f.nvfp4) {
        const float S = std::ldexp(static_cast<float>(rng.next() % 1000), -10);
        std::memcpy(payload.data(), &S, 4);
        for (size_t b = 0; b < blocks; ++b) payload[4 + b] &= 0x7F;
      } else if (blocks > 0) {
        payload[0] = 0xFF;  // a NaN block
      }
      for (bool accumulate : {false, true}) {
        std::vector<float> base = make_data(count, Data::kPlain, count);
        std::vector<float> want = base;
        scalar->block_decode(payload.data(), count, a, want.data(), accumulate);
        for (const KernelTable* k : tables) {
          SCOPED_TRACE(std::string(f.name) + " " + k->name + " count " + std::to_string(count) +
                       (accumulate ? " accumulate" : ""));
          std::vector<float> got = base;
          k->block_decode(payload.data(), count, a, got.data(), accumulate);
          const long at = first_float_diff(got, want);
          ASSERT_EQ(at, -1) << "element " << at << ": " << got[static_cast<size_t>(at)]
                            << " vs scalar " << want[static_cast<size_t>(at)];
        }
      }
    }
  }
}

}  // namespace
