// An exact allreduce of signed integers over the call's messages: the
// reduce-scatter + allgather ring, with every value packed in `width` bits
// (two's complement) on the wire. Integer addition is exact and associative,
// so every rank gets the same sums whatever the order. The caller picks a
// width that holds every partial sum (for n ranks summing w-bit values:
// w + ceil(log2 n)).
#pragma once

#include <cstdint>

#include "core/collective_context.h"

namespace qc {

// values: `count` integers in, their sums over all ranks out. width 2..56.
// `step` keeps the messages of different integer allreduces in one call apart.
Status allreduce_integers(CollectiveContext& ctx, int64_t* values, size_t count, int width,
                          uint32_t step);

// Bits needed to hold a sum of n values of `width` bits each.
int sum_width(int width, int n);

}  // namespace qc
