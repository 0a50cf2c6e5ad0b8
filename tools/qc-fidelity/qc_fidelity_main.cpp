// qc-fidelity: the error-feedback convergence table (docs/fidelity.md).
//
// Every rank r gets a fixed input x_r (deterministic pseudo-random floats in
// [-1, 1)). The same inputs go through T_max allreduce calls in a row, on the
// same error buffers (one per rank), through qc_emulate_allreduce. For
// T = 1, 2, 4, ..., T_max it reports
//
//   error(T) = max_i | (1/T) sum_{t<T} out_t,i - sum_r x_r,i |  /  max_i sum_r |x_r,i|
//
// (the normalisation of qc-perf's error column), with error feedback on and
// off. With error feedback, sum_t out_t = T sum_r x_r - sum_r e_r(T) up to
// float32 rounding (the residuals telescope), so error(T) = |sum_r e_r(T)|/T
// falls like 1/T; the tool also prints that bookkeeping identity's worst
// violation, max_i |sum_t out_t,i + sum_r e_r,i(T) - T sum_r x_r,i| /
// (T max_i sum_r |x_r,i|), reading the residuals with qc_error_buffer_save.
//
// Uses only the public header qc.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qc.h"
#include "qc_tool_names.h"

namespace {

constexpr size_t kErrorBufferHeaderBytes = 56;  // qc_error_buffer_save's header

struct CodecSpec {
  std::string name;  // as given on the command line
  qc_codec_t codec = QC_CODEC_NONE;
  int bits = 4;
  bool stochastic = false;
};

struct AlgoSpec {
  std::string name;
  qc_algorithm_t algo = QC_ALGO_RING;
};

struct Options {
  int nranks = 8;
  size_t count = 65536;
  int tmax = 256;
  int bucket = 128;
  float topk_ratio = 0.01f;
  uint64_t seed = 1;
  bool fixed_seed = false;
  std::vector<CodecSpec> codecs;
  std::vector<AlgoSpec> algos;
  std::string ef = "both";  // on, off, both
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "qc-fidelity: %s (try --help)\n", msg.c_str());
  std::exit(2);
}

void print_help() {
  std::printf(
      "usage: qc-fidelity [options]\n"
      "  -n, --nranks N      virtual ranks (default 8)\n"
      "      --count N       elements per rank (default 65536)\n"
      "  -T, --tmax N        largest T, a power of two (default 256)\n"
      "  -c, --codecs LIST   comma separated: NAME[BITS][~], NAME one of minmax, qsgd,\n"
      "                      onebit, topk, global_linear, global_exp, fp16, bf16, none;\n"
      "                      '~' = stochastic rounding\n"
      "                      (default minmax2,minmax4,onebit,topk,qsgd4~)\n"
      "  -a, --algos LIST    ring, rd, sra, tree, native, auto (default ring,sra)\n"
      "      --ef on|off|both  error feedback rows (default both)\n"
      "      --bucket N      bucket size (default 128)\n"
      "      --topk-ratio R  (default 0.01)\n"
      "      --seed N        stochastic-rounding seed (default 1); call t is emulated as\n"
      "                      call t of its layer, so the random bits change from call to\n"
      "                      call as they do on a real communicator\n"
      "      --fixed-seed    emulate every call as the layer's first (the same bits) instead\n"
      "  -h, --help\n"
      "Exit status: 0 ok, 1 a bookkeeping or replica check failed, 2 usage or library error.\n");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

long long parse_int(const std::string& v, const char* flag, long long lo, long long hi) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > hi)
    usage_error(std::string("bad value '") + v + "' for " + flag);
  return x;
}

CodecSpec parse_codec(const std::string& s) {
  CodecSpec c;
  c.name = s;
  std::string base = s;
  if (!base.empty() && base.back() == '~') {
    c.stochastic = true;
    base.pop_back();
  }
  size_t d = base.size();
  while (d > 0 && std::isdigit(static_cast<unsigned char>(base[d - 1]))) --d;
  const std::string name = base.substr(0, d);
  if (d < base.size()) c.bits = static_cast<int>(parse_int(base.substr(d), "--codecs", 1, 8));
  if (qc_codec_from_name(name.c_str(), &c.codec) != QC_SUCCESS) {
    usage_error("unknown codec '" + s + "' (" + qctool::names_of(qc_codec_name) + ")");
  }
  return c;
}

AlgoSpec parse_algo(const std::string& s) {
  qc_algorithm_t a = QC_ALGO_AUTO;
  if (qc_algorithm_from_name(s.c_str(), &a) != QC_SUCCESS) {
    usage_error("unknown algorithm '" + s + "' (" + qctool::names_of(qc_algorithm_name) + ", rd)");
  }
  return AlgoSpec{s, a};
}

Options parse_args(int argc, char** argv) {
  Options o;
  std::string codecs = "minmax2,minmax4,onebit,topk,qsgd4~";
  std::string algos = "ring,sra";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v;
    const size_t eq = a.find('=');
    const bool has_eq = a.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_eq) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    auto value = [&]() -> std::string {
      if (has_eq) return v;
      if (i + 1 >= argc) usage_error("missing value for " + a);
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      print_help();
      std::exit(0);
    } else if (a == "-n" || a == "--nranks") {
      o.nranks = static_cast<int>(parse_int(value(), "-n", 1, 1024));
    } else if (a == "--count") {
      o.count = static_cast<size_t>(parse_int(value(), "--count", 1, 1LL << 30));
    } else if (a == "-T" || a == "--tmax") {
      o.tmax = static_cast<int>(parse_int(value(), "--tmax", 1, 1 << 20));
      if ((o.tmax & (o.tmax - 1)) != 0) usage_error("--tmax must be a power of two");
    } else if (a == "-c" || a == "--codecs") {
      codecs = value();
    } else if (a == "-a" || a == "--algos") {
      algos = value();
    } else if (a == "--ef") {
      o.ef = value();
      if (o.ef != "on" && o.ef != "off" && o.ef != "both") usage_error("bad value for --ef");
    } else if (a == "--bucket") {
      o.bucket = static_cast<int>(parse_int(value(), "--bucket", 1, 1 << 30));
    } else if (a == "--topk-ratio") {
      const std::string s = value();
      char* end = nullptr;
      o.topk_ratio = std::strtof(s.c_str(), &end);
      if (s.empty() || *end != '\0' || !(o.topk_ratio > 0.0f) || o.topk_ratio > 1.0f)
        usage_error("bad value '" + s + "' for --topk-ratio");
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(parse_int(value(), "--seed", 0, 1LL << 62));
    } else if (a == "--fixed-seed") {
      o.fixed_seed = true;
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  for (const std::string& s : split(codecs)) o.codecs.push_back(parse_codec(s));
  for (const std::string& s : split(algos)) o.algos.push_back(parse_algo(s));
  if (o.codecs.empty()) usage_error("no codec given");
  if (o.algos.empty()) usage_error("no algorithm given");
  return o;
}

// splitmix64: deterministic inputs, seeded per rank.
uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

[[noreturn]] void library_error(const char* what, qc_status_t s) {
  std::fprintf(stderr, "qc-fidelity: %s: %s: %s\n", what, qc_status_string(s), qc_last_error());
  std::exit(2);
}

struct Row {
  std::vector<double> error;  // per T
  double bookkeeping = 0.0;   // worst over the T's (EF only)
  size_t replica_mismatch = 0;
  double seconds = 0.0;
};

Row run_row(const Options& o, const CodecSpec& c, const AlgoSpec& a, bool ef,
            const std::vector<std::vector<float>>& x, const std::vector<double>& exact,
            double norm) {
  const int n = o.nranks;
  const size_t count = o.count;
  qc_policy_t policy = QC_POLICY_INIT;
  policy.codec = c.codec;
  policy.bits = c.bits;
  policy.bucket_size = o.bucket;
  policy.rounding = c.stochastic ? QC_ROUND_STOCHASTIC : QC_ROUND_NEAREST_EVEN;
  policy.algorithm = a.algo;
  policy.error_feedback = ef ? 1 : 0;
  policy.topk_ratio = o.topk_ratio;

  std::vector<qc_error_buffer_t> ebs(static_cast<size_t>(n), nullptr);
  if (ef) {
    for (int r = 0; r < n; ++r) {
      qc_status_t s = qc_error_buffer_create(nullptr, count, &ebs[static_cast<size_t>(r)]);
      if (s != QC_SUCCESS) library_error("qc_error_buffer_create", s);
    }
  }
  std::vector<std::vector<float>> out(static_cast<size_t>(n), std::vector<float>(count));
  std::vector<const void*> send(static_cast<size_t>(n));
  std::vector<void*> recv(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    send[static_cast<size_t>(r)] = x[static_cast<size_t>(r)].data();
    recv[static_cast<size_t>(r)] = out[static_cast<size_t>(r)].data();
  }
  std::vector<double> acc(count, 0.0);  // sum over calls of the output
  std::vector<double> resid(count);
  std::vector<uint8_t> image;
  Row row;
  const auto t0 = std::chrono::steady_clock::now();
  int next_report = 1;
  for (int t = 1; t <= o.tmax; ++t) {
    policy.seed = o.seed;
    const uint64_t call_index = o.fixed_seed ? 0 : static_cast<uint64_t>(t - 1);
    const qc_status_t s =
        qc_emulate_allreduce(n, send.data(), recv.data(), count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                             nullptr, call_index, &policy, ef ? ebs.data() : nullptr);
    if (s != QC_SUCCESS) library_error("qc_emulate_allreduce", s);
    for (int r = 1; r < n; ++r) {
      if (std::memcmp(out[0].data(), out[static_cast<size_t>(r)].data(), count * 4) != 0) {
        for (size_t i = 0; i < count; ++i)
          if (std::memcmp(&out[0][i], &out[static_cast<size_t>(r)][i], 4) != 0)
            ++row.replica_mismatch;
      }
    }
    for (size_t i = 0; i < count; ++i) acc[i] += out[0][i];
    if (t != next_report) continue;
    next_report *= 2;
    double err = 0.0;
    for (size_t i = 0; i < count; ++i)
      err = std::max(err, std::fabs(acc[i] / t - exact[i]));
    row.error.push_back(err / norm);
    if (ef) {
      std::fill(resid.begin(), resid.end(), 0.0);
      for (int r = 0; r < n; ++r) {
        size_t size = 0;
        qc_status_t st = qc_error_buffer_save(ebs[static_cast<size_t>(r)], nullptr, 0, &size);
        if (st != QC_SUCCESS) library_error("qc_error_buffer_save", st);
        image.resize(size);
        st = qc_error_buffer_save(ebs[static_cast<size_t>(r)], image.data(), size, &size);
        if (st != QC_SUCCESS) library_error("qc_error_buffer_save", st);
        if (size != kErrorBufferHeaderBytes + 4 * count) {
          std::fprintf(stderr, "qc-fidelity: unexpected error buffer image of %zu bytes\n", size);
          std::exit(2);
        }
        for (size_t i = 0; i < count; ++i) {
          const uint8_t* p = image.data() + kErrorBufferHeaderBytes + 4 * i;
          const uint32_t u = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                             static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
          float f;
          std::memcpy(&f, &u, 4);
          resid[i] += f;
        }
      }
      double bk = 0.0;
      for (size_t i = 0; i < count; ++i)
        bk = std::max(bk, std::fabs(acc[i] + resid[i] - t * exact[i]));
      row.bookkeeping = std::max(row.bookkeeping, bk / (t * norm));
    }
  }
  row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (qc_error_buffer_t eb : ebs) qc_error_buffer_destroy(eb);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  const int n = o.nranks;
  std::vector<std::vector<float>> x(static_cast<size_t>(n), std::vector<float>(o.count));
  std::vector<double> exact(o.count, 0.0), mag(o.count, 0.0);
  for (int r = 0; r < n; ++r) {
    uint64_t s = 0x5eed0000ull + static_cast<uint64_t>(r);
    for (size_t i = 0; i < o.count; ++i) {
      // 24 random bits -> uniform in [-1, 1), exactly representable in float.
      const float v = static_cast<float>(static_cast<int32_t>(splitmix64(s) >> 40) - (1 << 23)) /
                      static_cast<float>(1 << 23);
      x[static_cast<size_t>(r)][i] = v;
      exact[i] += v;
      mag[i] += std::fabs(v);
    }
  }
  const double norm = *std::max_element(mag.begin(), mag.end());

  std::printf("# qc-fidelity %s: error of the mean output over the first T calls,\n"
              "# max_i |mean_t out_t,i - sum_r x_r,i| / max_i sum_r |x_r,i| (= %.4f)\n",
              qc_version_string(), norm);
  std::printf("# ranks %d, count %zu per rank, float32, sum, bucket %d, topk ratio %g, seed %s\n",
              n, o.count, o.bucket, static_cast<double>(o.topk_ratio),
              o.fixed_seed ? "call 0 every time" : "call t of the layer");
  std::printf("# bookkeeping: max over T and i of |sum_t out_t,i + sum_r e_r,i(T) - T sum_r "
              "x_r,i| / (T max_i sum_r |x_r,i|)\n\n");

  std::vector<bool> efs;
  if (o.ef != "on") efs.push_back(false);
  if (o.ef != "off") efs.push_back(true);

  bool failed = false;
  for (const AlgoSpec& a : o.algos) {
    std::printf("## %s, n = %d\n\n| codec | EF |", a.name.c_str(), n);
    for (int t = 1; t <= o.tmax; t *= 2) std::printf(" T=%d |", t);
    std::printf(" bookkeeping |\n| --- | --- |");
    for (int t = 1; t <= o.tmax; t *= 2) std::printf(" ---: |");
    std::printf(" ---: |\n");
    std::fflush(stdout);
    for (const CodecSpec& c : o.codecs) {
      for (bool ef : efs) {
        const Row row = run_row(o, c, a, ef, x, exact, norm);
        std::printf("| %s | %s |", c.name.c_str(), ef ? "on" : "off");
        for (double e : row.error) std::printf(" %.3g |", e);
        if (ef) std::printf(" %.1e |", row.bookkeeping); else std::printf(" – |");
        std::printf("\n");
        if (row.replica_mismatch > 0) {
          std::printf("# ^ ranks' outputs differ at %zu element-calls\n", row.replica_mismatch);
          failed = true;
        }
        // float32 rounding of partial sums and residuals: far below 1e-4.
        if (ef && !(row.bookkeeping < 1e-4)) {
          std::printf("# ^ bookkeeping identity violated\n");
          failed = true;
        }
        std::fprintf(stderr, "qc-fidelity: %s %s ef=%s: %.1f s\n", a.name.c_str(),
                     c.name.c_str(), ef ? "on" : "off", row.seconds);
        std::fflush(stdout);
      }
    }
    std::printf("\n");
  }
  return failed ? 1 : 0;
}
