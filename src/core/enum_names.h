// The names of the ABI's enum values: one table per enum, the spelling of
// qc_codec_name() and friends (qc.h), the QC_* environment (core/params.h),
// messages, tools and bindings. Apart from the rest of core so that the
// parameters, which the log reads QC_DEBUG through, need nothing that logs.
#pragma once

#include <cstddef>
#include <string>

#include "qc.h"

namespace qc {

struct EnumName {
  int value;
  const char* name;
};

// One enum's names: each value's canonical name, and aliases that lookup
// accepts too ("rd" for recursive_doubling).
struct EnumNames {
  const char* what;  // "codec": what a value is, for messages
  const EnumName* names;
  size_t count;
  const EnumName* aliases;
  size_t alias_count;

  // The canonical name of `value`; nullptr for a value not in the table.
  const char* name_of(int value) const;
  // The value named `text` exactly (canonical or alias).
  bool lookup(const char* text, int* value) const;
  // "none, fp16, ...": the canonical names, for messages.
  std::string list() const;
};

extern const EnumNames kCodecNames;
extern const EnumNames kAlgorithmNames;
extern const EnumNames kDtypeNames;
extern const EnumNames kReduceOpNames;
extern const EnumNames kRoundingNames;
extern const EnumNames kScaleNames;
extern const EnumNames kTransportNames;
extern const EnumNames kAdaptMethodNames;

// Not an ABI enum: the sparse allreduce's schedules (sparse_plan.h), named
// here because QC_SPARSE_SCHEDULE (params.h) spells them.
enum class SparseSchedule : int {
  kAuto = -1,          // by the model
  kAllgather = 0,      // every rank's rows to every rank
  kScatterReduce = 1,  // rows to their index's owner, owners' sums allgathered
  kDensify = 2,        // the dense table's allreduce (dense output only)
};
extern const EnumNames kSparseScheduleNames;

// For messages: the canonical name, or "unknown".
const char* codec_name(qc_codec_t codec);
const char* algorithm_name(qc_algorithm_t algorithm);
const char* sparse_schedule_name(SparseSchedule schedule);

}  // namespace qc
