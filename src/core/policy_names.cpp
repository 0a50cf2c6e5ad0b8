#include "core/policy_names.h"

namespace qc {

const char* codec_name(qc_codec_t codec) {
  switch (codec) {
    case QC_CODEC_NONE: return "none";
    case QC_CODEC_FP16: return "fp16";
    case QC_CODEC_BF16: return "bf16";
    case QC_CODEC_MINMAX: return "minmax";
    case QC_CODEC_QSGD: return "qsgd";
    case QC_CODEC_GLOBAL_LINEAR: return "global_linear";
    case QC_CODEC_GLOBAL_EXP: return "global_exp";
    case QC_CODEC_ONEBIT: return "onebit";
    case QC_CODEC_TOPK: return "topk";
  }
  return "unknown";
}

const char* algorithm_name(qc_algorithm_t algorithm) {
  switch (algorithm) {
    case QC_ALGO_AUTO: return "auto";
    case QC_ALGO_RING: return "ring";
    case QC_ALGO_RECURSIVE_DOUBLING: return "recursive_doubling";
    case QC_ALGO_SRA: return "sra";
    case QC_ALGO_TREE: return "tree";
    case QC_ALGO_NATIVE: return "native";
  }
  return "unknown";
}

}  // namespace qc
