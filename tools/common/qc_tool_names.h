// The library's names of enum values for the tools' usage messages
// (qc_codec_name and friends in qc.h): one helper for every tool, so no tool
// keeps its own table.
#pragma once

#include <string>

#include "qc.h"

namespace qctool {

// "a, b, c": the names of an enum's values 0, 1, ... (the values are
// consecutive from 0; the name of the first value past them is NULL).
template <typename E>
std::string names_of(const char* (*name_of)(E)) {
  std::string out;
  for (int v = 0; name_of(static_cast<E>(v)) != nullptr; ++v) {
    out += (v > 0 ? ", " : "") + std::string(name_of(static_cast<E>(v)));
  }
  return out;
}

// Whether a policy's codec rounds stochastically, by qc.h's rule for
// QC_ROUND_AUTO (stochastic for the global codecs, nearest-even for the
// rest): what the tools' bounds and labels describe is what ran.
inline bool rounds_stochastically(const qc_policy_t& p) {
  if (p.rounding == QC_ROUND_AUTO)
    return p.codec == QC_CODEC_GLOBAL_LINEAR || p.codec == QC_CODEC_GLOBAL_EXP;
  return p.rounding == QC_ROUND_STOCHASTIC;
}

}  // namespace qctool
