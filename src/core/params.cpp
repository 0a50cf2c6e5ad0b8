#include "core/params.h"

#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "core/enum_names.h"
#include "cpu/isa.h"

namespace qc {
namespace {

// strtol/strtod skip leading blanks and accept "+"; a variable is compared
// byte for byte elsewhere (isa_dispatch), so be as strict here.
bool starts_like_number(const char* text, bool allow_minus) {
  return std::isdigit(static_cast<unsigned char>(text[0])) || (allow_minus && text[0] == '-');
}

bool parse_long(const char* text, long lo, long hi, long* out) {
  if (!starts_like_number(text, lo < 0)) return false;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

template <typename T>
Status store(const char* name, const char* type, const char* allowed,
             bool (*parser)(const char*, T*), const char* text, EnvValue<T>* slot) {
  slot->raw = text;
  T value{};
  if (!parser(text, &value)) {
    static const char* const kPrefix[][2] = {
        {"enum", "one of "}, {"int", "an integer "}, {"size", "a size "},
        {"double", "a number "}, {"string", ""}};
    const char* prefix = "";
    for (const auto& p : kPrefix)
      if (std::strcmp(p[0], type) == 0) prefix = p[1];
    return invalid_argument(std::string("environment variable ") + name + "=\"" + text +
                            "\": expected " + prefix + allowed);
  }
  slot->set = true;
  slot->value = std::move(value);
  return Status::ok();
}

const ParamInfo kParamTable[] = {
#define QC_PARAM_INFO(field, name, type, ctype, parser, def, allowed, doc) \
  {name, #type, def, allowed, doc},
    QC_PARAM_LIST(QC_PARAM_INFO)
#undef QC_PARAM_INFO
};

}  // namespace

bool parse_log_level(const char* text, LogLevel* out) {
  static const struct {
    const char* word;
    const char* digit;
    LogLevel level;
  } kLevels[] = {{"none", "0", LogLevel::kNone},
                 {"warn", "1", LogLevel::kWarn},
                 {"info", "2", LogLevel::kInfo},
                 {"debug", "3", LogLevel::kDebug}};
  for (const auto& l : kLevels) {
    if (std::strcmp(text, l.word) == 0 || std::strcmp(text, l.digit) == 0) {
      *out = l.level;
      return true;
    }
  }
  return false;
}

bool parse_text(const char* text, std::string* out) {
  *out = text;
  return true;
}

bool parse_codec(const char* text, qc_codec_t* out) {
  int v = 0;
  if (!kCodecNames.lookup(text, &v)) return false;
  *out = static_cast<qc_codec_t>(v);
  return true;
}

bool parse_bits(const char* text, int* out) {
  long v = 0;
  if (!parse_long(text, 1, 8, &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_positive_int(const char* text, int* out) {
  long v = 0;
  if (!parse_long(text, 1, INT_MAX, &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_algorithm(const char* text, qc_algorithm_t* out) {
  int v = 0;
  if (!kAlgorithmNames.lookup(text, &v)) return false;
  *out = static_cast<qc_algorithm_t>(v);
  return true;
}

bool parse_flag(const char* text, int* out) {
  long v = 0;
  if (!parse_long(text, 0, 1, &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_byte_size(const char* text, size_t* out) {
  if (!starts_like_number(text, false)) return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0) return false;
  int shift = 0;
  switch (*end) {
    case '\0': break;
    case 'K': case 'k': shift = 10; ++end; break;
    case 'M': case 'm': shift = 20; ++end; break;
    case 'G': case 'g': shift = 30; ++end; break;
    default: return false;
  }
  if (*end != '\0') return false;
  if (v > (static_cast<unsigned long long>(SIZE_MAX) >> shift)) return false;
  *out = static_cast<size_t>(v << shift);
  return true;
}

bool parse_positive_seconds(const char* text, double* out) {
  if (!(starts_like_number(text, true) || text[0] == '.')) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v) || !(v > 0.0)) return false;
  *out = v;
  return true;
}

bool parse_cpu_isa(const char* text, int* out) {
  if (std::strcmp(text, "auto") == 0) {
    *out = -1;
    return true;
  }
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (std::strcmp(text, cpu::isa_name(isa)) == 0) {
      *out = static_cast<int>(isa);
      return true;
    }
  }
  return false;
}

Status parse_env_value(const char* name, const char* text, EnvParams* out) {
#define QC_PARAM_PARSE(field, var, type, ctype, parser, def, allowed, doc) \
  if (std::strcmp(name, var) == 0) return store(var, #type, allowed, parser, text, &out->field);
  QC_PARAM_LIST(QC_PARAM_PARSE)
#undef QC_PARAM_PARSE
  return invalid_argument(std::string("environment variable ") + name +
                          ": not a qc parameter (docs/parameters.md lists them)");
}

Status read_params(const EnvLookup& lookup, EnvParams* out) {
  *out = EnvParams();
  std::string errors;
  size_t count = 0;
  const ParamInfo* table = param_table(&count);
  for (size_t i = 0; i < count; ++i) {
    const char* text = lookup(table[i].name);
    // Empty counts as unset, as it always has for QC_LOG_LEVEL: `QC_X= cmd`
    // is how shells clear a variable for one command.
    if (text == nullptr || *text == '\0') continue;
    Status s = parse_env_value(table[i].name, text, out);
    if (!s) errors += (errors.empty() ? "" : "; ") + s.message();
  }
  if (!errors.empty()) return invalid_argument(errors);
  return Status::ok();
}

Status read_env_params(EnvParams* out) {
  return read_params([](const char* name) -> const char* { return std::getenv(name); }, out);
}

void apply_env_to_policy(const EnvParams& env, qc_policy_t* star_policy) {
  if (env.codec.set) star_policy->codec = env.codec.value;
  if (env.bits.set) star_policy->bits = env.bits.value;
  if (env.bucket.set) star_policy->bucket_size = env.bucket.value;
  if (env.algo.set) star_policy->algorithm = env.algo.value;
  if (env.ef.set) star_policy->error_feedback = env.ef.value;
  if (env.min_compress.set) star_policy->min_compress_bytes = env.min_compress.value;
}

double env_timeout(const EnvParams& env, double configured) {
  return env.timeout.set ? env.timeout.value : configured;
}

bool env_device_codec(const EnvParams& env) {
  return !env.device_codec.set || env.device_codec.value != 0;
}

bool env_progress_thread(const EnvParams& env) {
  return !env.progress_thread.set || env.progress_thread.value != 0;
}

size_t env_emulation_keep(const EnvParams& env) {
  return env.emulation_keep.set ? env.emulation_keep.value : kDefaultEmulationKeepBytes;
}

size_t env_pipeline_chunk(const EnvParams& env) {
  return env.pipeline_chunk.set ? env.pipeline_chunk.value : kDefaultPipelineChunkBytes;
}

bool parse_sparse_schedule(const char* text, int* out) {
  return kSparseScheduleNames.lookup(text, out);
}

int env_sparse_schedule(const EnvParams& env) {
  return env.sparse_schedule.set ? env.sparse_schedule.value : -1;
}

LogLevel env_log_level(const EnvParams& env) {
  if (env.debug.set) return env.debug.value;
  if (env.log_level.set) return env.log_level.value;
  return LogLevel::kWarn;
}

const ParamInfo* param_table(size_t* count) {
  *count = sizeof(kParamTable) / sizeof(kParamTable[0]);
  return kParamTable;
}

std::string params_markdown() {
  std::string md =
      "# Environment variables\n"
      "\n"
      "<!-- Generated by `qc-info --markdown` from QC_PARAM_LIST in src/core/params.h;\n"
      "     edit the list, not this page (tests/unit/test_params.cpp compares them). -->\n"
      "\n"
      "qc reads these variables when a communicator is created (the log settings: at\n"
      "the first log line). An unset or empty variable keeps its default. A value\n"
      "outside what the variable allows makes `qc_comm_create` and\n"
      "`qc_comm_create_local` fail with `QC_ERROR_INVALID_ARGUMENT`, and\n"
      "`qc_last_error()` names the variable, its value and what it allows.\n"
      "\n"
      "The policy variables (`QC_CODEC`, `QC_BITS`, `QC_BUCKET`, `QC_ALGO`, `QC_EF`,\n"
      "`QC_MIN_COMPRESS`) change the `\"*\"` default policy only: layers given a\n"
      "policy of their own keep it.\n"
      "\n"
      "`qc-info` prints each variable's current value and whether it came from the\n"
      "environment.\n"
      "\n"
      "| Variable | Type | Default | Allowed | Description |\n"
      "| --- | --- | --- | --- | --- |\n";
  size_t count = 0;
  const ParamInfo* table = param_table(&count);
  for (size_t i = 0; i < count; ++i) {
    const ParamInfo& p = table[i];
    const std::string def = *p.default_text ? std::string("`") + p.default_text + "`" : "(unset)";
    md += std::string("| `") + p.name + "` | " + p.type + " | " + def + " | " + p.allowed + " | " +
          p.doc + " |\n";
  }
  return md;
}

const char* build_features() {
#if defined(QC_HAVE_MPI) && defined(QC_HAVE_CUDA)
  return "mpi cuda";
#elif defined(QC_HAVE_MPI)
  return "mpi";
#elif defined(QC_HAVE_CUDA)
  return "cuda";
#else
  return "none";
#endif
}

}  // namespace qc
