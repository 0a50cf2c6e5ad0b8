// Adaptive per-layer bit widths: see adaptive_bits.h for the problem, the
// error model and the byte model. Paper references are to paper 003 (CGX) §5.
#include "core/adapt/adaptive_bits.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

namespace qc {

namespace {

constexpr uint64_t kHeaderBytes = 32;  // kWireHeaderBytes (codecs/wire_format.h)

// Acklam's rational approximation of the standard normal quantile (relative
// error < 1.2e-9), enough for an expected-range estimate.
double normal_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                             -2.759285104469687e+02, 1.383577518672690e+02,
                             -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                             -1.556989798598866e+02, 6.680131188771972e+01,
                             -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                             -2.400758277161838e+00, -2.549732539343734e+00,
                             4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                             2.445134137142996e+00, 3.754408661907416e+00};
  const double plow = 0.02425;
  if (p <= 0.0) return -std::numeric_limits<double>::infinity();
  if (p >= 1.0) return std::numeric_limits<double>::infinity();
  if (p < plow) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - plow) {
    const double q = std::sqrt(-2 * std::log(1 - p));
    return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double q = p - 0.5;
  const double r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

// Expected range of n i.i.d. standard normal values, squared. Blom: E[max] ~
// Phi^-1((n - 0.375) / (n + 0.25)); the range is twice that by symmetry.
double gaussian_sq_range(uint64_t n) {
  if (n < 2) return 0.0;  // one value: min == max, the bucket is exact
  const double nn = static_cast<double>(n);
  const double r = 2.0 * normal_quantile((nn - 0.375) / (nn + 0.25));
  return r * r;
}

// sum over buckets of range^2 * len, estimated from sq_norm alone (Gaussian
// values, sigma^2 = sq_norm / count; header comment).
double estimated_sq_range_sum(const LayerStats& l, uint64_t bucket) {
  if (l.count == 0 || l.sq_norm <= 0.0) return 0.0;
  const double var = l.sq_norm / static_cast<double>(l.count);
  const uint64_t full = l.count / bucket;
  const uint64_t rest = l.count % bucket;
  return var * (static_cast<double>(full) * static_cast<double>(bucket) * gaussian_sq_range(bucket) +
                static_cast<double>(rest) * gaussian_sq_range(rest));
}

std::string layer_label(const std::vector<LayerStats>& layers, size_t i) {
  return "layers[" + std::to_string(i) + "] ('" + layers[i].name + "')";
}

Status validate(const std::vector<LayerStats>& layers, const AdaptConfig& cfg) {
  if (cfg.allowed_bits.empty()) {
    return invalid_argument("adapt_bit_widths: allowed_bits is empty; give at least one width");
  }
  if (cfg.codec != QC_CODEC_MINMAX && cfg.codec != QC_CODEC_QSGD) {
    return invalid_argument("adapt_bit_widths: codec " + std::to_string(static_cast<int>(cfg.codec)) +
                            " has no error model; use QC_CODEC_MINMAX or QC_CODEC_QSGD");
  }
  const int min_bits = cfg.codec == QC_CODEC_QSGD ? 2 : 1;
  for (int b : cfg.allowed_bits) {
    if (b < min_bits || b > 8) {
      return invalid_argument("adapt_bit_widths: allowed_bits holds " + std::to_string(b) +
                              ", outside " + std::to_string(min_bits) + "..8 for this codec");
    }
  }
  if (!(cfg.alpha >= 1.0) || !std::isfinite(cfg.alpha)) {
    std::ostringstream m;
    m << "adapt_bit_widths: alpha (" << cfg.alpha
      << ") must be finite and >= 1 (the budget alpha*E4 must admit uniform 4 bits)";
    return invalid_argument(m.str());
  }
  if (cfg.bucket_size < 1) {
    return invalid_argument("adapt_bit_widths: bucket_size (" + std::to_string(cfg.bucket_size) +
                            ") must be >= 1");
  }
  if (!(cfg.headroom >= 0.0 && cfg.headroom < 1.0)) {
    std::ostringstream m;
    m << "adapt_bit_widths: headroom (" << cfg.headroom << ") must be in [0, 1)";
    return invalid_argument(m.str());
  }
  if (cfg.kmeans_iterations < 1) {
    return invalid_argument("adapt_bit_widths: kmeans_iterations (" +
                            std::to_string(cfg.kmeans_iterations) + ") must be >= 1");
  }
  if (cfg.method != AdaptMethod::kKmeans && cfg.method != AdaptMethod::kLinear) {
    return invalid_argument("adapt_bit_widths: unknown method");
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerStats& l = layers[i];
    if (!std::isfinite(l.sq_norm) || l.sq_norm < 0.0) {
      return invalid_argument("adapt_bit_widths: " + layer_label(layers, i) +
                              ".sq_norm must be finite and >= 0");
    }
    if (!std::isfinite(l.sq_range_sum) || l.sq_range_sum < 0.0) {
      return invalid_argument("adapt_bit_widths: " + layer_label(layers, i) +
                              ".sq_range_sum must be finite and >= 0");
    }
  }
  return Status::ok();
}

// Everything the search needs, in canonical order (sorted by name, then by the
// statistics): per layer and per allowed width (ascending) error and bytes.
struct Table {
  std::vector<int> widths;                 // allowed, unique, ascending
  std::vector<size_t> order;               // canonical position -> input index
  std::vector<uint64_t> count;             // [pos]
  std::vector<std::vector<double>> err;    // [pos][w]
  std::vector<std::vector<uint64_t>> bytes;
  std::vector<double> e4;                  // [pos]
  std::vector<uint64_t> bytes4;
};

// Sum in canonical order, always the same order, so that the value compared
// against the budget does not depend on how a candidate was built.
double total_error(const Table& t, const std::vector<int>& wi) {
  double s = 0.0;
  for (size_t p = 0; p < wi.size(); ++p) s += t.err[p][static_cast<size_t>(wi[p])];
  return s;
}
uint64_t total_bytes(const Table& t, const std::vector<int>& wi) {
  uint64_t s = 0;
  for (size_t p = 0; p < wi.size(); ++p) s += t.bytes[p][static_cast<size_t>(wi[p])];
  return s;
}

// A layer whose error does not depend on the width (empty, all zero, one
// element per bucket): it costs nothing to send it at the narrowest width.
bool is_free(const Table& t, size_t p) { return t.err[p].front() <= t.err[p].back(); }

// ---- k-means (Algorithm 1) ---------------------------------------------------
//
// Paper 003 §5 Algorithm 1 clusters the points (size(L_l), norm(G_l)) into
// k = |B| clusters, sorts the centroids by norm(C) - size(C) and maps widths to
// the sorted clusters. We follow it with these choices:
//  - coordinates: x = log(count), y = log(E_l(4) / count) (the predicted
//    4-bit error per element: the squared norm per element scaled by the
//    codec's range/norm ratio; E_l(4) itself would be nearly collinear with
//    the size and clustered poorly: 16% saving instead of 31% on the
//    synthetic model of the tests), each standardised to zero mean and unit
//    variance; logs because sizes and norms span many orders of magnitude
//    and the paper's "norm - size" is a ratio;
//  - deterministic: centroids start at quantiles of the score y - x (points
//    sorted by score, then canonical position), a fixed maximum number of
//    Lloyd iterations, distance ties go to the lower cluster index;
//  - instead of one fixed linear map of widths onto the sorted clusters (which
//    ignores the budget), every monotone map (a more sensitive cluster never
//    gets fewer bits) is evaluated and the one with the fewest predicted bytes
//    whose predicted error is within the planning limit (alpha * E4 less
//    AdaptConfig::headroom) wins (ties: lower error, then the
//    first in enumeration order). With m widths and k clusters that is
//    C(m + k - 1, k) maps, at most 6435 for m = k = 8.
// Layers that are free (is_free) skip the clustering and get the narrowest
// width.
std::vector<int> kmeans_assign(const Table& t, double budget, const std::vector<int>& fallback,
                               int iterations) {
  const size_t L = t.order.size();
  const size_t m = t.widths.size();
  std::vector<size_t> pts;
  for (size_t p = 0; p < L; ++p)
    if (!is_free(t, p)) pts.push_back(p);
  const size_t n = pts.size();
  if (n == 0) return std::vector<int>(L, 0);

  // Standardised features (x: log size, y: log 4-bit error per element).
  std::vector<double> fx(n), fy(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t p = pts[i];
    fx[i] = std::log(static_cast<double>(t.count[p]));  // not free implies count >= 1
    // Not free implies err at the narrowest width > 0; e4 may still be 0 only
    // if 4 bits are exact, which the models never predict for count >= 2.
    fy[i] = std::log(std::max(t.e4[p] / static_cast<double>(t.count[p]),
                              std::numeric_limits<double>::min()));
  }
  auto standardise = [n](std::vector<double>& v) {
    double mean = 0.0;
    for (double a : v) mean += a;
    mean /= static_cast<double>(n);
    double var = 0.0;
    for (double a : v) var += (a - mean) * (a - mean);
    const double sd = std::sqrt(var / static_cast<double>(n));
    for (double& a : v) a = sd > 0.0 ? (a - mean) / sd : 0.0;
  };
  standardise(fx);
  standardise(fy);

  // Quantile initialisation along the sensitivity score y - x.
  const size_t k = std::min(m, n);
  std::vector<size_t> by_score(n);
  std::iota(by_score.begin(), by_score.end(), size_t{0});
  std::stable_sort(by_score.begin(), by_score.end(), [&](size_t a, size_t b) {
    return fy[a] - fx[a] < fy[b] - fx[b];
  });
  std::vector<double> cx(k), cy(k);
  for (size_t j = 0; j < k; ++j) {
    const size_t q = by_score[(2 * j + 1) * n / (2 * k)];
    cx[j] = fx[q];
    cy[j] = fy[q];
  }

  // Lloyd iterations.
  std::vector<size_t> label(n, 0);
  for (int it = 0; it < iterations; ++it) {
    bool changed = it == 0;
    for (size_t i = 0; i < n; ++i) {
      size_t best = 0;
      double best_d = std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < k; ++j) {
        const double d = (fx[i] - cx[j]) * (fx[i] - cx[j]) + (fy[i] - cy[j]) * (fy[i] - cy[j]);
        if (d < best_d) {  // strict: ties keep the lower index
          best_d = d;
          best = j;
        }
      }
      if (label[i] != best) changed = true;
      label[i] = best;
    }
    if (!changed) break;
    std::vector<double> sx(k, 0.0), sy(k, 0.0);
    std::vector<size_t> cnt(k, 0);
    for (size_t i = 0; i < n; ++i) {
      sx[label[i]] += fx[i];
      sy[label[i]] += fy[i];
      ++cnt[label[i]];
    }
    for (size_t j = 0; j < k; ++j) {
      if (cnt[j] == 0) continue;  // an empty cluster keeps its centroid
      cx[j] = sx[j] / static_cast<double>(cnt[j]);
      cy[j] = sy[j] / static_cast<double>(cnt[j]);
    }
  }

  // Non-empty clusters, least sensitive first (Algorithm 1 step 2: sort by
  // norm(C) - size(C)).
  std::vector<size_t> cnt(k, 0);
  for (size_t i = 0; i < n; ++i) ++cnt[label[i]];
  std::vector<size_t> clusters;
  for (size_t j = 0; j < k; ++j)
    if (cnt[j] > 0) clusters.push_back(j);
  std::stable_sort(clusters.begin(), clusters.end(), [&](size_t a, size_t b) {
    return cy[a] - cx[a] < cy[b] - cx[b];
  });
  std::vector<size_t> rank_of(k, 0);  // cluster -> position in the sorted list
  for (size_t r = 0; r < clusters.size(); ++r) rank_of[clusters[r]] = r;

  // Every monotone map of widths onto the sorted clusters.
  const size_t K = clusters.size();
  std::vector<int> best = fallback;
  uint64_t best_bytes = total_bytes(t, fallback);
  double best_err = total_error(t, fallback);
  bool have = best_err <= budget;
  std::vector<int> map(K, 0), cand(L, 0);  // free layers stay at width index 0
  // Odometer over non-decreasing sequences map[0] <= ... <= map[K-1] < m.
  while (true) {
    for (size_t i = 0; i < n; ++i) cand[pts[i]] = map[rank_of[label[i]]];
    const double e = total_error(t, cand);
    if (e <= budget) {
      const uint64_t by = total_bytes(t, cand);
      if (!have || by < best_bytes || (by == best_bytes && e < best_err)) {
        best = cand;
        best_bytes = by;
        best_err = e;
        have = true;
      }
    }
    // Next sequence: bump the last position that can grow, reset the tail to it.
    size_t pos = K;
    while (pos > 0 && map[pos - 1] == static_cast<int>(m) - 1) --pos;
    if (pos == 0) break;
    const int v = map[pos - 1] + 1;
    for (size_t q = pos - 1; q < K; ++q) map[q] = v;
  }
  return best;
}

// ---- linear heuristic ----------------------------------------------------------
//
// Paper 003 §5 para 4: "sort layers by the ratio of gradient magnitude over
// the layer size", lowest widths to the first layers, highest to the last,
// interpolated linearly. That map ignores the error budget, so we keep the
// ordering and replace the interpolation by a budget-constrained greedy pass:
//  - sensitivity rho_l = E_l(4) / count_l, the predicted error per element.
//    E_l(b) = c_l g(b) and bytes_l(b) ~ count_l h(b) for every layer, so the
//    error added per byte saved by any width step is proportional to rho_l:
//    this is the paper's magnitude/size ratio (squared), made exact for the
//    error model;
//  - start from the baseline uniform width (4 bits, or the narrowest
//    uniform allowed width within budget when that is narrower);
//  - visit layers in ascending rho (ties: canonical position) and set each to
//    the narrowest allowed width below its current one that keeps the running
//    total error within the planning limit (alpha * E4 less headroom);
//  - the running total is incremental; the final total is re-summed in
//    canonical order and, should rounding have pushed it over the budget,
//    the last changes are undone until it fits (the baseline fits).
std::vector<int> linear_assign(const Table& t, double budget, const std::vector<int>& start) {
  const size_t L = t.order.size();
  std::vector<size_t> visit(L);
  std::iota(visit.begin(), visit.end(), size_t{0});
  std::vector<double> per_elem(L);
  for (size_t p = 0; p < L; ++p) per_elem[p] = t.count[p] ? t.e4[p] / static_cast<double>(t.count[p]) : 0.0;
  std::stable_sort(visit.begin(), visit.end(),
                   [&](size_t a, size_t b) { return per_elem[a] < per_elem[b]; });

  std::vector<int> wi = start;
  double total = total_error(t, wi);
  struct Change { size_t p; int from; };
  std::vector<Change> log;
  for (size_t p : visit) {
    const int cur = wi[p];
    for (int w = 0; w < cur; ++w) {
      const double next = total - t.err[p][static_cast<size_t>(cur)] + t.err[p][static_cast<size_t>(w)];
      if (next <= budget) {
        log.push_back({p, cur});
        wi[p] = w;
        total = next;
        break;
      }
    }
  }
  while (total_error(t, wi) > budget && !log.empty()) {
    wi[log.back().p] = log.back().from;
    log.pop_back();
  }
  return wi;
}

}  // namespace

double predict_layer_error(const LayerStats& l, int bits, const AdaptConfig& cfg) {
  if (l.count == 0) return 0.0;
  const uint64_t bucket = static_cast<uint64_t>(cfg.bucket_size);
  // Uniform rounding error: delta^2/12 nearest; stochastic E[f(1-f)] = 1/6.
  const double f = cfg.stochastic ? 1.0 / 6.0 : 1.0 / 12.0;
  if (cfg.codec == QC_CODEC_QSGD) {
    // Bucket of n values with norm^2 ~ sigma^2 n; step = norm / M. Each value
    // errs by at most step^2 * f on average, and a bucket can never err by
    // more than it holds (all levels 0), so min(n * step^2 * f, norm^2).
    const double M = static_cast<double>((1 << (bits - 1)) - 1);
    if (l.sq_norm <= 0.0 || M <= 0.0) return l.sq_norm;
    const double var = l.sq_norm / static_cast<double>(l.count);
    auto bucket_err = [&](uint64_t len) {
      const double nl = static_cast<double>(len);
      return std::min(nl * nl * f / (M * M), nl);
    };
    const uint64_t full = l.count / bucket, rest = l.count % bucket;
    return var * (static_cast<double>(full) * bucket_err(bucket) + (rest ? bucket_err(rest) : 0.0));
  }
  const double levels = static_cast<double>((1 << bits) - 1);
  const double r = l.sq_range_sum > 0.0 ? l.sq_range_sum : estimated_sq_range_sum(l, bucket);
  return r * f / (levels * levels);
}

uint64_t predict_layer_bytes(uint64_t count, int bits, const AdaptConfig& cfg) {
  const uint64_t bucket = static_cast<uint64_t>(cfg.bucket_size);
  const uint64_t buckets = count / bucket + (count % bucket ? 1 : 0);
  const uint64_t meta = cfg.codec == QC_CODEC_QSGD ? 4 : 8;  // qsgd: norm; minmax: min, scale
  return kHeaderBytes + buckets * meta + (count * static_cast<uint64_t>(bits) + 7) / 8;
}

LayerStats layer_stats_from_data(const std::string& name, const float* x, uint64_t count,
                                 int bucket_size) {
  LayerStats s;
  s.name = name;
  s.count = count;
  const uint64_t bucket = static_cast<uint64_t>(std::max(1, bucket_size));
  for (uint64_t b0 = 0; b0 < count; b0 += bucket) {
    const uint64_t len = std::min(bucket, count - b0);
    double lo = x[b0], hi = x[b0];
    for (uint64_t i = b0; i < b0 + len; ++i) {
      const double v = x[i];
      s.sq_norm += v * v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    s.sq_range_sum += (hi - lo) * (hi - lo) * static_cast<double>(len);
  }
  return s;
}

Status adapt_bit_widths(const std::vector<LayerStats>& layers, const AdaptConfig& cfg,
                        AdaptResult* result) {
  if (result == nullptr) return invalid_argument("adapt_bit_widths: result is NULL");
  QC_RETURN_IF_ERROR(validate(layers, cfg));
  AdaptResult out;
  const size_t L = layers.size();
  if (L == 0) {
    *result = out;
    return Status::ok();
  }

  Table t;
  t.widths = cfg.allowed_bits;
  std::sort(t.widths.begin(), t.widths.end());
  t.widths.erase(std::unique(t.widths.begin(), t.widths.end()), t.widths.end());
  const size_t m = t.widths.size();

  // Canonical order: by name, then by the statistics (duplicate names with
  // equal statistics are interchangeable). Every sum below runs in this order,
  // so the result does not depend on the caller's order, bit for bit.
  t.order.resize(L);
  std::iota(t.order.begin(), t.order.end(), size_t{0});
  std::stable_sort(t.order.begin(), t.order.end(), [&](size_t a, size_t b) {
    const LayerStats& x = layers[a];
    const LayerStats& y = layers[b];
    if (x.name != y.name) return x.name < y.name;
    if (x.count != y.count) return x.count < y.count;
    if (x.sq_norm != y.sq_norm) return x.sq_norm < y.sq_norm;
    return x.sq_range_sum < y.sq_range_sum;
  });
  t.count.resize(L);
  t.err.assign(L, std::vector<double>(m));
  t.bytes.assign(L, std::vector<uint64_t>(m));
  t.e4.resize(L);
  t.bytes4.resize(L);
  for (size_t p = 0; p < L; ++p) {
    const LayerStats& l = layers[t.order[p]];
    t.count[p] = l.count;
    for (size_t w = 0; w < m; ++w) {
      t.err[p][w] = predict_layer_error(l, t.widths[w], cfg);
      t.bytes[p][w] = predict_layer_bytes(l.count, t.widths[w], cfg);
    }
    t.e4[p] = predict_layer_error(l, 4, cfg);
    t.bytes4[p] = predict_layer_bytes(l.count, 4, cfg);
    out.e4 += t.e4[p];
    out.bytes_at_4 += t.bytes4[p];
  }
  out.error_budget = cfg.alpha * out.e4;
  // What the search plans against (AdaptConfig::headroom); min() guards the
  // rounding of the expression so that limit <= error_budget always.
  const double limit =
      std::min(out.error_budget, out.e4 + (cfg.alpha - 1.0) * out.e4 * (1.0 - cfg.headroom));

  // Baseline: the narrowest uniform width within budget (uniform 4 always is,
  // since alpha >= 1). With no feasible uniform width nothing is feasible
  // (uniform widest is the least-error assignment): send everything at the
  // widest width and say so.
  std::vector<int> base;
  for (size_t w = 0; w < m && base.empty(); ++w) {
    std::vector<int> u(L, static_cast<int>(w));
    if (total_error(t, u) <= limit) base = u;
  }
  std::vector<int> wi;
  if (base.empty()) {
    wi.assign(L, static_cast<int>(m) - 1);
    std::ostringstream msg;
    msg << "no allowed width meets the budget alpha*E4 (4 bits not allowed); every layer gets the "
           "widest allowed width, "
        << t.widths.back() << " bits";
    out.note = msg.str();
  } else {
    if (std::find(t.widths.begin(), t.widths.end(), 4) == t.widths.end()) {
      out.note = "4 bits not allowed: E4 is the model's prediction at 4 bits; the baseline is "
                 "uniform " + std::to_string(t.widths[static_cast<size_t>(base[0])]) + " bits";
    }
    wi = cfg.method == AdaptMethod::kKmeans ? kmeans_assign(t, limit, base, cfg.kmeans_iterations)
                                            : linear_assign(t, limit, base);
  }

  out.bits.assign(L, 0);
  for (size_t p = 0; p < L; ++p) {
    out.bits[t.order[p]] = t.widths[static_cast<size_t>(wi[p])];
    out.predicted_bytes += t.bytes[p][static_cast<size_t>(wi[p])];
  }
  out.predicted_error = total_error(t, wi);
  if (!base.empty() && !(out.predicted_error <= limit)) {
    return internal_error("adapt_bit_widths: the chosen assignment exceeds the error budget");
  }
  *result = std::move(out);
  return Status::ok();
}

}  // namespace qc
