#include "core/policy_table.h"

#include "core/policy.h"

namespace qc {

// Iterative glob with single-star backtracking: linear in practice, and no
// recursion depth to exhaust on hostile patterns.
bool glob_match(const char* pattern, const char* name) {
  const char* p = pattern;
  const char* n = name;
  const char* star = nullptr;
  const char* star_name = nullptr;
  while (*n != '\0') {
    if (*p == '*') {
      star = p++;
      star_name = n;
    } else if (*p == '?' || *p == *n) {
      ++p;
      ++n;
    } else if (star != nullptr) {
      p = star + 1;
      n = ++star_name;
    } else {
      return false;
    }
  }
  while (*p == '*') ++p;
  return *p == '\0';
}

PolicyTable::PolicyTable() { set("*", default_policy()); }

void PolicyTable::set(const std::string& pattern, const qc_policy_t& policy) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t order = next_order_++;
  for (Entry& e : entries_) {
    if (e.pattern == pattern) {
      e.policy = policy;
      e.order = order;
      return;
    }
  }
  Entry e;
  e.pattern = pattern;
  e.policy = policy;
  e.is_glob = pattern.find_first_of("*?") != std::string::npos;
  e.literal_chars = 0;
  for (char c : pattern)
    if (c != '*' && c != '?') ++e.literal_chars;
  e.order = order;
  entries_.push_back(e);
}

qc_policy_t PolicyTable::resolve(const char* layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (layer == nullptr) {
    for (const Entry& e : entries_)
      if (e.pattern == "*") return e.policy;
  }
  const char* name = layer != nullptr ? layer : "*";
  const Entry* best = nullptr;
  for (const Entry& e : entries_) {
    if (!e.is_glob) {
      if (e.pattern == name) return e.policy;
      continue;
    }
    if (!glob_match(e.pattern.c_str(), name)) continue;
    if (best == nullptr || e.literal_chars > best->literal_chars ||
        (e.literal_chars == best->literal_chars && e.order > best->order))
      best = &e;
  }
  // "*" is always present and matches everything, so best is never null.
  return best->policy;
}

}  // namespace qc
