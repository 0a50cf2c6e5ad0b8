// Layer name -> policy. Exact names beat globs; among globs the one with the
// most literal characters wins; ties go to the pattern set last.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace qc {

bool glob_match(const char* pattern, const char* name);

class PolicyTable {
 public:
  PolicyTable();

  void set(const std::string& pattern, const qc_policy_t& policy);
  // The policy `layer` resolves to (nullptr means "*").
  qc_policy_t resolve(const char* layer) const;

 private:
  struct Entry {
    std::string pattern;
    qc_policy_t policy;
    bool is_glob;
    size_t literal_chars;
    uint64_t order;  // when it was last set
  };
  // set() may race with resolve() from a collective on another thread only if
  // the user breaks the one-thread-per-communicator rule; the lock keeps even
  // that from corrupting the table.
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  uint64_t next_order_ = 0;
};

}  // namespace qc
