// Native allreduce for the global codecs (paper 002; paper 001 §B.1: agree
// on the scale first, then sum integers):
//  1. every rank computes its share of the scale of z = t (+ e): its sum of
//     squares (L2 norm) or its max |z| (max-abs scale); the shares travel
//     bit for bit (an allgather) and every rank adds them in rank order, or
//     takes the largest, so all get the same float scale;
//  2. every rank encodes z once on the shared grid (error-compensated when
//     the call has an error buffer), block j (block_range) for rank j, each
//     just before its send, so that the first codes travel while the rest
//     are encoded;
//  3. reduce-scatter: rank j receives every rank's codes of block j as they
//     were encoded (bits per value) and adds them as integers, exactly;
//  4. allgather: rank j sends its block's sums packed at the width they
//     need, bits + ceil(log2 n) (code_sums.h, packed_integers.h; THC packs
//     its sums so), and every rank turns the sums into floats once.
// No value is requantized, whatever the rank count, and no message is wider
// than its values need: on every transport, since a transport's own int32
// sum would send as many bytes as float32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/algorithms/code_sums.h"
#include "core/algorithms/packed_integers.h"
#include "core/schedules/partition.h"
#include "cpu/codec_kernels.h"

namespace qc {
namespace {

enum NativeStep : uint32_t { kCodes = 0x20000, kSums = 0x20001 };

// Bits needed to hold a sum of n values of `width` bits each.
int sum_width(int width, int n) {
  int extra = 0;
  while ((1LL << extra) < n) ++extra;
  return width + extra;
}

// Step 1: the scale every rank agrees on, the same float everywhere.
Status agreed_norm(CollectiveContext& ctx, const GlobalCodec& codec, const float* data,
                   const float* residual, size_t count, float* norm) {
  const int n = ctx.size();
  const bool max_abs = codec.max_abs_scale();
  const float mine = max_abs ? GlobalCodec::max_abs(data, residual, count)
                             : GlobalCodec::sum_of_squares(data, residual, count);
  uint32_t mine_bits;
  std::memcpy(&mine_bits, &mine, 4);
  std::vector<uint64_t> shares;
  QC_RETURN_IF_ERROR(ctx.allgather_u64(mine_bits, &shares));
  float total = 0.0f;
  for (int k = 0; k < n; ++k) {
    if (shares[static_cast<size_t>(k)] > UINT32_MAX) {
      return corrupt_data("rank " + std::to_string(k) + " sent a scale share of more than 32 bits");
    }
    const uint32_t b = static_cast<uint32_t>(shares[static_cast<size_t>(k)]);
    float share;
    std::memcpy(&share, &b, 4);
    if (!max_abs) total += share;
    else if (std::isnan(share) || share > total) total = share;  // a NaN share wins
  }
  *norm = max_abs ? cpu::global_max_abs_scale(total) : std::sqrt(total);
  return Status::ok();
}

// Steps 2, 3 and 4 in integers of type T: input encoded into msgs[0..n)
// (msgs[j] holds block j, under the global norm), msgs[n..2n-1) receive.
template <class T>
Status sum_blocks(CollectiveContext& ctx, GlobalCodec& codec, const CodeIntegers& ci,
                  const float* input, Message* msgs, size_t count, float norm, float* data) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t parts = static_cast<size_t>(n);
  const Range mine = block_range(count, parts, static_cast<size_t>(r));
  const size_t limbs = static_cast<size_t>(ci.limbs);
  const size_t most = block_range(count, parts, 0).count;  // the first block is the largest
  // A piece of 4096 values starts on a byte of any width's packed stream.
  constexpr size_t kPiece = 4096;
  T* sums = nullptr;
  ctx.integer_scratch(most * limbs + kPiece * limbs, &sums);
  T* theirs = sums + most * limbs;
  auto peer = [&](int d) { return (r + d) % n; };       // sends go to r + d
  auto from = [&](int d) { return (r - d + n) % n; };   // receives come from r - d
  auto block = [&](int rank) { return block_range(count, parts, static_cast<size_t>(rank)); };
  Message* in = msgs + n;

  // 3. Reduce-scatter: the codes as encoded.
  {
    std::vector<Request> reqs(2 * parts);
    std::vector<Message*> received;
    size_t posted = 0;
    const size_t frame = ctx.max_encoded_size(mine.count);
    for (int d = 1; d < n; ++d) {
      in[d - 1].reserve_payload(frame);
      QC_RETURN_IF_ERROR(ctx.post_recv(from(d), kCodes, &in[d - 1], &reqs[posted++]));
      received.push_back(&in[d - 1]);
    }
    // 2. Encode on the shared grid, each peer's block just before its send,
    // so that the first codes travel while the others are encoded; the own
    // block last.
    QC_RETURN_IF_ERROR(codec.set_global_norm(norm));
    Status s;
    for (int d = 1; d < n && s; ++d) {
      const int to = peer(d);
      const Range b = block(to);
      s = ctx.encode(input + b.begin, b.count, b.begin, &msgs[to]);
      if (s) s = ctx.post_send(to, kCodes, &msgs[to], ctx.max_encoded_size(b.count), &reqs[posted++]);
    }
    if (s) s = ctx.encode(input + mine.begin, mine.count, mine.begin, &msgs[r]);
    codec.clear_global_norm();
    QC_RETURN_IF_ERROR(s);
    // The own block's integers while the codes travel.
    codes_to_integers(msgs[r].payload() + kWireHeaderBytes + 4, mine.count, ci, sums);
    ctx.work_while_waiting();
    QC_RETURN_IF_ERROR(ctx.wait(reqs.data(), posted, received.data(), received.size()));
    for (int d = 1; d < n; ++d) {
      const uint8_t* codes = nullptr;
      QC_RETURN_IF_ERROR(codec.codes_of(in[d - 1].payload(), in[d - 1].payload_size(),
                                        mine.count, norm, &codes));
      add_codes_as_integers(codes, mine.count, ci, sums);
    }
  }

  // 4. Allgather of the sums, packed at the width they need.
  const int width = sum_width(ci.value_width, n);
  {
    Message& out = msgs[r];  // its codes are in `sums` by now
    const size_t bytes = packed_bytes(mine.count * limbs, width);
    out.reserve_payload(bytes);
    pack_integers(sums, mine.count * limbs, width, out.payload());
    out.set_payload_size(bytes);
    std::vector<Request> reqs(2 * parts);
    std::vector<Message*> received;
    size_t posted = 0;
    for (int d = 1; d < n; ++d) {
      in[d - 1].reserve_payload(packed_bytes(block(from(d)).count * limbs, width));
      QC_RETURN_IF_ERROR(ctx.post_recv(from(d), kSums, &in[d - 1], &reqs[posted++]));
      received.push_back(&in[d - 1]);
    }
    for (int d = 1; d < n; ++d) {
      QC_RETURN_IF_ERROR(ctx.post_send(peer(d), kSums, &out, bytes, &reqs[posted++]));
    }
    sums_to_floats(sums, mine.count, ci, norm, data + mine.begin);
    ctx.work_while_waiting();
    QC_RETURN_IF_ERROR(ctx.wait(reqs.data(), posted, received.data(), received.size()));
    for (int d = 1; d < n; ++d) {
      const Range theirs_range = block(from(d));
      const size_t want = packed_bytes(theirs_range.count * limbs, width);
      if (in[d - 1].payload_size() != want) {
        return corrupt_data("native allreduce: rank " + std::to_string(from(d)) + " sent " +
                            std::to_string(in[d - 1].payload_size()) + " bytes of sums where " +
                            std::to_string(theirs_range.count) + " values of " +
                            std::to_string(width) + " bits need " + std::to_string(want));
      }
      // In pieces that stay in cache between the two passes.
      for (size_t done = 0; done < theirs_range.count; done += kPiece) {
        const size_t piece = std::min(kPiece, theirs_range.count - done);
        unpack_integers(in[d - 1].payload() + packed_bytes(done * limbs, width), piece * limbs,
                        width, theirs);
        sums_to_floats(theirs, piece, ci, norm, data + theirs_range.begin + done);
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status allreduce_native(CollectiveContext& ctx, GlobalCodec& codec, const float* input,
                        float* data, const float* residual, size_t count, int bits, ScaleMemory* scales,
                        bool refresh) {
  // 1. The norm every rank agrees on: computed, or kept from the period's
  // first call (values above it saturate at the top level, and with error
  // feedback the excess stays in the residual). Without step 1's messages
  // the ranks' agreement is checked by step 3's.
  float norm = 0.0f;
  if (scales != nullptr && !refresh && std::isfinite(scales->norm) && scales->norm > 0) {
    norm = scales->norm;
  } else {
    QC_RETURN_IF_ERROR(agreed_norm(ctx, codec, input, residual, count, &norm));
    if (scales != nullptr) scales->norm = norm;
  }
  if (!std::isfinite(norm)) {
    // Some rank has a NaN or Inf, or the squares overflow: DESIGN promise 5,
    // every element of the result is NaN. Encode anyway so that the error
    // buffer is treated as in every other algorithm (its slots become 0).
    QC_RETURN_IF_ERROR(codec.set_global_norm(std::numeric_limits<float>::quiet_NaN()));
    Message* msg = ctx.messages(1);
    QC_RETURN_IF_ERROR(ctx.encode(input, count, 0, msg));
    codec.clear_global_norm();
    for (size_t i = 0; i < count; ++i) data[i] = std::numeric_limits<float>::quiet_NaN();
    return Status::ok();
  }

  // 2 (encoding block j for rank j, inside step 3), 3 and 4, in int32 where the sums fit (every realistic rank count): half
  // the memory traffic of int64.
  const int n = ctx.size();
  Message* msgs = ctx.messages(2 * static_cast<size_t>(n));
  const CodeIntegers ci = code_integers(codec.id(), bits);
  if (sum_width(ci.value_width, n) <= max_packed_width<int32_t>()) {
    return sum_blocks<int32_t>(ctx, codec, ci, input, msgs, count, norm, data);
  }
  if (sum_width(ci.value_width, n) > max_packed_width<int64_t>()) {
    return unsupported("native allreduce: " + std::to_string(n) +
                       " ranks' sums do not fit in 56 bits");
  }
  return sum_blocks<int64_t>(ctx, codec, ci, input, msgs, count, norm, data);
}

}  // namespace qc
