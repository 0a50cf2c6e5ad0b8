#include "core/enum_names.h"

#include <cstring>

namespace qc {
namespace {

const EnumName kCodecs[] = {
    {QC_CODEC_NONE, "none"},     {QC_CODEC_FP16, "fp16"},
    {QC_CODEC_BF16, "bf16"},     {QC_CODEC_MINMAX, "minmax"},
    {QC_CODEC_QSGD, "qsgd"},     {QC_CODEC_GLOBAL_LINEAR, "global_linear"},
    {QC_CODEC_GLOBAL_EXP, "global_exp"}, {QC_CODEC_ONEBIT, "onebit"},
    {QC_CODEC_TOPK, "topk"},     {QC_CODEC_MXFP8, "mxfp8"},
    {QC_CODEC_MXFP8_E5M2, "mxfp8_e5m2"}, {QC_CODEC_MXFP6, "mxfp6"},
    {QC_CODEC_MXFP6_E3M2, "mxfp6_e3m2"}, {QC_CODEC_MXFP4, "mxfp4"},
    {QC_CODEC_MXINT8, "mxint8"}, {QC_CODEC_NVFP4, "nvfp4"},
};
const EnumName kAlgorithms[] = {
    {QC_ALGO_AUTO, "auto"}, {QC_ALGO_RING, "ring"}, {QC_ALGO_RECURSIVE_DOUBLING, "recursive_doubling"},
    {QC_ALGO_SRA, "sra"},   {QC_ALGO_TREE, "tree"}, {QC_ALGO_NATIVE, "native"},
};
// What people type for the long name.
const EnumName kAlgorithmAliases[] = {{QC_ALGO_RECURSIVE_DOUBLING, "rd"}};
const EnumName kDtypes[] = {
    {QC_DTYPE_FLOAT32, "float32"}, {QC_DTYPE_FLOAT16, "float16"}, {QC_DTYPE_BFLOAT16, "bfloat16"},
};
// C's and the frameworks' short spellings.
const EnumName kDtypeAliases[] = {
    {QC_DTYPE_FLOAT32, "float"}, {QC_DTYPE_FLOAT32, "fp32"}, {QC_DTYPE_FLOAT16, "half"},
    {QC_DTYPE_FLOAT16, "fp16"},  {QC_DTYPE_BFLOAT16, "bf16"},
};
const EnumName kReduceOps[] = {{QC_OP_SUM, "sum"}, {QC_OP_AVG, "avg"}};
const EnumName kRoundings[] = {{QC_ROUND_NEAREST_EVEN, "nearest"},
                               {QC_ROUND_STOCHASTIC, "stochastic"},
                               {QC_ROUND_AUTO, "auto"}};
// The enum's own spelling.
const EnumName kRoundingAliases[] = {{QC_ROUND_NEAREST_EVEN, "nearest_even"}};
const EnumName kScales[] = {
    {QC_SCALE_AUTO, "auto"}, {QC_SCALE_L2, "l2"}, {QC_SCALE_MAX_ABS, "max_abs"}};
const EnumName kTransports[] = {
    {QC_TRANSPORT_LOCAL, "local"}, {QC_TRANSPORT_MPI, "mpi"}, {QC_TRANSPORT_NCCL, "nccl"},
    {QC_TRANSPORT_CALLBACKS, "callbacks"},
};
const EnumName kAdaptMethods[] = {{QC_ADAPT_KMEANS, "kmeans"}, {QC_ADAPT_LINEAR, "linear"}};
const EnumName kSparseSchedules[] = {{static_cast<int>(SparseSchedule::kAuto), "auto"},
                                     {static_cast<int>(SparseSchedule::kAllgather), "allgather"},
                                     {static_cast<int>(SparseSchedule::kScatterReduce), "sra"},
                                     {static_cast<int>(SparseSchedule::kDensify), "densify"}};

template <size_t N>
constexpr EnumNames table(const char* what, const EnumName (&names)[N]) {
  return EnumNames{what, names, N, nullptr, 0};
}
template <size_t N, size_t M>
constexpr EnumNames table(const char* what, const EnumName (&names)[N],
                          const EnumName (&aliases)[M]) {
  return EnumNames{what, names, N, aliases, M};
}

}  // namespace

const EnumNames kCodecNames = table("codec", kCodecs);
const EnumNames kAlgorithmNames = table("algorithm", kAlgorithms, kAlgorithmAliases);
const EnumNames kDtypeNames = table("dtype", kDtypes, kDtypeAliases);
const EnumNames kReduceOpNames = table("reduce op", kReduceOps);
const EnumNames kRoundingNames = table("rounding", kRoundings, kRoundingAliases);
const EnumNames kScaleNames = table("scale", kScales);
const EnumNames kTransportNames = table("transport", kTransports);
const EnumNames kAdaptMethodNames = table("adapt method", kAdaptMethods);
const EnumNames kSparseScheduleNames = table("sparse schedule", kSparseSchedules);

const char* EnumNames::name_of(int value) const {
  for (size_t i = 0; i < count; ++i) {
    if (names[i].value == value) return names[i].name;
  }
  return nullptr;
}

bool EnumNames::lookup(const char* text, int* value) const {
  if (text == nullptr) return false;
  for (const EnumName* list : {names, aliases}) {
    const size_t n = list == names ? count : alias_count;
    for (size_t i = 0; i < n; ++i) {
      if (std::strcmp(text, list[i].name) == 0) {
        *value = list[i].value;
        return true;
      }
    }
  }
  return false;
}

std::string EnumNames::list() const {
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out += ", ";
    out += names[i].name;
  }
  return out;
}

const char* codec_name(qc_codec_t codec) {
  const char* name = kCodecNames.name_of(codec);
  return name != nullptr ? name : "unknown";
}

const char* algorithm_name(qc_algorithm_t algorithm) {
  const char* name = kAlgorithmNames.name_of(algorithm);
  return name != nullptr ? name : "unknown";
}

const char* sparse_schedule_name(SparseSchedule schedule) {
  const char* name = kSparseScheduleNames.name_of(static_cast<int>(schedule));
  return name != nullptr ? name : "unknown";
}

}  // namespace qc
