// Native allreduce for the global codecs (paper 002; paper 001 §B.1: agree
// on the scale first, then sum integers):
//  1. every rank computes its share of the scale of z = t (+ e): its sum of
//     squares (L2 norm) or its max |z| (max-abs scale); the shares travel as
//     exact integers (one slot per rank) and every rank adds them in rank
//     order, or takes the largest, so all get the same float scale;
//  2. every rank encodes z once on the shared grid (error-compensated when
//     the call has an error buffer);
//  3. the codes are summed as integers, exactly;
//  4. every rank turns the integer sums into floats once.
// No value is requantized, whatever the rank count.
//
// global_linear: a code is sign | level with value level * norm / M, so the
// integer is the signed level, M = 2^(bits-1) - 1, and the sum of n of them
// needs bits + ceil(log2 n) bits.
// global_exp: level m > 0 has value norm * 2^(m - M), i.e. 2^(m - 1) units of
// norm * 2^(1 - M): fixed point with a single bit set. It is split into limbs
// of 16 bits (one limb for bits <= 5), each summed as an integer of
// min(16, M) + 1 + ceil(log2 n) bits; the limbs are recombined in double,
// high to low.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/algorithms/integer_allreduce.h"
#include "cpu/bitstream.h"
#include "cpu/codec_kernels.h"

namespace qc {
namespace {
enum NativeStep : uint32_t { kNormShares = 0x10000, kCodeSums = 0x20000 };
constexpr int kExpLimbBits = 16;

int exp_limbs(int M) { return (M + kExpLimbBits - 1) / kExpLimbBits; }

}  // namespace

namespace {

// Step 1: the scale every rank agrees on, the same float everywhere.
Status agreed_norm(CollectiveContext& ctx, const GlobalCodec& codec, const float* data,
                   const float* residual, size_t count, float* norm) {
  const int n = ctx.size();
  const int r = ctx.rank();
  std::vector<int64_t> shares(static_cast<size_t>(n), 0);
  const bool max_abs = codec.max_abs_scale();
  const float mine = max_abs ? GlobalCodec::max_abs(data, residual, count)
                             : GlobalCodec::sum_of_squares(data, residual, count);
  uint32_t mine_bits;
  std::memcpy(&mine_bits, &mine, 4);
  shares[static_cast<size_t>(r)] = mine_bits;  // non-negative in 33 bits
  QC_RETURN_IF_ERROR(allreduce_integers(ctx, shares.data(), shares.size(), 33, kNormShares));
  float total = 0.0f;
  for (int k = 0; k < n; ++k) {
    const uint32_t b = static_cast<uint32_t>(shares[static_cast<size_t>(k)]);
    float share;
    std::memcpy(&share, &b, 4);
    if (!max_abs) total += share;
    else if (std::isnan(share) || share > total) total = share;  // a NaN share wins
  }
  *norm = max_abs ? cpu::global_max_abs_scale(total) : std::sqrt(total);
  return Status::ok();
}

}  // namespace

Status allreduce_native(CollectiveContext& ctx, GlobalCodec& codec, float* data,
                        const float* residual, size_t count, int bits, ScaleMemory* scales,
                        bool refresh) {
  const int n = ctx.size();

  // 1. The norm every rank agrees on: computed, or kept from the period's
  // first call (values above it saturate at the top level, and with error
  // feedback the excess stays in the residual). Without step 1's messages,
  // a transport's native integer sum needs the agreement check by itself.
  float norm = 0.0f;
  if (scales != nullptr && !refresh && std::isfinite(scales->norm) && scales->norm > 0) {
    norm = scales->norm;
    if (ctx.has_native_integer_allreduce()) QC_RETURN_IF_ERROR(ctx.agree());
  } else {
    QC_RETURN_IF_ERROR(agreed_norm(ctx, codec, data, residual, count, &norm));
    if (scales != nullptr) scales->norm = norm;
  }
  if (!std::isfinite(norm)) {
    // Some rank has a NaN or Inf, or the squares overflow: DESIGN promise 5,
    // every element of the result is NaN. Encode anyway so that the error
    // buffer is treated as in every other algorithm (its slots become 0).
    QC_RETURN_IF_ERROR(codec.set_global_norm(std::numeric_limits<float>::quiet_NaN()));
    Message* msg = ctx.messages(1);
    QC_RETURN_IF_ERROR(ctx.encode(data, count, 0, msg));
    codec.clear_global_norm();
    for (size_t i = 0; i < count; ++i) data[i] = std::numeric_limits<float>::quiet_NaN();
    return Status::ok();
  }

  // 2. Encode on the shared grid.
  QC_RETURN_IF_ERROR(codec.set_global_norm(norm));
  // A scratch message of the context (no allocation once warm); the codes
  // are read out below, before the integer allreduce reuses the scratch.
  Message* encoded = ctx.messages(1);
  Status s = ctx.encode(data, count, 0, encoded);
  codec.clear_global_norm();
  QC_RETURN_IF_ERROR(s);
  const uint8_t* codes = encoded->payload() + kWireHeaderBytes + 4;

  const uint32_t sign_bit = 1u << (bits - 1);
  const int M = static_cast<int>(sign_bit - 1u);
  const bool linear = codec.id() == QC_CODEC_GLOBAL_LINEAR;
  const int limbs = linear ? 1 : exp_limbs(M);
  // A linear code is sign + (bits-1) magnitude bits; an exp limb holds at
  // most 2^(min(16, M) - 1), i.e. min(16, M) magnitude bits plus the sign.
  const int width = sum_width(linear ? bits : std::min(kExpLimbBits, M) + 1, n);
  std::vector<int64_t> sums(count * static_cast<size_t>(limbs), 0);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t code = cpu::get_code(codes, i, bits);
    const int64_t sign = (code & sign_bit) != 0 ? -1 : 1;
    const uint32_t level = code & (sign_bit - 1u);
    if (linear) {
      sums[i] = sign * static_cast<int64_t>(level);
    } else if (level > 0) {
      const uint32_t bit = level - 1;  // the value is 2^(level-1) units
      sums[i * limbs + bit / kExpLimbBits] = sign * (int64_t{1} << (bit % kExpLimbBits));
    }
  }

  // 3. Exact integer sums: the transport's own allreduce when it has one
  // (the ranks' agreement on the call was checked by the messages of step 1).
  if (ctx.has_native_integer_allreduce()) {
    QC_RETURN_IF_ERROR(ctx.native_allreduce_int64(sums.data(), sums.size(), width));
  } else {
    QC_RETURN_IF_ERROR(allreduce_integers(ctx, sums.data(), sums.size(), width, kCodeSums));
  }

  // 4. Decode once.
  if (linear) {
    const float step = norm / static_cast<float>(M);
    for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(sums[i]) * step;
  } else {
    for (size_t i = 0; i < count; ++i) {
      double units = 0.0;
      for (int k = limbs - 1; k >= 0; --k) {
        units += std::ldexp(static_cast<double>(sums[i * limbs + k]), kExpLimbBits * k);
      }
      data[i] = static_cast<float>(static_cast<double>(norm) * std::ldexp(units, 1 - M));
    }
  }
  return Status::ok();
}

}  // namespace qc
