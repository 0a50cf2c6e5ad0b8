#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "cpu/codec_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace qc {
namespace cpu {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// Clang before 15 does not know "f16c" in __builtin_cpu_supports (a compile
// error), so ask CPUID directly: leaf 1, ECX bit 29.
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

bool cpu_has(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                            cpu_has_f16c();
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

const KernelTable* choose() {
  // QC_CPU_ISA forces a path (tests run every path this way); an unknown or
  // unavailable value falls back to the best available, never to a crash.
  const char* forced = std::getenv("QC_CPU_ISA");
  if (forced != nullptr) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (std::strcmp(forced, isa_name(isa)) == 0) {
        if (const KernelTable* t = kernels_for(isa)) return t;
      }
    }
  }
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (const KernelTable* t = kernels_for(isa)) return t;
  }
  return scalar_kernels();
}

}  // namespace

const KernelTable* kernels_for(Isa isa) {
  if (!cpu_has(isa)) return nullptr;
  switch (isa) {
    case Isa::kScalar: return scalar_kernels();
    case Isa::kAvx2: return avx2_kernels();
    case Isa::kAvx512: return avx512_kernels();
  }
  return nullptr;
}

const KernelTable& kernels() {
  // A function-local static: initialised once, thread-safe, never changed.
  static const KernelTable* const table = choose();
  return *table;
}

}  // namespace cpu
}  // namespace qc
