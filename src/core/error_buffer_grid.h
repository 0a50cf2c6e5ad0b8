// The encode grid an error buffer's residuals belong to (core/error_buffer.h
// says why they need one): what the planner decides for a call and the
// buffer records.
#pragma once

#include "qc.h"

namespace qc {

// The grid codec of a fused call (qc_allreduce_segments): its segments have
// codecs of their own, so bits and bucket_size hold a hash of the layout
// (counts, layers and policies) instead, which is what must not change.
constexpr qc_codec_t kFusedGridCodec = static_cast<qc_codec_t>(255);

constexpr int kGridReduceScatter = -3;
constexpr int kGridAllgather = -4;

// The encode grid the residuals were computed on.
struct ErrorBufferGrid {
  qc_algorithm_t algorithm = QC_ALGO_AUTO;  // resolved (never AUTO once bound)
  qc_codec_t codec = QC_CODEC_NONE;
  int bits = 0;
  int bucket_size = 0;
  // Recursive doubling's partition depends on it; 0 for the other
  // allreduce algorithms; kGridReduceScatter / kGridAllgather for those
  // collectives, whose encodes are not an allreduce's (a buffer moved from
  // one collective to another starts from zero). Kept in the buffer's image.
  int group_size = 0;
  bool operator==(const ErrorBufferGrid& o) const {
    return algorithm == o.algorithm && codec == o.codec && bits == o.bits &&
           bucket_size == o.bucket_size && group_size == o.group_size;
  }
  bool operator!=(const ErrorBufferGrid& o) const { return !(*this == o); }
};

}  // namespace qc
