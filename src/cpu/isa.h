// The CPU kernels' instruction sets and their names (QC_CPU_ISA's values):
// apart from the kernels (cpu/codec_kernels.h) so that the parameters
// (core/params.h) parse the names without depending on the kernels.
#pragma once

namespace qc {
namespace cpu {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

inline const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

}  // namespace cpu
}  // namespace qc
