// Facts about the element types of the ABI.
#pragma once

#include <cstddef>

#include "core/enum_names.h"
#include "qc.h"

namespace qc {

inline bool dtype_is_valid(int dtype) {
  return dtype == QC_DTYPE_FLOAT32 || dtype == QC_DTYPE_FLOAT16 || dtype == QC_DTYPE_BFLOAT16;
}

inline size_t dtype_size(qc_dtype_t dtype) { return dtype == QC_DTYPE_FLOAT32 ? 4 : 2; }

// For messages: the canonical name (core/enum_names.h), or "unknown".
inline const char* dtype_name(qc_dtype_t dtype) {
  const char* name = kDtypeNames.name_of(dtype);
  return name != nullptr ? name : "unknown";
}

}  // namespace qc
