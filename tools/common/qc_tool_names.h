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

}  // namespace qctool
