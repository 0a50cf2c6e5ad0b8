// SRA's reduction of the block a rank owns, shared by sra.cpp and
// sra_enqueued.cpp: the host and the stream-ordered SRA must add in the same
// order to give the same bits, so the order lives here once.
#pragma once

#include <cstddef>

#include "core/collective_context.h"

namespace qc {

// *sum = the rank's own `count` values `own` plus every peer's decoded
// contribution (`add_peer(from, sum)` decodes rank from's and accumulates
// it), added in rank order so the sum does not depend on arrival order.
template <typename AddPeer>
Status sum_in_rank_order(CollectiveContext& ctx, const float* own, size_t count,
                         AddPeer&& add_peer, float** sum) {
  QC_RETURN_IF_ERROR(ctx.zeroed_values(count, sum));
  for (int from = 0; from < ctx.size(); ++from) {
    QC_RETURN_IF_ERROR(from == ctx.rank() ? ctx.add_values(*sum, own, count)
                                          : add_peer(from, *sum));
  }
  return Status::ok();
}

}  // namespace qc
