// fuzz_policy_pattern: layer-name patterns (src/core/policy_table.h) against a
// reference written here, and qc_comm_set_layer_policy / qc_comm_get_layer_policy /
// qc_comm_apply_preset through the ABI on a 1-rank local communicator.
//
// The input is lines; the first byte of a line is the operation, the rest its
// argument (a C string: it ends at a NUL):
//   S pattern  set a valid policy (each set gets a policy of its own)
//   X pattern  set an invalid policy: INVALID_ARGUMENT, nothing changes
//   G name     get the policy of a layer name
//   N          get with layer NULL (the "*" policy)
//   P          qc_comm_apply_preset(comm, "cgx", NULL)
//   other      the whole line is both a pattern and a name (glob check only)
// Every operation goes to three places: the ABI (a fresh communicator per
// input), a qc::PolicyTable of its own, and a model written here from qc.h's
// rules (exact beats glob, most literal characters wins, ties go to the
// pattern set last, "*" starts as QC_POLICY_INIT, setting a pattern again
// replaces it). Every get must agree in all three. Separately, glob_match of
// every pattern against every name must agree with a dynamic-programming
// reference matcher ('*' any run of bytes, '?' one byte, whole names).
// Statuses allowed: SUCCESS, or INVALID_ARGUMENT (empty pattern, bad policy).
// Seeds: tests/fuzz/corpus/fuzz_policy_pattern.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/policy.h"
#include "core/policy_table.h"
#include "fuzz_common.h"

namespace {

// Reference glob: dp[i][j] = pattern[i..] matches name[j..].
bool ref_glob(const std::string& p, const std::string& n) {
  const size_t P = p.size(), N = n.size();
  std::vector<char> dp((P + 1) * (N + 1), 0);
  auto at = [&](size_t i, size_t j) -> char& { return dp[i * (N + 1) + j]; };
  at(P, N) = 1;
  for (size_t i = P; i-- > 0;) {
    for (size_t j = N + 1; j-- > 0;) {
      if (p[i] == '*') {
        at(i, j) = at(i + 1, j) || (j < N && at(i, j + 1));
      } else if (j < N && (p[i] == '?' || p[i] == n[j])) {
        at(i, j) = at(i + 1, j + 1);
      }
    }
  }
  return at(0, 0) != 0;
}

struct Entry {
  std::string pattern;
  qc_policy_t policy;
  uint64_t order;
};

struct Model {
  std::vector<Entry> entries;
  uint64_t next = 0;
  Model() { set("*", qc::default_policy()); }
  void set(const std::string& pattern, const qc_policy_t& p) {
    for (Entry& e : entries) {
      if (e.pattern == pattern) {
        e.policy = p;
        e.order = next++;
        return;
      }
    }
    entries.push_back({pattern, p, next++});
  }
  static bool is_glob(const std::string& s) { return s.find_first_of("*?") != std::string::npos; }
  static size_t literals(const std::string& s) {
    size_t k = 0;
    for (char c : s) k += c != '*' && c != '?';
    return k;
  }
  qc_policy_t resolve(const char* layer) const {
    if (layer == nullptr) {
      for (const Entry& e : entries)
        if (e.pattern == "*") return e.policy;
    }
    const std::string name = layer != nullptr ? layer : "*";
    for (const Entry& e : entries)
      if (!is_glob(e.pattern) && e.pattern == name) return e.policy;
    const Entry* best = nullptr;
    for (const Entry& e : entries) {
      if (!is_glob(e.pattern) || !ref_glob(e.pattern, name)) continue;
      if (best == nullptr || literals(e.pattern) > literals(best->pattern) ||
          (literals(e.pattern) == literals(best->pattern) && e.order > best->order))
        best = &e;
    }
    QC_FUZZ_CHECK(best != nullptr, "model: nothing matches \"%s\"", name.c_str());
    return best->policy;
  }
};

qc_policy_t policy_for(uint32_t id) {
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = static_cast<qc_codec_t>(id % 9);
  p.bits = 2 + static_cast<int>(id % 7);
  p.bucket_size = 1 + static_cast<int>(id);
  p.seed = 1000 + id;
  p.min_compress_bytes = id;
  return p;
}

bool same_policy(const qc_policy_t& a, const qc_policy_t& b) {
  return a.codec == b.codec && a.bits == b.bits && a.bucket_size == b.bucket_size &&
         a.rounding == b.rounding && a.algorithm == b.algorithm && a.seed == b.seed &&
         a.min_compress_bytes == b.min_compress_bytes && a.topk_ratio == b.topk_ratio;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qc_comm_t comm = nullptr;
  QC_FUZZ_CHECK(qc_comm_create_local(1, &comm) == QC_SUCCESS, "qc_comm_create_local(1)");
  qc::PolicyTable table;
  Model model;
  std::vector<std::string> patterns = {"*"}, names;
  uint32_t next_id = 0;

  auto check_get = [&](const char* layer) {
    qc_policy_t got = QC_POLICY_INIT;
    const qc_status_t s = qc_comm_get_layer_policy(comm, layer, &got);
    QC_FUZZ_CHECK(s == QC_SUCCESS, "qc_comm_get_layer_policy: %s", qc_status_string(s));
    const qc_policy_t want = model.resolve(layer);
    const qc_policy_t direct = table.resolve(layer);
    QC_FUZZ_CHECK(same_policy(got, want), "layer \"%s\": ABI resolves to the policy with seed %llu, "
                  "the model to seed %llu", layer ? layer : "(NULL)",
                  static_cast<unsigned long long>(got.seed), static_cast<unsigned long long>(want.seed));
    QC_FUZZ_CHECK(same_policy(direct, want), "layer \"%s\": PolicyTable resolves to seed %llu, "
                  "the model to seed %llu", layer ? layer : "(NULL)",
                  static_cast<unsigned long long>(direct.seed), static_cast<unsigned long long>(want.seed));
  };

  size_t start = 0;
  while (start < size) {
    size_t end = start;
    while (end < size && data[end] != '\n') ++end;
    const std::string raw(reinterpret_cast<const char*>(data) + start, end - start);
    start = end + 1;
    if (raw.empty()) continue;
    const std::string arg = std::string(raw.c_str() + 1);  // C string after the op byte
    switch (raw[0]) {
      case 'S':
      case 'X': {
        qc_policy_t p = policy_for(next_id++);
        const bool bad = raw[0] == 'X';
        if (bad) p.bits = 0;
        const qc_status_t s = qc_comm_set_layer_policy(comm, arg.c_str(), &p);
        if (bad || arg.empty()) {
          QC_FUZZ_CHECK(s == QC_ERROR_INVALID_ARGUMENT, "set \"%s\" (bad %d): %s", arg.c_str(), bad,
                        qc_status_string(s));
        } else {
          QC_FUZZ_CHECK(s == QC_SUCCESS, "set \"%s\": %s", arg.c_str(), qc_status_string(s));
          table.set(arg, p);
          model.set(arg, p);
          patterns.push_back(arg);
        }
        break;
      }
      case 'G':
        names.push_back(arg);
        check_get(arg.c_str());
        break;
      case 'N':
        check_get(nullptr);
        break;
      case 'P': {
        const qc_status_t s = qc_comm_apply_preset(comm, "cgx", nullptr);
        QC_FUZZ_CHECK(s == QC_SUCCESS, "qc_comm_apply_preset: %s", qc_status_string(s));
        // the policy of the pattern "*" itself (qc.h), not what the name "*"
        // resolves to: a later "*?*" also matches that name
        qc_policy_t base = model.resolve(nullptr);
        if (base.min_compress_bytes < 16384) base.min_compress_bytes = 16384;
        const qc_policy_t full = qc::default_policy();
        table.set("*", base);
        model.set("*", base);
        for (const char* pat : {"*bias*", "*norm*", "*Norm*", "*.bn*", "bn*", "*.ln*", "ln*"}) {
          table.set(pat, full);
          model.set(pat, full);
        }
        break;
      }
      default: {
        const std::string both(raw.c_str());
        patterns.push_back(both);
        names.push_back(both);
        break;
      }
    }
  }

  // glob_match against the reference, every pattern x every name (bounded work).
  names.push_back("");
  names.push_back("*");
  size_t budget = 4u << 20;
  for (const std::string& p : patterns) {
    for (const std::string& n : names) {
      const size_t cost = (p.size() + 1) * (n.size() + 1);
      if (cost > budget) break;
      budget -= cost;
      const bool got = qc::glob_match(p.c_str(), n.c_str());
      QC_FUZZ_CHECK(got == ref_glob(p, n), "glob_match(\"%s\", \"%s\") = %d, reference %d", p.c_str(),
                    n.c_str(), got, !got);
    }
  }
  QC_FUZZ_CHECK(qc_comm_destroy(comm) == QC_SUCCESS, "qc_comm_destroy");
  return 0;
}
