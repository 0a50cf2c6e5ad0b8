// fuzz_params: the QC_* environment-variable parser (src/core/params.h) on
// arbitrary names and values.
//
// The input is lines "NAME=VALUE" (a line without '=' is a name with an empty
// value). Each line goes through parse_env_value; every line together is a
// fake environment for read_params (the table-driven entry point), whose
// result is then applied to the "*" policy (apply_env_to_policy,
// validate_policy), env_timeout and env_log_level. Checked against reference
// parsers written here from QC_PARAM_LIST's "allowed" texts:
//  - an unknown name is INVALID_ARGUMENT and the message names it;
//  - a known name succeeds exactly when the reference accepts the text, then
//    stores the reference's value (and the raw text); a refusal is
//    INVALID_ARGUMENT naming the variable and leaves the field unset;
//  - read_params fails exactly when some set, non-empty variable is refused,
//    and fills every good one either way.
// Seeds: tests/fuzz/corpus/fuzz_params.
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/policy.h"
#include "fuzz_common.h"

namespace {

using qc::EnvParams;
using qc::Status;

bool all_digits(const std::string& s, size_t end) {
  if (end == 0) return false;
  for (size_t i = 0; i < end; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// Decimal digits -> value; false when it does not fit in 64 bits.
bool digits_value(const std::string& s, size_t end, uint64_t* out) {
  uint64_t v = 0;
  for (size_t i = 0; i < end; ++i) {
    const uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool ref_int(const std::string& s, uint64_t lo, uint64_t hi, int* out) {
  uint64_t v = 0;
  if (!all_digits(s, s.size()) || !digits_value(s, s.size(), &v)) return false;
  if (v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

int index_of(const std::string& s, std::initializer_list<const char*> words) {
  int i = 0;
  for (const char* w : words) {
    if (s == w) return i;
    ++i;
  }
  return -1;
}

// What each variable must accept, and the value it must store, as a double
// (log levels, enums and isas as their index). Returns false when refused.
bool reference(const std::string& name, const std::string& text, double* value, bool* known) {
  *known = true;
  int i = -1;
  if (name == "QC_DEBUG" || name == "QC_LOG_LEVEL") {
    i = index_of(text, {"none", "warn", "info", "debug"});
    if (i < 0) i = index_of(text, {"0", "1", "2", "3"});
  } else if (name == "QC_DEBUG_FILE") {
    i = 0;
  } else if (name == "QC_CODEC") {
    i = index_of(text, {"none", "fp16", "bf16", "minmax", "qsgd", "global_linear", "global_exp",
                        "onebit", "topk"});
  } else if (name == "QC_BITS") {
    if (!ref_int(text, 1, 8, &i)) i = -1;
  } else if (name == "QC_BUCKET") {
    if (!ref_int(text, 1, INT_MAX, &i)) i = -1;
  } else if (name == "QC_ALGO") {
    i = text == "rd" ? 2 : index_of(text, {"auto", "ring", "recursive_doubling", "sra", "tree", "native"});
  } else if (name == "QC_EF" || name == "QC_DEVICE_CODEC" || name == "QC_PROGRESS_THREAD") {
    if (!ref_int(text, 0, 1, &i)) i = -1;
  } else if (name == "QC_MIN_COMPRESS" || name == "QC_PIPELINE_CHUNK" ||
             name == "QC_EMULATION_KEEP") {
    size_t end = text.size();
    int shift = 0;
    if (end > 0) {
      switch (text[end - 1]) {
        case 'K': case 'k': shift = 10; --end; break;
        case 'M': case 'm': shift = 20; --end; break;
        case 'G': case 'g': shift = 30; --end; break;
        default: break;
      }
    }
    uint64_t v = 0;
    if (!all_digits(text, end) || !digits_value(text, end, &v)) return false;
    if (v > (static_cast<uint64_t>(SIZE_MAX) >> shift)) return false;
    *value = static_cast<double>(v << shift);
    return true;
  } else if (name == "QC_TIMEOUT") {
    // "> 0 seconds": a finite positive decimal (strtod syntax, no leading
    // blank or '+', the whole text).
    const char c = text.empty() ? '\0' : text[0];
    if (!((c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (errno != 0 || *end != '\0' || !std::isfinite(v) || !(v > 0)) return false;
    *value = v;
    return true;
  } else if (name == "QC_SPARSE_SCHEDULE") {
    // auto is -1 (chosen per call), then the schedules 0..2
    i = index_of(text, {"auto", "allgather", "sra", "densify"});
    if (i >= 0) {
      *value = i - 1;
      return true;
    }
  } else if (name == "QC_CPU_ISA") {
    // auto is -1 (let the dispatcher choose), then the Isa values 0..2
    if (text == "auto") {
      *value = -1;
      return true;
    }
    i = index_of(text, {"scalar", "avx2", "avx512"});
  } else {
    *known = false;
    return false;
  }
  if (i < 0) return false;
  *value = i;
  return true;
}

// The stored value of `name` in *p as a double, and whether it is set.
bool stored(const EnvParams& p, const std::string& name, double* value, std::string* raw) {
#define QC_FUZZ_STORED(field, var, type, ctype, parser, def, allowed, doc) \
  if (name == var) {                                                       \
    *raw = p.field.raw;                                                    \
    *value = as_double(p.field.value);                                     \
    return p.field.set;                                                    \
  }
  struct {
    double operator()(qc::LogLevel v) const { return static_cast<int>(v); }
    double operator()(const std::string&) const { return 0; }
    double operator()(qc_codec_t v) const { return static_cast<int>(v); }
    double operator()(qc_algorithm_t v) const { return static_cast<int>(v); }
    double operator()(int v) const { return v; }
    double operator()(size_t v) const { return static_cast<double>(v); }
    double operator()(double v) const { return v; }
  } as_double;
  QC_PARAM_LIST(QC_FUZZ_STORED)
#undef QC_FUZZ_STORED
  QC_FUZZ_CHECK(false, "no field for %s", name.c_str());
  return false;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Every variable of QC_PARAM_LIST has a reference above: a variable added
// without one fails the first input, not only the run that happens to
// generate its name (QC_SPARSE_SCHEDULE was missed that way).
void check_reference_covers_every_variable() {
  static bool checked = false;
  if (checked) return;
  checked = true;
  double value = 0;
  bool known = false;
#define QC_FUZZ_KNOWN(field, var, type, ctype, parser, def, allowed, doc) \
  reference(var, "", &value, &known);                                      \
  QC_FUZZ_CHECK(known, "the fuzzer's reference lacks %s", var);
  QC_PARAM_LIST(QC_FUZZ_KNOWN)
#undef QC_FUZZ_KNOWN
}

void check_one(const std::string& name, const std::string& text) {
  check_reference_covers_every_variable();
  EnvParams p;
  const Status s = qc::parse_env_value(name.c_str(), text.c_str(), &p);
  double want = 0;
  bool known = false;
  const bool ok = reference(name, text, &want, &known);
  if (!known) {
    QC_FUZZ_CHECK(s.code() == QC_ERROR_INVALID_ARGUMENT && contains(s.message(), name),
                  "unknown name \"%s\": %s (%s)", name.c_str(), qc_status_string(s.code()),
                  s.message().c_str());
    return;
  }
  double got = 0;
  std::string raw;
  const bool set = stored(p, name, &got, &raw);
  QC_FUZZ_CHECK(raw == text, "%s: raw text not kept", name.c_str());
  if (ok) {
    QC_FUZZ_CHECK(s.is_ok() && set, "%s=\"%s\" refused: %s", name.c_str(), text.c_str(), s.message().c_str());
    QC_FUZZ_CHECK(got == want, "%s=\"%s\" stored %.17g, expected %.17g", name.c_str(), text.c_str(), got, want);
  } else {
    QC_FUZZ_CHECK(s.code() == QC_ERROR_INVALID_ARGUMENT && !set && contains(s.message(), name),
                  "%s=\"%s\" accepted (%s), the reference refuses it", name.c_str(), text.c_str(),
                  s.message().c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Lines NAME=VALUE; a C string ends at a NUL, as getenv's would.
  std::map<std::string, std::string> env;
  size_t start = 0;
  while (start <= size) {
    size_t end = start;
    while (end < size && data[end] != '\n') ++end;
    std::string line(reinterpret_cast<const char*>(data) + start, end - start);
    line = line.c_str();
    const size_t eq = line.find('=');
    const std::string name = line.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : line.substr(eq + 1);
    check_one(name, value);
    env[name] = value;
    start = end + 1;
  }

  EnvParams p;
  const Status s = qc::read_params(
      [&env](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      &p);
  bool all_good = true;
  size_t count = 0;
  const qc::ParamInfo* table = qc::param_table(&count);
  for (size_t i = 0; i < count; ++i) {
    const std::string name = table[i].name;
    auto it = env.find(name);
    double want = 0, got = 0;
    bool known = false;
    std::string raw;
    const bool present = it != env.end() && !it->second.empty();
    const bool ok = present && reference(name, it->second, &want, &known);
    const bool set = stored(p, name, &got, &raw);
    if (present && !ok) {
      all_good = false;
      QC_FUZZ_CHECK(contains(s.message(), name), "read_params: the error does not name %s", name.c_str());
    }
    QC_FUZZ_CHECK(set == ok, "read_params: %s set %d, expected %d", name.c_str(), set, ok);
    if (ok) QC_FUZZ_CHECK(got == want, "read_params: %s stored %.17g, want %.17g", name.c_str(), got, want);
  }
  QC_FUZZ_CHECK(s.is_ok() == all_good, "read_params gave %s with all_good %d: %s",
                qc_status_string(s.code()), all_good, s.message().c_str());

  qc_policy_t policy = qc::default_policy();
  qc::apply_env_to_policy(p, &policy);
  (void)qc::validate_policy(policy, "QC_*");
  if (p.bits.set) QC_FUZZ_CHECK(policy.bits == p.bits.value, "QC_BITS not applied");
  if (p.codec.set) QC_FUZZ_CHECK(policy.codec == p.codec.value, "QC_CODEC not applied");
  if (p.min_compress.set)
    QC_FUZZ_CHECK(policy.min_compress_bytes == p.min_compress.value, "QC_MIN_COMPRESS not applied");
  const double t = qc::env_timeout(p, 300.0);
  QC_FUZZ_CHECK(t > 0 && std::isfinite(t), "env_timeout gave %g", t);
  (void)qc::env_log_level(p);
  return 0;
}
