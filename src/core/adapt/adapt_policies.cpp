// qc_comm_adapt_policies: the communicator side of adaptive bit widths. The
// algorithm itself (adaptive_bits.cpp) is a pure function; this file feeds
// it statistics every rank agrees on and applies its answer as policies.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/adapt/adaptive_bits.h"
#include "core/api_checks.h"
#include "core/api_guard.h"
#include "core/communicator.h"
#include "core/error_buffer.h"
#include "core/policy.h"
#include "core/struct_io.h"

using namespace qc;

namespace {

struct Candidate {
  std::string name;
  qc_policy_t policy;
  uint64_t count;
  double sq_norm;
};

Status read_adapt_config(const qc_adapt_config_t* user, AdaptConfig* out) {
  const qc_adapt_config_t defaults = QC_ADAPT_CONFIG_INIT;
  qc_adapt_config_t c;
  QC_RETURN_IF_ERROR(
      read_struct(user, sizeof(qc_adapt_config_t), defaults, "config", "qc_adapt_config_t", &c));
  if (c.method != QC_ADAPT_KMEANS && c.method != QC_ADAPT_LINEAR) {
    return invalid_argument("argument 'config': field 'method' is " +
                            std::to_string(static_cast<int>(c.method)) +
                            "; expected QC_ADAPT_KMEANS or QC_ADAPT_LINEAR");
  }
  if (c.num_allowed < 1 || c.num_allowed > 8) {
    return invalid_argument("argument 'config': field 'num_allowed' is " +
                            std::to_string(c.num_allowed) + "; expected 1..8");
  }
  // Checked here too (not only by adapt_bit_widths, which sees only the
  // layers there are): a bad config must fail before the collective.
  if (!(c.alpha >= 1.0) || !std::isfinite(c.alpha)) {
    return invalid_argument("argument 'config': field 'alpha' is " + std::to_string(c.alpha) +
                            "; expected a finite number >= 1");
  }
  for (int i = 0; i < c.num_allowed; ++i) {
    if (c.allowed_bits[i] < 1 || c.allowed_bits[i] > 8) {
      return invalid_argument("argument 'config': field 'allowed_bits[" + std::to_string(i) +
                              "]' is " + std::to_string(c.allowed_bits[i]) + "; expected 1..8");
    }
  }
  out->method = c.method == QC_ADAPT_KMEANS ? AdaptMethod::kKmeans : AdaptMethod::kLinear;
  out->alpha = c.alpha;
  out->allowed_bits.assign(c.allowed_bits, c.allowed_bits + c.num_allowed);
  return Status::ok();  // widths and alpha are checked by adapt_bit_widths
}

Status adapt_policies(Communicator* comm, const qc_adapt_config_t* config,
                      qc_adapt_report_t* report) {
  AdaptConfig base;
  QC_RETURN_IF_ERROR(read_adapt_config(config, &base));
  if (report != nullptr && report->struct_size != sizeof(qc_adapt_report_t)) {
    return report->struct_size > sizeof(qc_adapt_report_t)
               ? Status(QC_ERROR_VERSION, "argument 'report': struct_size is newer than this "
                                          "library's qc_adapt_report_t")
               : invalid_argument("argument 'report': struct_size must be "
                                  "sizeof(qc_adapt_report_t)");
  }
  // The layers this rank has seen, in name order, with adaptable codecs.
  std::vector<Candidate> layers;
  {
    std::lock_guard<std::mutex> lock(comm->stats_mutex);
    for (const auto& [name, st] : comm->layer_stats) {
      const qc_policy_t p = comm->policies.resolve(name.c_str());
      if ((p.codec != QC_CODEC_MINMAX && p.codec != QC_CODEC_QSGD) || st.count == 0) continue;
      layers.push_back({name, p, st.count, st.mean_sq_norm});
    }
  }
  // Sum the statistics over the ranks so that every rank decides alike;
  // the signature covers the names, counts and the (codec, bucket, rounding)
  // group each layer is adapted in, so ranks that saw other layers, or would
  // group them otherwise, fail with QC_ERROR_MISMATCH instead of deciding
  // apart.
  std::vector<float> values(2 * layers.size());
  uint64_t signature = fnv1a64("qc_comm_adapt_policies", 17);
  for (size_t i = 0; i < layers.size(); ++i) {
    values[2 * i] = static_cast<float>(layers[i].count);
    values[2 * i + 1] = static_cast<float>(std::min<double>(layers[i].sq_norm, FLT_MAX));
    signature = fnv1a64(layers[i].name.data(), layers[i].name.size() + 1, signature);
    signature = fnv1a64(&layers[i].count, sizeof layers[i].count, signature);
    const int32_t group[3] = {static_cast<int32_t>(layers[i].policy.codec),
                              static_cast<int32_t>(layers[i].policy.bucket_size),
                              static_cast<int32_t>(layers[i].policy.rounding)};
    signature = fnv1a64(group, sizeof group, signature);
  }
  QC_RETURN_IF_ERROR(comm_allreduce_exact(comm, values.data(), values.size(), signature));
  const double n = comm->transport->size();
  // One adaptation per (codec, bucket, rounding) group, each within its
  // own alpha * E4 (so the total is within alpha * E4 too).
  std::map<std::tuple<int, int, int>, std::vector<size_t>> groups;
  for (size_t i = 0; i < layers.size(); ++i) {
    const qc_policy_t& p = layers[i].policy;
    groups[{p.codec, p.bucket_size, p.rounding}].push_back(i);
  }
  qc_adapt_report_t total{};
  total.struct_size = sizeof total;
  // Every group is decided and every new policy checked before any is set:
  // a failure in a later group must not leave an earlier one changed.
  std::vector<std::pair<std::string, qc_policy_t>> decided;
  for (const auto& [key, members] : groups) {
    AdaptConfig cfg = base;
    cfg.codec = static_cast<qc_codec_t>(std::get<0>(key));
    cfg.bucket_size = std::get<1>(key);
    cfg.stochastic = rounds_stochastically(layers[members.front()].policy);
    std::vector<LayerStats> stats;
    for (size_t i : members) {
      LayerStats ls;
      ls.name = layers[i].name;
      ls.count = layers[i].count;
      ls.sq_norm = double(values[2 * i + 1]) / n;  // mean over ranks
      stats.push_back(ls);
    }
    AdaptResult result;
    QC_RETURN_IF_ERROR(adapt_bit_widths(stats, cfg, &result));
    for (size_t k = 0; k < members.size(); ++k) {
      qc_policy_t p = layers[members[k]].policy;
      p.bits = result.bits[k];
      // The check every policy passes (policy.h), so that adaptation can
      // never set one that qc_comm_set_layer_policy would refuse (a width of
      // config->allowed_bits that this layer's codec cannot use).
      QC_RETURN_IF_ERROR(validate_policy(p, "config"));
      decided.emplace_back(layers[members[k]].name, p);
    }
    total.layers += members.size();
    total.predicted_error += result.predicted_error;
    total.error_budget += result.error_budget;
    total.e4 += result.e4;
    total.predicted_bytes += result.predicted_bytes;
    total.bytes_at_4 += result.bytes_at_4;
  }
  for (const auto& [name, policy] : decided) comm->policies.set(name, policy);
  if (report != nullptr) *report = total;
  return Status::ok();
}

}  // namespace

QC_API qc_status_t qc_comm_adapt_policies(qc_comm_t comm, const qc_adapt_config_t* config,
                                     qc_adapt_report_t* report) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, /*collective=*/true, &c));  // it sums over the group
    c->requests.drain();  // after the requests started before it
    return adapt_policies(c.get(), config, report);
  });
}
