// Facts about the element types of the ABI.
#pragma once

#include <cstddef>

#include "qc.h"

namespace qc {

inline bool dtype_is_valid(int dtype) {
  return dtype == QC_DTYPE_FLOAT32 || dtype == QC_DTYPE_FLOAT16 || dtype == QC_DTYPE_BFLOAT16;
}

inline size_t dtype_size(qc_dtype_t dtype) { return dtype == QC_DTYPE_FLOAT32 ? 4 : 2; }

inline const char* dtype_name(qc_dtype_t dtype) {
  switch (dtype) {
    case QC_DTYPE_FLOAT32: return "float32";
    case QC_DTYPE_FLOAT16: return "float16";
    case QC_DTYPE_BFLOAT16: return "bfloat16";
  }
  return "unknown";
}

}  // namespace qc
