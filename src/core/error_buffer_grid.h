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

// The encode grid the residuals were computed on.
struct ErrorBufferGrid {
  qc_algorithm_t algorithm = QC_ALGO_AUTO;  // resolved (never AUTO once bound)
  qc_codec_t codec = QC_CODEC_NONE;
  int bits = 0;
  int bucket_size = 0;
  int group_size = 0;  // recursive doubling's partition depends on it (0 otherwise)
  bool operator==(const ErrorBufferGrid& o) const {
    return algorithm == o.algorithm && codec == o.codec && bits == o.bits &&
           bucket_size == o.bucket_size && group_size == o.group_size;
  }
  bool operator!=(const ErrorBufferGrid& o) const { return !(*this == o); }
};

}  // namespace qc
