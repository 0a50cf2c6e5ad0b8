// Pipelining's pieces (ScheduleShape::chunk): a block cut into pieces of
// `chunk` values from its start, the last one shorter. Every block of a
// call gets as many piece slots as the largest has pieces (the others'
// last ones may be empty), so slot numbers are alike on every rank.
#pragma once

#include <cstddef>

#include "core/schedules/partition.h"

namespace qc {

struct Pieces {
  size_t chunk = 0;  // 0: one piece, the whole block
  size_t count = 1;  // pieces per block

  // The pieces of blocks of at most `largest` values.
  static Pieces of(size_t largest, size_t chunk) {
    Pieces p;
    if (chunk == 0 || largest <= chunk) return p;
    p.chunk = chunk;
    p.count = (largest + chunk - 1) / chunk;
    return p;
  }
  bool pipelined() const { return count > 1; }

  // Piece `index` of `block`: its element range (empty past the block's end).
  Range of_block(const Range& block, size_t index) const {
    if (chunk == 0) return block;
    Range r;
    const size_t skip = index * chunk;
    r.begin = block.begin + (skip < block.count ? skip : block.count);
    r.count = skip < block.count ? (block.count - skip < chunk ? block.count - skip : chunk) : 0;
    return r;
  }
};

}  // namespace qc
