// Balanced split of `total` elements into `parts` contiguous blocks: the
// first total % parts blocks get one extra element. Empty blocks are fine.
#pragma once

#include <algorithm>
#include <cstddef>

namespace qc {

struct Range {
  size_t begin = 0;
  size_t count = 0;
  size_t end() const { return begin + count; }
};

inline Range block_range(size_t total, size_t parts, size_t index) {
  const size_t base = total / parts;
  const size_t extra = total % parts;
  Range r;
  r.begin = index * base + std::min(index, extra);
  r.count = base + (index < extra ? 1 : 0);
  return r;
}

// Blocks [first, last) as one element range.
inline Range blocks_range(size_t total, size_t parts, size_t first, size_t last) {
  const Range a = block_range(total, parts, first);
  Range r;
  r.begin = a.begin;
  r.count = (last > first ? block_range(total, parts, last - 1).end() : a.begin) - a.begin;
  return r;
}

}  // namespace qc
