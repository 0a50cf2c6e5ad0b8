// Ring allreduce, stream-ordered (paper 000 Alg. 2 as in ring.cpp): the same
// blocks, encodes, random keys and decodes, so the same result bit for bit,
// but every step is enqueued on the call's stream (kernels and the
// transport's device sends and receives) and nothing is awaited, so the call
// returns before the GPU has done its work, as an NCCL collective does.
//
// The payloads live in device memory, one slot per block: a block's slot
// holds what this rank last encoded or received of it. A step sends one slot
// and receives into another (never the same: the blocks differ), and the
// stream orders each slot's decode before its next encode, so n slots serve
// the reduce-scatter and the allgather. No envelope or block list travels:
// the agreement before the call fixed the codec and every block's size.
#include "core/algorithms/algorithm.h"
#include "core/algorithms/partition.h"
#include "core/policy.h"

#include <string>
#include <vector>

namespace qc {
namespace {

size_t mod(long long a, int n) { return static_cast<size_t>(((a % n) + n) % n); }

// Block b's payload size and its slot's offset; the total in *bytes.
// `payload_of(count, &bytes)`: the payload size of a block of count values.
template <typename PayloadOf>
Status lay_out(PayloadOf&& payload_of, size_t count, int n, std::vector<size_t>* sizes,
               std::vector<size_t>* offsets, size_t* bytes) {
  sizes->assign(static_cast<size_t>(n), 0);
  offsets->assign(static_cast<size_t>(n), 0);
  size_t at = 0;
  for (size_t b = 0; b < static_cast<size_t>(n); ++b) {
    QC_RETURN_IF_ERROR(
        payload_of(block_range(count, static_cast<size_t>(n), b).count, &(*sizes)[b]));
    (*offsets)[b] = at;
    at += device_payload_slot((*sizes)[b]);
  }
  *bytes = at;
  return Status::ok();
}

}  // namespace

Status ring_enqueued_payload_bytes(const Codec& codec, size_t count, int ranks, size_t* bytes) {
  std::vector<size_t> sizes, offsets;
  return lay_out(
      [&](size_t n, size_t* payload) {
        WireHeader h;
        if (!codec.header_for(n, &h)) {
          return internal_error(std::string("codec ") + codec_name(codec.id()) +
                                " has no fixed payload size for the enqueued ring's blocks");
        }
        *payload = h.payload_bytes;
        return Status::ok();
      },
      count, ranks, &sizes, &offsets, bytes);
}

Status allreduce_ring_enqueued(CollectiveContext& ctx, float* data, size_t count) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  std::vector<size_t> sizes, offsets;
  size_t total = 0;
  QC_RETURN_IF_ERROR(lay_out([&](size_t c, size_t* p) { return ctx.payload_bytes(c, p); }, count,
                             n, &sizes, &offsets, &total));
  if (total > ctx.device_payload_capacity()) {
    return internal_error("the enqueued ring needs " + std::to_string(total) +
                          " bytes of device payloads, " +
                          std::to_string(ctx.device_payload_capacity()) + " reserved");
  }
  uint8_t* const base = ctx.device_payloads();
  auto slot = [&](size_t b) { return base + offsets[b]; };
  auto range = [&](size_t b) { return block_range(count, static_cast<size_t>(n), b); };

  // Step s: encode block r-s (own data at s=0, then the partial sum of the
  // last step), send it right, receive block r-s-1 from the left and add it.
  for (int s = 0; s < n - 1; ++s) {
    const size_t send = mod(r - s, n);
    const size_t recv = mod(r - s - 1, n);
    QC_RETURN_IF_ERROR(ctx.encode_payload(data + range(send).begin, range(send).count,
                                          range(send).begin, slot(send)));
    QC_RETURN_IF_ERROR(
        ctx.enqueue_exchange(right, slot(send), sizes[send], left, slot(recv), sizes[recv]));
    QC_RETURN_IF_ERROR(ctx.decode_payload(slot(recv), data + range(recv).begin,
                                          range(recv).count, /*accumulate=*/true));
  }

  // Rank r holds the full sum of block r+1: encoded once, its bytes then go
  // round the ring unchanged, and every rank decodes every block (its own
  // too), so all ranks end with the same values.
  const size_t owned = mod(r + 1, n);
  QC_RETURN_IF_ERROR(ctx.encode_payload(data + range(owned).begin, range(owned).count,
                                        range(owned).begin, slot(owned)));
  for (int s = 0; s < n - 1; ++s) {
    const size_t send = mod(r + 1 - s, n);
    const size_t recv = mod(r - s, n);
    QC_RETURN_IF_ERROR(
        ctx.enqueue_exchange(right, slot(send), sizes[send], left, slot(recv), sizes[recv]));
  }
  for (size_t b = 0; b < static_cast<size_t>(n); ++b) {
    QC_RETURN_IF_ERROR(
        ctx.decode_payload(slot(b), data + range(b).begin, range(b).count, /*accumulate=*/false));
  }
  return Status::ok();
}

}  // namespace qc
