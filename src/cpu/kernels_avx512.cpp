// AVX-512 kernels: bit-identical to the scalar reference (codec_kernels.h).
#include "cpu/codec_kernels.h"

namespace qc {
namespace cpu {

const KernelTable* avx512_kernels() { return nullptr; }  // not written yet

}  // namespace cpu
}  // namespace qc
