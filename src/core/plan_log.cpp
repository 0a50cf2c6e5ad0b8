#include "core/plan_log.h"

#include "core/enum_names.h"
#include "core/log.h"
#include "core/policy.h"

namespace qc {

void PlanLog::layer_used(const char* collective, const char* layer, const qc_policy_t& resolved,
                         const qc_policy_t& effective, size_t message_bytes) {
  if (!log_enabled(LogLevel::kInfo)) return;
  const std::string name = layer != nullptr ? layer : "*";
  std::lock_guard<std::mutex> lock(mutex_);
  Layer& l = layers_[name];
  if (!l.seen) {
    l.seen = true;
    log_info("layer '" + name + "' first used (" + collective + "): " + describe_policy(resolved));
  }
  if (effective.codec != resolved.codec && effective.codec == QC_CODEC_NONE &&
      !l.told_uncompressed) {
    l.told_uncompressed = true;
    log_info("layer '" + name + "': a message of " + std::to_string(message_bytes) +
             " bytes is under min_compress_bytes " + std::to_string(resolved.min_compress_bytes) +
             ": sent uncompressed (codec none) instead of " + codec_name(resolved.codec) +
             " (told once per layer)");
  }
}

void PlanLog::algorithm_chosen(const char* layer, qc_algorithm_t requested, qc_algorithm_t chosen,
                               const char* why, size_t message_bytes, int ranks) {
  if (requested != QC_ALGO_AUTO || !log_enabled(LogLevel::kInfo)) return;
  const std::string name = layer != nullptr ? layer : "*";
  std::lock_guard<std::mutex> lock(mutex_);
  Layer& l = layers_[name];
  if (l.algorithm == static_cast<int>(chosen)) return;
  l.algorithm = static_cast<int>(chosen);
  log_info("layer '" + name + "': algorithm auto chose " + algorithm_name(chosen) + " for " +
           std::to_string(message_bytes) + " bytes on " + std::to_string(ranks) +
           " ranks: " + why);
}

}  // namespace qc
