// call_sites.h - layer names and error-feedback residuals per call site.
//
// torch.distributed calls carry no layer name, so the backend makes one per
// call site: (op, dtype, element count, k) where k counts the calls with that
// (op, dtype, count) since the last optimizer step. A training loop issues
// the same calls in the same order every step, so a site names the same
// tensor step after step: its policy (pattern "allreduce:*" ...) and its
// error-feedback residuals follow it. The counters restart on every
// optimizer step (reset_counters, from torch's optimizer step post hook).
// Loops without an optimizer would create sites for ever: past max_sites
// distinct names a signature's counter wraps to 0 (one warning).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "qc.h"

namespace qc_torch {

class CallSites {
 public:
  CallSites(qc_comm_t comm, int rank, size_t max_sites);
  ~CallSites();
  CallSites(const CallSites&) = delete;
  CallSites& operator=(const CallSites&) = delete;

  struct Lease {
    std::string layer;                  // the name given to qc
    qc_error_buffer_t buffer = nullptr; // residuals, or NULL: no error feedback
  };

  // The site of the next call of `op` on `numel` elements of `dtype`.
  // with_residuals: the op takes an error buffer of numel residuals
  // (allreduce, reduce_scatter, allgather); it gets one when the layer's
  // policy asks for error feedback and the site's buffer is free. Throws
  // std::runtime_error with qc's message when qc refuses.
  Lease next(const std::string& op, qc_dtype_t dtype, size_t numel, bool with_residuals);

  // The call that leased `buffer` has completed: the buffer is free again.
  void release(qc_error_buffer_t buffer);

  // An optimizer step: every signature's counter restarts at 0.
  void reset_counters();

  struct Saved {
    std::string layer;
    size_t count;
    std::string image;  // qc_error_buffer_save's bytes
  };
  // Residuals of every site with error feedback (callers drain requests first).
  std::vector<Saved> save();
  // Restores one site's residuals (creating its buffer). Throws on qc's refusal.
  void load(const Saved& saved);

  size_t site_count();

 private:
  struct Site {
    size_t count = 0;
    qc_error_buffer_t buffer = nullptr;
    bool in_use = false;
  };
  Site& site_for(const std::string& layer, size_t count);  // under mutex_

  qc_comm_t comm_;
  int rank_;
  size_t max_sites_;
  bool warned_wrap_ = false;
  std::mutex mutex_;
  std::map<std::string, size_t> next_index_;  // "op:dtype:numel" -> k
  std::set<std::string> layers_;              // every name handed out
  std::map<std::string, Site> sites_;         // names with residuals
};

}  // namespace qc_torch
