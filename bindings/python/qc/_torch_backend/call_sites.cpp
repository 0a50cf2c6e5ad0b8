// call_sites.cpp - see call_sites.h.
#include "call_sites.h"

#include <stdexcept>

#include "log.h"

namespace qc_torch {
namespace {

[[noreturn]] void throw_qc(const std::string& what) {
  throw std::runtime_error("qc: " + what + ": " + qc_last_error());
}

}  // namespace

CallSites::CallSites(qc_comm_t comm, int rank, size_t max_sites)
    : comm_(comm), rank_(rank), max_sites_(max_sites < 1 ? 1 : max_sites) {}

CallSites::~CallSites() {
  for (auto& entry : sites_) qc_error_buffer_destroy(entry.second.buffer);
}

CallSites::Site& CallSites::site_for(const std::string& layer, size_t count) {
  Site& site = sites_[layer];
  if (site.buffer == nullptr || site.count != count) {
    qc_error_buffer_destroy(site.buffer);
    site.buffer = nullptr;
    if (qc_error_buffer_create(comm_, count, &site.buffer) != QC_SUCCESS) {
      sites_.erase(layer);
      throw_qc("error buffer for layer \"" + layer + "\"");
    }
    site.count = count;
    site.in_use = false;
  }
  return site;
}

CallSites::Lease CallSites::next(const std::string& op, qc_dtype_t dtype, size_t numel,
                                 bool with_residuals) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string signature =
      op + ":" + qc_dtype_name(dtype) + ":" + std::to_string(numel);
  size_t& k = next_index_[signature];
  std::string layer = signature + ":" + std::to_string(k);
  if (layers_.count(layer) == 0 && layers_.size() >= max_sites_) {
    if (!warned_wrap_) {
      warned_wrap_ = true;
      log_line(LogLevel::kWarn, rank_,
               "more than " + std::to_string(max_sites_) +
                   " call sites (op, dtype, count, k) without an optimizer step: call "
                   "counters wrap to 0 from here on (QC_TORCH_MAX_SITES raises the bound; "
                   "error-feedback residuals of wrapped sites are shared)");
    }
    k = 0;
    layer = signature + ":0";
  }
  ++k;
  layers_.insert(layer);

  Lease lease;
  lease.layer = layer;
  if (!with_residuals) return lease;
  qc_policy_t policy;
  qc_policy_init(&policy);
  if (qc_comm_get_layer_policy(comm_, layer.c_str(), &policy) != QC_SUCCESS) {
    throw_qc("policy of layer \"" + layer + "\"");
  }
  if (!policy.error_feedback) return lease;
  Site& site = site_for(layer, numel);
  if (site.in_use) {
    // A wrapped site whose previous call is still running: qc needs one
    // buffer per outstanding request, so this call goes without.
    log_line(LogLevel::kInfo, rank_,
             "layer \"" + layer + "\": residuals in use by an earlier call; this call "
             "runs without error feedback");
    return lease;
  }
  site.in_use = true;
  lease.buffer = site.buffer;
  return lease;
}

void CallSites::release(qc_error_buffer_t buffer) {
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : sites_) {
    if (entry.second.buffer == buffer) entry.second.in_use = false;
  }
}

void CallSites::reset_counters() {
  std::lock_guard<std::mutex> lock(mutex_);
  next_index_.clear();
}

std::vector<CallSites::Saved> CallSites::save() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Saved> out;
  for (auto& entry : sites_) {
    size_t size = 0;
    if (qc_error_buffer_save(entry.second.buffer, nullptr, 0, &size) != QC_SUCCESS) {
      throw_qc("saving the residuals of layer \"" + entry.first + "\"");
    }
    Saved saved{entry.first, entry.second.count, std::string(size, '\0')};
    if (qc_error_buffer_save(entry.second.buffer, &saved.image[0], size, &size) != QC_SUCCESS) {
      throw_qc("saving the residuals of layer \"" + entry.first + "\"");
    }
    saved.image.resize(size);
    out.push_back(std::move(saved));
  }
  return out;
}

void CallSites::load(const Saved& saved) {
  std::lock_guard<std::mutex> lock(mutex_);
  Site& site = site_for(saved.layer, saved.count);
  if (site.in_use) {
    throw std::runtime_error("qc: residuals of layer \"" + saved.layer + "\" are in use");
  }
  if (qc_error_buffer_load(site.buffer, saved.image.data(), saved.image.size()) != QC_SUCCESS) {
    throw_qc("loading the residuals of layer \"" + saved.layer + "\"");
  }
  layers_.insert(saved.layer);
}

size_t CallSites::site_count() {
  std::lock_guard<std::mutex> lock(mutex_);
  return layers_.size();
}

}  // namespace qc_torch
