// qc_soak: many collectives of random shape on the local transport, to show
// that under sustained, varied use qc keeps every replica identical, keeps
// its memory flat and raises no sanitizer report.
//
// The run is a sequence of batches. Each batch makes a fresh local group of
// 1..7 ranks (odd and even sizes), gives it a handful of "layers" (a name,
// an element count, a random valid policy: any codec, width, bucket size,
// rounding, algorithm, error feedback on or off, scale reuse), sets their
// policies, and each rank (its own thread) runs the batch's calls: an
// allreduce (in place or not, sum or avg, float32 / float16 / bfloat16) or
// an alltoall of a random layer with that rank's error buffer for the
// layer. Every rank hashes its output after each call; after the batch the
// hashes must agree across ranks for every allreduce (bit-identical
// replicas), and every call must have succeeded. Alltoall outputs differ
// per rank by design; they are checked to be finite.
//
// Resident memory (VmRSS) is sampled after the first quarter of the calls
// and at the end; with --max-rss-growth-kib N (not under sanitizers, whose
// quarantines grow on purpose) a larger growth fails the run.
//
// usage: qc_soak [--calls N] [--seed S] [--max-rss-growth-kib K] [--quiet]
// Prints one summary line; exit 0 when every check held.
#include <qc.h>

#include "../unit/half_float.h"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Layer {
  std::string name;
  size_t count = 0;
  qc_dtype_t dtype = QC_DTYPE_FLOAT32;  // one per layer, as a model's tensor has
  qc_policy_t policy{};
};

struct Call {
  int layer = 0;
  bool alltoall = false;
  bool in_place = false;
  qc_reduce_op_t op = QC_OP_SUM;
  qc_dtype_t dtype = QC_DTYPE_FLOAT32;
  uint64_t data_seed = 0;
};

struct RankResult {
  std::vector<uint64_t> hashes;  // one per call
  qc_status_t status = QC_SUCCESS;
  std::string error;
  size_t failed_call = 0;
  long non_finite_call = -1;  // the first call whose output was not finite
};

uint64_t fnv1a(const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

size_t dtype_size(qc_dtype_t d) { return d == QC_DTYPE_FLOAT32 ? 4 : 2; }

bool all_finite(const std::vector<unsigned char>& bytes, size_t count, qc_dtype_t dtype) {
  for (size_t i = 0; i < count; ++i) {
    if (dtype == QC_DTYPE_FLOAT32) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      if (!std::isfinite(v)) return false;
    } else {
      uint16_t v;
      std::memcpy(&v, bytes.data() + 2 * i, 2);
      const uint16_t exp_mask = dtype == QC_DTYPE_FLOAT16 ? 0x7c00u : 0x7f80u;
      if ((v & exp_mask) == exp_mask) return false;
    }
  }
  return true;
}

// A random valid policy. Invalid combinations are avoided by construction
// (the library would refuse them, which is not what a soak is about).
qc_policy_t random_policy(std::mt19937_64& rng) {
  qc_policy_t p = QC_POLICY_INIT;
  const qc_codec_t codecs[] = {QC_CODEC_NONE,   QC_CODEC_FP16,          QC_CODEC_BF16,
                               QC_CODEC_MINMAX, QC_CODEC_QSGD,          QC_CODEC_GLOBAL_LINEAR,
                               QC_CODEC_GLOBAL_EXP, QC_CODEC_ONEBIT,    QC_CODEC_TOPK};
  p.codec = codecs[rng() % 9];
  p.bits = 2 + static_cast<int>(rng() % 7);  // 2..8: valid for every codec that reads it
  if (p.codec == QC_CODEC_MINMAX && rng() % 4 == 0) p.bits = 1;
  if (p.codec == QC_CODEC_GLOBAL_EXP) p.bits = std::min(p.bits, 5);
  const int buckets[] = {1, 7, 32, 128, 512, 4096};
  p.bucket_size = buckets[rng() % 6];
  p.rounding = rng() % 3 == 0 ? QC_ROUND_STOCHASTIC : QC_ROUND_NEAREST_EVEN;
  p.error_feedback = static_cast<int>(rng() % 2);
  p.group_size = 1 + static_cast<int>(rng() % 4);
  p.topk_ratio = rng() % 2 ? 0.01f : 0.25f;
  p.scale_update_period = rng() % 4 == 0 ? 3 : 1;
  p.seed = rng();
  p.min_compress_bytes = rng() % 3 == 0 ? 16384 : 0;
  const qc_algorithm_t generic[] = {QC_ALGO_AUTO, QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING,
                                    QC_ALGO_SRA, QC_ALGO_TREE};
  p.algorithm = generic[rng() % 5];
  const bool global = p.codec == QC_CODEC_GLOBAL_LINEAR || p.codec == QC_CODEC_GLOBAL_EXP;
  if (global && rng() % 2 == 0) p.algorithm = QC_ALGO_NATIVE;
  // Error feedback needs a contractive codec (docs/policies.md). Norm-scaled
  // codecs are one only when the elements sharing a norm are fewer than the
  // square of their levels M = 2^(bits-1) - 1: never for the global codecs
  // (one norm per message), for qsgd when bucket_size < M^2.
  const int levels = (1 << (p.bits - 1)) - 1;
  if (global || (p.codec == QC_CODEC_QSGD && p.bucket_size >= levels * levels))
    p.error_feedback = 0;
  return p;
}

void fill(std::vector<unsigned char>& bytes, size_t count, qc_dtype_t dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float scale = std::ldexp(1.0f, static_cast<int>(seed % 9) - 4);  // 2^-4 .. 2^4
  bytes.resize(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    const float v = normal(rng) * scale;
    if (dtype == QC_DTYPE_FLOAT32) {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = dtype == QC_DTYPE_FLOAT16 ? qct::f32_to_f16(v) : qct::f32_to_bf16(v);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
}

void run_rank(qc_comm_t comm, int rank, int nranks, const std::vector<Layer>& layers,
              const std::vector<Call>& calls, RankResult* out) {
  std::vector<qc_error_buffer_t> ebs(layers.size(), nullptr);
  for (size_t l = 0; l < layers.size(); ++l) {
    if (qc_error_buffer_create(comm, layers[l].count, &ebs[l]) != QC_SUCCESS) {
      out->status = QC_ERROR_INTERNAL;
      out->error = std::string("qc_error_buffer_create: ") + qc_last_error();
      for (auto* e : ebs) qc_error_buffer_destroy(e);
      return;
    }
  }
  std::vector<unsigned char> in, res;
  out->hashes.reserve(calls.size());
  for (size_t c = 0; c < calls.size(); ++c) {
    const Call& call = calls[c];
    const Layer& layer = layers[static_cast<size_t>(call.layer)];
    const size_t count = call.alltoall ? layer.count / static_cast<size_t>(nranks) *
                                             static_cast<size_t>(nranks)
                                       : layer.count;
    fill(in, count, call.dtype, call.data_seed * 131 + static_cast<uint64_t>(rank));
    res.assign(in.size(), 0xA5);
    void* recv = call.in_place ? static_cast<void*>(in.data()) : static_cast<void*>(res.data());
    qc_status_t st;
    if (call.alltoall) {
      st = qc_alltoall(comm, in.data(), recv, count / static_cast<size_t>(nranks), call.dtype,
                       layer.name.c_str(), nullptr);
    } else {
      st = qc_allreduce(comm, in.data(), recv, count, call.dtype, call.op, layer.name.c_str(),
                        ebs[static_cast<size_t>(call.layer)], nullptr);
    }
    if (st != QC_SUCCESS) {
      out->status = st;
      out->error = qc_last_error();
      out->failed_call = c;
      break;
    }
    const std::vector<unsigned char>& got = call.in_place ? in : res;
    out->hashes.push_back(fnv1a(got.data(), got.size()));
    if (out->non_finite_call < 0 && !all_finite(got, count, call.dtype))
      out->non_finite_call = static_cast<long>(c);
  }
  for (auto* e : ebs) qc_error_buffer_destroy(e);
}

}  // namespace

int main(int argc, char** argv) {
  long total_calls = 10000;
  uint64_t seed = 20261121;
  long max_growth_kib = -1;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--calls" && i + 1 < argc) {
      total_calls = std::strtol(argv[++i], nullptr, 10);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--max-rss-growth-kib" && i + 1 < argc) {
      max_growth_kib = std::strtol(argv[++i], nullptr, 10);
    } else if (a == "--quiet") {
      quiet = true;
    } else {
      std::fprintf(stderr,
                   "usage: qc_soak [--calls N] [--seed S] [--max-rss-growth-kib K] [--quiet]\n");
      return 2;
    }
  }
  if (total_calls < 1) {
    std::fprintf(stderr, "qc_soak: --calls must be >= 1\n");
    return 2;
  }

  std::mt19937_64 rng(seed);
  long done = 0, batches = 0, allreduces = 0, alltoalls = 0, failures = 0;
  long rss_quarter = -1;
  int max_ranks = 0;
  size_t max_count = 0;
  const long quarter = total_calls / 4;

  while (done < total_calls) {
    const int nranks = 1 + static_cast<int>(rng() % 7);
    max_ranks = std::max(max_ranks, nranks);
    std::vector<Layer> layers(1 + rng() % 4);
    for (size_t l = 0; l < layers.size(); ++l) {
      layers[l].name = "layer" + std::to_string(l) + (rng() % 3 == 0 ? ".bias" : ".weight");
      const size_t sizes[] = {1, 3, 100, 1000, 4097, 20000, 65536};
      layers[l].count = sizes[rng() % 7] + (rng() % 2 ? static_cast<size_t>(nranks) * 5 : 0);
      max_count = std::max(max_count, layers[l].count);
      layers[l].policy = random_policy(rng);
      const qc_dtype_t dtypes[] = {QC_DTYPE_FLOAT32, QC_DTYPE_FLOAT32, QC_DTYPE_FLOAT16,
                                   QC_DTYPE_BFLOAT16};
      layers[l].dtype = dtypes[rng() % 4];
    }
    const long batch_calls = std::min<long>(total_calls - done, 20 + static_cast<long>(rng() % 60));
    std::vector<Call> calls(static_cast<size_t>(batch_calls));
    for (auto& c : calls) {
      c.layer = static_cast<int>(rng() % layers.size());
      c.alltoall = rng() % 5 == 0 && layers[static_cast<size_t>(c.layer)].count >=
                                         static_cast<size_t>(nranks);
      c.in_place = rng() % 2 == 0;
      c.op = rng() % 2 ? QC_OP_AVG : QC_OP_SUM;
      c.dtype = layers[static_cast<size_t>(c.layer)].dtype;
      c.data_seed = rng();
    }

    std::vector<qc_comm_t> comms(static_cast<size_t>(nranks), nullptr);
    qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
    cfg.timeout_seconds = 60.0;
    if (qc_comm_create_local_with_config(nranks, &cfg, comms.data()) != QC_SUCCESS) {
      std::fprintf(stderr, "qc_soak: qc_comm_create_local: %s\n", qc_last_error());
      return 1;
    }
    bool policy_ok = true;
    for (int r = 0; r < nranks && policy_ok; ++r)
      for (const Layer& l : layers)
        if (qc_comm_set_layer_policy(comms[static_cast<size_t>(r)], l.name.c_str(), &l.policy) !=
            QC_SUCCESS) {
          std::fprintf(stderr, "qc_soak: qc_comm_set_layer_policy(%s): %s\n", l.name.c_str(),
                       qc_last_error());
          policy_ok = false;
          break;
        }
    std::vector<RankResult> results(static_cast<size_t>(nranks));
    if (policy_ok) {
      std::vector<std::thread> threads;
      for (int r = 0; r < nranks; ++r)
        threads.emplace_back(run_rank, comms[static_cast<size_t>(r)], r, nranks,
                             std::cref(layers), std::cref(calls),
                             &results[static_cast<size_t>(r)]);
      for (auto& t : threads) t.join();
    }
    for (qc_comm_t c : comms) qc_comm_destroy(c);
    if (!policy_ok) return 1;

    for (int r = 0; r < nranks; ++r) {
      const RankResult& res = results[static_cast<size_t>(r)];
      if (res.status != QC_SUCCESS) {
        ++failures;
        const Call& c = calls[res.failed_call];
        const Layer& l = layers[static_cast<size_t>(c.layer)];
        std::fprintf(stderr,
                     "qc_soak: batch %ld rank %d/%d call %zu (%s, layer %s, count %zu, codec %d "
                     "bits %d bucket %d algo %d ef %d): %s: %s\n",
                     batches, r, nranks, res.failed_call, c.alltoall ? "alltoall" : "allreduce",
                     l.name.c_str(), l.count, l.policy.codec, l.policy.bits,
                     l.policy.bucket_size, l.policy.algorithm, l.policy.error_feedback,
                     qc_status_string(res.status), res.error.c_str());
      }
      if (res.non_finite_call >= 0) {
        ++failures;
        const Call& c = calls[static_cast<size_t>(res.non_finite_call)];
        const Layer& l = layers[static_cast<size_t>(c.layer)];
        std::fprintf(stderr,
                     "qc_soak: batch %ld rank %d/%d call %ld (%s, dtype %d, op %d, count %zu, codec "
                     "%d bits %d bucket %d rounding %d algo %d ef %d period %d min_compress %zu): "
                     "a non-finite output\n",
                     batches, r, nranks, res.non_finite_call, c.alltoall ? "alltoall" : "allreduce",
                     c.dtype, c.op, l.count, l.policy.codec, l.policy.bits, l.policy.bucket_size,
                     l.policy.rounding, l.policy.algorithm, l.policy.error_feedback,
                     l.policy.scale_update_period, l.policy.min_compress_bytes);
      }
    }
    for (size_t c = 0; c < calls.size(); ++c) {
      if (calls[c].alltoall) {
        ++alltoalls;
        continue;
      }
      ++allreduces;
      for (int r = 1; r < nranks; ++r) {
        const RankResult& res = results[static_cast<size_t>(r)];
        if (c < res.hashes.size() && c < results[0].hashes.size() &&
            res.hashes[c] != results[0].hashes[c]) {
          ++failures;
          std::fprintf(stderr, "qc_soak: batch %ld call %zu: rank %d's result differs from rank 0's\n",
                       batches, c, r);
        }
      }
    }
    if (failures > 20) break;
    done += batch_calls;
    ++batches;
    if (rss_quarter < 0 && done >= quarter) rss_quarter = rss_kib();
    if (!quiet && batches % 25 == 0)
      std::printf("qc_soak: %ld / %ld calls, rss %ld KiB\n", done, total_calls, rss_kib());
  }

  const long rss_end = rss_kib();
  const long growth = rss_quarter >= 0 && rss_end >= 0 ? rss_end - rss_quarter : 0;
  std::printf("qc_soak: %ld calls (%ld allreduce, %ld alltoall) in %ld groups of up to %d ranks, "
              "layers up to %zu elements; rss %ld KiB after a quarter, %ld KiB at the end "
              "(growth %ld KiB); %ld failures\n",
              done, allreduces, alltoalls, batches, max_ranks, max_count, rss_quarter, rss_end,
              growth, failures);
  if (max_growth_kib >= 0 && growth > max_growth_kib) {
    std::fprintf(stderr, "qc_soak: resident memory grew by %ld KiB (limit %ld)\n", growth,
                 max_growth_kib);
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
