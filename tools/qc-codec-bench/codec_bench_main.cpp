// qc-codec-bench: single-thread throughput and error of the CPU codec kernels,
// per codec / bits / bucket and per ISA table (scalar, avx2, avx512), next to
// memcpy measured in the same run. See README.md.
//
// It links the internal object library (qc_objects), so it can call each ISA's
// kernel table directly (cpu::kernels_for) and, for codecs without kernel-table
// entries, the Codec class (make_codec), labelled ISA "auto".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/codecs/codec.h"
#include "core/codecs/wire_format.h"
#include "core/policy.h"
#include "cpu/codec_kernels.h"
#include "qc.h"
#include "qc_tool_cli.h"
#include "qc_tool_json.h"
#include "qc_tool_text.h"

#ifndef QC_CODEC_BENCH_BUILD_TYPE
#define QC_CODEC_BENCH_BUILD_TYPE "unknown"
#endif

namespace qcbench {
namespace {

using qc::cpu::Isa;
using qc::cpu::KernelTable;

constexpr const char* kProg = "qc-codec-bench";
constexpr const char* kAbout =
    "Single-thread input GB/s of each codec kernel (encode, decode, decode-accumulate,\n"
    "fused error-compensated encode = DQE) per ISA, next to memcpy GB/s measured in\n"
    "the same run, with the compression ratio and the error (NMSE, max abs error).";
constexpr const char* kExitStatus =
    "Exit status: 0 (speed targets are reported, never asserted), 2 bad usage or an\n"
    "unwritable --json file.";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- command line --------------------------------------------------------------

// kAuto: the Codec class (the library's dispatch); kApi: the public C
// functions qc_codec_encode/qc_codec_decode, as a user calls them.
enum class IsaSel { kScalar, kAvx2, kAvx512, kAuto, kApi };

struct Options {
  uint64_t size = 64ull << 20;
  std::vector<qc_codec_t> codecs = {QC_CODEC_MINMAX, QC_CODEC_QSGD, QC_CODEC_ONEBIT,
                                    QC_CODEC_FP16, QC_CODEC_BF16};
  std::vector<int> bits;  // empty: each codec's default list
  std::vector<size_t> buckets = {128};
  std::vector<IsaSel> isas = {IsaSel::kScalar, IsaSel::kAvx2, IsaSel::kAvx512, IsaSel::kApi};
  bool stochastic = false;
  int iters = 5;
  std::string json_path;
  std::string command_line;
};

template <class T>
void add_unique(std::vector<T>* v, T x) {
  if (std::find(v->begin(), v->end(), x) == v->end()) v->push_back(x);
}

std::vector<int> parse_int_list(const CLI::App& app, const std::string& flag,
                                const std::string& s, int lo, int hi) {
  std::vector<int> out;
  for (const std::string& t : qctool::split_list(s)) {
    int v = 0;
    if (!qctool::parse_integer(t, lo, hi, &v)) {
      qctool::usage_error(app, "bad value '" + t + "' for " + flag + " (integers in " +
                                   std::to_string(lo) + ".." + std::to_string(hi) +
                                   ", comma separated)");
    }
    add_unique(&out, v);
  }
  return out;
}

std::vector<qc_codec_t> parse_codecs(const CLI::App& app, const std::string& s) {
  std::vector<qc_codec_t> out;
  for (const std::string& raw : qctool::split_list(s)) {
    const qc_codec_t c =
        qctool::enum_value(app, "codec", "-c", raw, qc_codec_from_name, qc_codec_name);
    // Codec none has no encoder to measure.
    if (c == QC_CODEC_NONE) qctool::usage_error(app, "-c none: codec none has no encoder");
    add_unique(&out, c);
  }
  return out;
}

std::vector<IsaSel> parse_isas(const CLI::App& app, const std::string& s) {
  std::vector<IsaSel> out;
  for (const std::string& raw : qctool::split_list(s)) {
    const std::string t = qctool::normalize_name(raw);
    if (t == "scalar") add_unique(&out, IsaSel::kScalar);
    else if (t == "avx2") add_unique(&out, IsaSel::kAvx2);
    else if (t == "avx512") add_unique(&out, IsaSel::kAvx512);
    else if (t == "auto") add_unique(&out, IsaSel::kAuto);
    else if (t == "api") add_unique(&out, IsaSel::kApi);
    else if (t == "all") {
      for (IsaSel i : {IsaSel::kScalar, IsaSel::kAvx2, IsaSel::kAvx512, IsaSel::kAuto, IsaSel::kApi})
        add_unique(&out, i);
    } else {
      qctool::usage_error(app, "unknown ISA '" + raw +
                                   "' for --isa (scalar, avx2, avx512, auto, api, all)");
    }
  }
  return out;
}

Options parse_args(int argc, char** argv) {
  Options opt;
  opt.command_line = qctool::command_line(argc, argv);
  CLI::App app{kAbout, kProg};
  qctool::init_app(app, kExitStatus);
  std::string codecs, bits, buckets, isas, rounding;
  qctool::add_size(app, "--size", &opt.size, "input bytes (fp32), K/M/G = 1024^1..3 (default 64M)");
  app.add_option("-c,--codec", codecs,
                 "comma separated: minmax, qsgd, onebit, fp16, bf16,\n"
                 "global_linear, global_exp, topk, mxfp8, mxfp8_e5m2,\n"
                 "mxfp6, mxfp6_e3m2, mxfp4, mxint8, nvfp4\n"
                 "(default minmax,qsgd,onebit,fp16,bf16)")
      ->type_name("LIST");
  app.add_option("--bits", bits,
                 "code widths (default 8,4,2,1 where valid; qsgd 8,4,2;\n"
                 "onebit is always 1, fp16/bf16 16)")
      ->type_name("LIST");
  app.add_option("--bucket", buckets, "elements per bucket (default 128)")->type_name("LIST");
  app.add_option("--isa", isas,
                 "scalar, avx2, avx512, auto (the library's dispatch,\n"
                 "through the Codec class), api (qc_codec_encode/decode),\n"
                 "all (default scalar,avx2,avx512,api)")
      ->type_name("LIST");
  app.add_option("--rounding", rounding, "nearest | stochastic (default nearest)")
      ->type_name("MODE");
  qctool::add_integer(app, "-i,--iters", &opt.iters, 1, 1000000,
                      "timed runs per measurement, after 1 warmup; the median\n"
                      "is reported (default 5)");
  app.add_option("-J,--json", opt.json_path, "also write the results as JSON to FILE")
      ->type_name("FILE");
  qctool::parse_or_exit(app, argc, argv);

  if (app.count("--codec") > 0) opt.codecs = parse_codecs(app, codecs);
  if (app.count("--bits") > 0) opt.bits = parse_int_list(app, "--bits", bits, 1, 8);
  if (app.count("--bucket") > 0) {
    opt.buckets.clear();
    for (int b : parse_int_list(app, "--bucket", buckets, 1, 1 << 30))
      opt.buckets.push_back(size_t(b));
  }
  if (app.count("--isa") > 0) opt.isas = parse_isas(app, isas);
  if (app.count("--rounding") > 0) {
    opt.stochastic = qctool::enum_value(app, "rounding", "--rounding", rounding,
                                        qc_rounding_from_name,
                                        qc_rounding_name) == QC_ROUND_STOCHASTIC;
  }
  if (app.count("--json") > 0 && opt.json_path.empty())
    qctool::usage_error(app, "--json needs a file name");
  if (opt.size < 4) qctool::usage_error(app, "--size must be at least 4 bytes (one float)");
  if (opt.size / 4 > (size_t(1) << 34))
    qctool::usage_error(app, "--size is too large (at most 64G)");
  return opt;
}

// ---- small utilities -------------------------------------------------------------

// 64-byte aligned heap buffer, every page written at allocation so that no
// timed region takes a page fault.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes) { reset(bytes); }
  ~Buffer() { std::free(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void reset(size_t bytes) {
    std::free(p_);
    bytes_ = bytes;
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    p_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
    if (p_ == nullptr) {
      std::fprintf(stderr, "%s: error: out of memory (%zu bytes)\n", kProg, rounded);
      std::exit(2);
    }
    std::memset(p_, 0, rounded);
  }
  uint8_t* data() const { return p_; }
  float* f32() const { return reinterpret_cast<float*>(p_); }
  size_t size() const { return bytes_; }

 private:
  uint8_t* p_ = nullptr;
  size_t bytes_ = 0;
};

// Keeps the compiler from dropping stores whose results are never read.
inline void clobber(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One untimed warmup run, then `iters` timed runs; returns the median seconds.
template <class F>
double time_median(int iters, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const double t0 = now_s();
    f();
    t.push_back(now_s() - t0);
  }
  return median(t);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 10, "model name") == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t b = colon + 1;
        while (b < line.size() && line[b] == ' ') ++b;
        return line.substr(b);
      }
    }
  }
  return "unknown";
}

bool cpu_supports(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

std::string compiler_string() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("g++ ") + __VERSION__;
#else
  return "unknown";
#endif
}

// ---- the sweep plan ----------------------------------------------------------------

bool is_cast(qc_codec_t c) { return c == QC_CODEC_FP16 || c == QC_CODEC_BF16; }
bool has_kernels(qc_codec_t c) {
  return c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_ONEBIT || is_cast(c);
}
bool uses_bits(qc_codec_t c) {
  return c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_GLOBAL_LINEAR ||
         c == QC_CODEC_GLOBAL_EXP;
}
// The element width and block are the format's (policy.bits does not apply).
bool block_scaled(qc_codec_t c) { return c >= QC_CODEC_MXFP8 && c <= QC_CODEC_NVFP4; }
bool uses_bucket(qc_codec_t c) {
  return c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_ONEBIT;
}

struct Config {
  qc_codec_t codec;
  int bits;       // 16 for the casts, 1 for onebit, 0 where unused (topk)
  size_t bucket;  // 0 where unused
};

std::vector<Config> plan(const Options& opt) {
  std::vector<Config> out;
  for (qc_codec_t c : opt.codecs) {
    std::vector<int> bits;
    if (c == QC_CODEC_ONEBIT) bits = {1};
    else if (is_cast(c)) bits = {16};
    else if (c == QC_CODEC_TOPK || block_scaled(c)) bits = {0};  // no bits to sweep
    else {
      const int lo = c == QC_CODEC_QSGD ? 2 : 1;
      const std::vector<int> wanted = opt.bits.empty() ? std::vector<int>{8, 4, 2, 1} : opt.bits;
      for (int b : wanted)
        if (b >= lo) bits.push_back(b);
      if (bits.empty())
        std::fprintf(stderr, "%s: note: %s skipped: no --bits value in %d..8\n", kProg,
                     qc::codec_name(c), lo);
    }
    const std::vector<size_t> buckets = uses_bucket(c) ? opt.buckets : std::vector<size_t>{0};
    for (int b : bits)
      for (size_t k : buckets) out.push_back({c, b, k});
  }
  return out;
}

// ---- the measurement -----------------------------------------------------------------

struct OpResult {
  bool ran = false;
  double seconds = kNaN;
  double gbps = kNaN;
};

struct Row {
  Config cfg;
  std::string isa;     // scalar, avx2, avx512, auto, api
  bool ran = false;
  std::string why;     // when !ran
  OpResult enc, dec, acc, dqe;
  size_t wire = 0;     // bytes of one message, 32-byte header included
  double comp = kNaN;  // logical / wire
  double nmse = kNaN, maxerr = kNaN, bound = kNaN;
  bool over_bound = false;
  bool differs_from_scalar = false;
  double memcpy_gbps = kNaN;  // this row's own memcpy median (the ratios use the run's)
};

struct Input {
  size_t count = 0;
  Buffer x;
  double sum_sq = 0;  // sum x^2
  double max_abs = 0;
};

// Deterministic normal floats: Box-Muller on a splitmix64 stream (seed 1).
void fill_input(Input* in) {
  float* x = in->x.f32();
  uint64_t state = 1;
  auto next_unit = [&state]() {  // (0, 1], 53 bits
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (static_cast<double>(z >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  };
  const double two_pi = 6.283185307179586;
  for (size_t i = 0; i < in->count; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(next_unit()));
    const double th = two_pi * next_unit();
    x[i] = static_cast<float>(r * std::cos(th));
    if (i + 1 < in->count) x[i + 1] = static_cast<float>(r * std::sin(th));
  }
  double s = 0, m = 0;
  for (size_t i = 0; i < in->count; ++i) {
    s += double(x[i]) * x[i];
    m = std::max(m, double(std::fabs(x[i])));
  }
  in->sum_sq = s;
  in->max_abs = m;
}

// The codec's theoretical max abs error on this input, or NaN for "no simple
// bound". minmax: s/2 per bucket (s with stochastic rounding), s = range/(2^q-1);
// qsgd: norm/(2M) (norm/M stochastic); fp16/bf16: u * max|x| (u = 2^-11, 2^-8).
// The bounds exclude the float rounding of the decode itself (a few ulps).
double error_bound(const Config& cfg, bool stochastic, const Input& in) {
  const float* x = in.x.f32();
  const double c = stochastic ? 1.0 : 0.5;
  switch (cfg.codec) {
    case QC_CODEC_MINMAX: {
      const float L = static_cast<float>((1u << cfg.bits) - 1u);
      double worst = 0;
      for (size_t b0 = 0; b0 < in.count; b0 += cfg.bucket) {
        const size_t n = std::min(cfg.bucket, in.count - b0);
        float lo = x[b0], hi = x[b0];
        for (size_t i = 1; i < n; ++i) {
          lo = std::min(lo, x[b0 + i]);
          hi = std::max(hi, x[b0 + i]);
        }
        worst = std::max(worst, double((hi - lo) / L));
      }
      return c * worst;
    }
    case QC_CODEC_QSGD: {
      const double M = double((1u << (cfg.bits - 1)) - 1u);
      double worst = 0;
      for (size_t b0 = 0; b0 < in.count; b0 += cfg.bucket) {
        const size_t n = std::min(cfg.bucket, in.count - b0);
        double s = 0;
        for (size_t i = 0; i < n; ++i) s += double(x[b0 + i]) * x[b0 + i];
        worst = std::max(worst, std::sqrt(s) / M);
      }
      return c * worst;
    }
    case QC_CODEC_FP16: return std::max(in.max_abs * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
    case QC_CODEC_BF16: return std::max(in.max_abs * std::ldexp(1.0, -8), std::ldexp(1.0, -134));
    default: return kNaN;
  }
}

void error_stats(const Input& in, const float* y, Row* row) {
  const float* x = in.x.f32();
  double se = 0, me = 0;
  bool nan = false;
  for (size_t i = 0; i < in.count; ++i) {
    const double d = double(x[i]) - double(y[i]);
    if (std::isnan(d)) nan = true;
    se += d * d;
    me = std::max(me, std::fabs(d));
  }
  row->nmse = nan ? kNaN : (in.sum_sq > 0 ? se / in.sum_sq : (se > 0 ? INFINITY : 0.0));
  row->maxerr = nan ? kNaN : me;
  // Flag an error beyond the bound plus a few ulps of the decode's rounding.
  if (std::isfinite(row->bound))
    row->over_bound = nan || me > row->bound + in.max_abs * std::ldexp(1.0, -21);
  else
    row->over_bound = nan;
}

struct Bench {
  const Options& opt;
  Input in;
  Buffer copy_dst;  // memcpy target
  Buffer out;       // decode output
  Buffer err;       // DQE residual
  Buffer wire;      // one message
  Buffer ref;       // the scalar row's message, to compare the other ISAs with
  bool have_ref = false;
  std::vector<double> memcpy_samples;  // every timed memcpy of the run

  explicit Bench(const Options& o) : opt(o) {
    in.count = static_cast<size_t>(o.size / 4);
    in.x.reset(in.count * 4);
    copy_dst.reset(in.count * 4);
    out.reset(in.count * 4);
    err.reset(in.count * 4);
    fill_input(&in);
  }

  size_t bytes() const { return in.count * 4; }

  // memcpy of the whole input to another buffer: 1 warmup + iters timed.
  double measure_memcpy() {
    std::vector<double> t;
    const size_t n = bytes();
    std::memcpy(copy_dst.data(), in.x.data(), n);
    clobber(copy_dst.data());
    for (int i = 0; i < opt.iters; ++i) {
      const double t0 = now_s();
      std::memcpy(copy_dst.data(), in.x.data(), n);
      clobber(copy_dst.data());
      t.push_back(now_s() - t0);
    }
    memcpy_samples.insert(memcpy_samples.end(), t.begin(), t.end());
    return double(n) / median(t) / 1e9;
  }

  OpResult timed(const std::function<void()>& f) {
    OpResult r;
    r.ran = true;
    r.seconds = time_median(opt.iters, [&] {
      f();
      clobber(wire.data());
      clobber(out.data());
      clobber(err.data());
    });
    r.gbps = double(bytes()) / r.seconds / 1e9;
    return r;
  }

  void ensure_wire(size_t need) {
    if (wire.size() < need) wire.reset(need);
  }

  // Rows through a kernel table.
  void run_kernel_row(const KernelTable& k, const Config& cfg, Row* row) {
    const size_t n = in.count;
    const float* x = in.x.f32();
    float* y = out.f32();
    float* e = err.f32();
    row->bound = error_bound(cfg, opt.stochastic, in);
    if (is_cast(cfg.codec)) {
      const qc::cpu::CastEncodeFn enc = cfg.codec == QC_CODEC_FP16 ? k.fp16_encode : k.bf16_encode;
      const qc::cpu::CastDecodeFn dec = cfg.codec == QC_CODEC_FP16 ? k.fp16_decode : k.bf16_decode;
      row->wire = qc::kWireHeaderBytes + 2 * n;
      ensure_wire(row->wire);
      uint8_t* payload = wire.data() + qc::kWireHeaderBytes;
      row->enc = timed([&] { enc(x, n, payload); });
      row->dec = timed([&] { dec(payload, n, y, false); });
      error_stats(in, y, row);
      row->acc = timed([&] { dec(payload, n, y, true); });
      // No fused DQE kernel for the casts: the dqe column stays "-".
    } else {
      qc::cpu::QuantEncodeFn enc;
      qc::cpu::QuantDecodeFn dec;
      size_t meta_floats = 1;
      switch (cfg.codec) {
        case QC_CODEC_MINMAX:
          enc = k.minmax_encode;
          dec = k.minmax_decode;
          meta_floats = 2;
          break;
        case QC_CODEC_QSGD:
          enc = k.qsgd_encode;
          dec = k.qsgd_decode;
          break;
        default:
          enc = k.onebit_encode;
          dec = k.onebit_decode;
          break;
      }
      qc::cpu::QuantArgs args;
      args.bits = cfg.bits;
      args.bucket = cfg.bucket;
      args.stochastic = opt.stochastic && cfg.codec != QC_CODEC_ONEBIT;
      args.rng = qc::cpu::make_random_stream(0, 0, 0);
      args.index_base = 0;
      const size_t meta_bytes = qc::cpu::bucket_count(n, cfg.bucket) * meta_floats * 4;
      const size_t payload_bytes = meta_bytes + qc::cpu::codes_bytes(n, cfg.bits);
      row->wire = qc::kWireHeaderBytes + payload_bytes;
      ensure_wire(row->wire);
      uint8_t* meta = wire.data() + qc::kWireHeaderBytes;
      uint8_t* codes = meta + meta_bytes;
      const int bits = cfg.bits;
      const size_t bucket = cfg.bucket;
      row->enc = timed([&] { enc(x, nullptr, n, args, meta, codes); });
      // Compare the message with the scalar table's (they must be bit-identical).
      if (row->isa == "scalar") {
        if (ref.size() < payload_bytes) ref.reset(payload_bytes);
        std::memcpy(ref.data(), meta, payload_bytes);
        have_ref = true;
      } else if (have_ref) {
        row->differs_from_scalar = std::memcmp(ref.data(), meta, payload_bytes) != 0;
      }
      row->dec = timed([&] { dec(meta, codes, n, bits, bucket, y, false); });
      error_stats(in, y, row);
      row->acc = timed([&] { dec(meta, codes, n, bits, bucket, y, true); });
      std::memset(e, 0, bytes());
      row->dqe = timed([&] { enc(x, e, n, args, meta, codes); });
    }
  }

  // The policy of a Codec-class or API row (the library's defaults, e.g.
  // the global codecs' max-abs scale, and the sweep's codec, bits, bucket
  // and rounding).
  qc_policy_t row_policy(const Config& cfg) const {
    qc_policy_t policy = qc::default_policy();
    policy.codec = cfg.codec;
    if (uses_bits(cfg.codec)) policy.bits = cfg.bits;
    if (uses_bucket(cfg.codec)) policy.bucket_size = static_cast<int>(cfg.bucket);
    policy.rounding = opt.stochastic ? QC_ROUND_STOCHASTIC : QC_ROUND_NEAREST_EVEN;
    return policy;
  }

  // Rows through the Codec class (the library's own dispatch, header included).
  void run_codec_row(const Config& cfg, Row* row) {
    const qc_policy_t policy = row_policy(cfg);
    std::unique_ptr<qc::Codec> codec;
    qc::Status st = qc::validate_policy(policy, "policy");
    if (st) st = qc::make_codec(policy, QC_DTYPE_FLOAT32, &codec);
    if (!st) {
      row->why = "n/a: " + st.message();
      return;
    }
    const size_t n = in.count;
    const float* x = in.x.f32();
    float* y = out.f32();
    float* e = err.f32();
    ensure_wire(codec->max_encoded_size(n));
    qc::RandomKey key;
    size_t written = 0;
    qc::Status first_error = qc::Status::ok();  // ok until a call fails
    auto check = [&](qc::Status s) {
      if (!s && first_error.is_ok()) first_error = s;
    };
    row->bound = error_bound(cfg, opt.stochastic, in);
    row->enc = timed([&] { check(codec->encode(x, n, key, wire.data(), wire.size(), &written)); });
    const size_t w = written;
    row->dec = timed([&] { check(codec->decode(wire.data(), w, y, n)); });
    if (first_error.is_ok()) error_stats(in, y, row);
    row->acc = timed([&] { check(codec->decode_accumulate(wire.data(), w, y, n)); });
    std::memset(e, 0, bytes());
    row->dqe = timed([&] {
      check(codec->encode_error_compensated(x, e, n, key, wire.data(), wire.size(), &written));
    });
    if (!first_error.is_ok()) {
      row->why = std::string("error: ") + first_error.message();
      row->enc = row->dec = row->acc = row->dqe = OpResult();
      return;
    }
    row->wire = w;
  }

  // Rows through the public C API: qc_codec_encode and qc_codec_decode on
  // float32, with their argument checks, header and output handling (no
  // decode-accumulate or DQE there: those columns stay empty).
  void run_api_row(const Config& cfg, Row* row) {
    const qc_policy_t policy = row_policy(cfg);
    const size_t n = in.count;
    size_t capacity = 0;
    if (qc_codec_encoded_size(&policy, n, &capacity) != QC_SUCCESS) {
      row->why = std::string("n/a: ") + qc_last_error();
      return;
    }
    ensure_wire(capacity);
    const float* x = in.x.f32();
    float* y = out.f32();
    size_t written = 0;
    std::string first_error;  // empty until a call fails
    auto check = [&](qc_status_t s) {
      if (s != QC_SUCCESS && first_error.empty()) first_error = qc_last_error();
    };
    row->bound = error_bound(cfg, opt.stochastic, in);
    row->enc = timed([&] {
      check(qc_codec_encode(&policy, x, n, QC_DTYPE_FLOAT32, wire.data(), wire.size(), &written));
    });
    const size_t w = written;
    row->dec = timed([&] { check(qc_codec_decode(wire.data(), w, y, n, QC_DTYPE_FLOAT32)); });
    if (!first_error.empty()) {
      row->why = "error: " + first_error;
      row->enc = row->dec = OpResult();
      return;
    }
    error_stats(in, y, row);
    row->wire = w;
  }
};

// ---- output ----------------------------------------------------------------------

std::string bits_label(const Config& c) { return c.bits > 0 ? std::to_string(c.bits) : "-"; }
std::string bucket_label(const Config& c) { return c.bucket > 0 ? std::to_string(c.bucket) : "-"; }

std::string op_cell(const OpResult& r, double memcpy_gbps) {
  char buf[48];
  if (!r.ran) std::snprintf(buf, sizeof buf, "%15s", "-");
  else std::snprintf(buf, sizeof buf, "%8.3f x%-5.2f", r.gbps, r.gbps / memcpy_gbps);
  return buf;
}

std::string num_cell(double v, const char* fmt = "%10.3e") {
  char buf[32];
  if (std::isnan(v)) std::snprintf(buf, sizeof buf, "%10s", "-");
  else std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

void print_row(const Row& r, double memcpy_gbps) {
  std::printf("  %-13s %4s %6s %6s", qc::codec_name(r.cfg.codec), bits_label(r.cfg).c_str(),
              bucket_label(r.cfg).c_str(), r.isa.c_str());
  if (!r.ran) {
    std::printf("  %s\n", r.why.c_str());
    return;
  }
  std::printf("  %s  %s  %s  %s  %7.2f %s %s%s %s\n", op_cell(r.enc, memcpy_gbps).c_str(),
              op_cell(r.dec, memcpy_gbps).c_str(), op_cell(r.acc, memcpy_gbps).c_str(),
              op_cell(r.dqe, memcpy_gbps).c_str(), r.comp, num_cell(r.nmse).c_str(),
              num_cell(r.maxerr).c_str(), r.over_bound ? "!" : " ", num_cell(r.bound).c_str());
  if (r.differs_from_scalar)
    std::printf("# ^ %s message differs from the scalar kernels' (they must be bit-identical)\n",
                r.isa.c_str());
}

struct TargetCheck {
  std::string isa, op;
  double target;
  bool measured = false;
  double ratio = kNaN;
  std::string why;
  bool pass() const { return measured && ratio >= target; }
};

std::vector<TargetCheck> check_targets(const std::vector<Row>& rows, double memcpy_gbps) {
  std::vector<TargetCheck> out;
  for (const auto& [isa, op, target] :
       {std::make_tuple("avx512", "encode", 1.0), std::make_tuple("avx512", "decode", 1.0),
        std::make_tuple("avx512", "dqe", 0.6), std::make_tuple("avx2", "encode", 0.7),
        std::make_tuple("api", "encode", 1.0), std::make_tuple("api", "decode", 1.0)}) {
    TargetCheck t;
    t.isa = isa;
    t.op = op;
    t.target = target;
    out.push_back(t);
  }
  for (TargetCheck& t : out) {
    t.why = "not in this sweep";
    for (const Row& r : rows) {
      if (r.cfg.codec != QC_CODEC_MINMAX || r.cfg.bits != 4 || r.cfg.bucket != 128 ||
          r.isa != t.isa)
        continue;
      if (!r.ran) {
        t.why = r.why;
        continue;
      }
      const OpResult& o = t.op == "encode" ? r.enc : t.op == "decode" ? r.dec : r.dqe;
      if (o.ran) {
        t.measured = true;
        t.ratio = o.gbps / memcpy_gbps;
      }
    }
  }
  return out;
}

qctool::Json json_op(const OpResult& r, double memcpy_gbps) {
  if (!r.ran) return nullptr;
  qctool::Json j;
  j["seconds"] = r.seconds;
  j["gbps"] = r.gbps;
  j["x_memcpy"] = r.gbps / memcpy_gbps;
  return j;
}

struct RunInfo {
  std::string date, cpu, compiler, build_type, kernels, auto_isa;
  bool cpu_avx2 = false, cpu_avx512 = false;
};

qctool::Json json_row(const Row& r, double memcpy_gbps) {
  qctool::Json j;
  j["codec"] = qc::codec_name(r.cfg.codec);
  j["bits"] = r.cfg.bits > 0 ? qctool::Json(r.cfg.bits) : qctool::Json(nullptr);
  j["bucket"] = r.cfg.bucket > 0 ? qctool::Json(r.cfg.bucket) : qctool::Json(nullptr);
  j["isa"] = r.isa;
  j["ran"] = r.ran;
  if (!r.ran) {
    j["why"] = r.why;
    return j;
  }
  j["encode"] = json_op(r.enc, memcpy_gbps);
  j["decode"] = json_op(r.dec, memcpy_gbps);
  j["decode_accumulate"] = json_op(r.acc, memcpy_gbps);
  j["dqe"] = json_op(r.dqe, memcpy_gbps);
  j["wire_bytes"] = r.wire;
  j["compression_ratio"] = r.comp;
  j["nmse"] = r.nmse;
  j["max_abs_error"] = r.maxerr;
  j["bound"] = r.bound;
  j["over_bound"] = r.over_bound;
  j["differs_from_scalar"] = r.differs_from_scalar;
  j["row_memcpy_gbps"] = r.memcpy_gbps;
  return j;
}

qctool::Json json_target(const TargetCheck& t) {
  qctool::Json j;
  j["codec"] = "minmax";
  j["bits"] = 4;
  j["bucket"] = 128;
  j["isa"] = t.isa;
  j["op"] = t.op;
  j["target_x_memcpy"] = t.target;
  j["x_memcpy"] = t.ratio;
  j["result"] = t.measured ? (t.pass() ? "PASS" : "MISS") : "n/a";
  return j;
}

// The -J document; README.md ("JSON") lists its fields.
bool write_json(const std::string& path, const Options& opt, const RunInfo& info,
                const Bench& b, double memcpy_gbps, const std::vector<Row>& rows,
                const std::vector<TargetCheck>& targets) {
  qctool::Json doc;
  doc["tool"] = kProg;
  doc["command"] = opt.command_line;
  doc["date"] = info.date;
  doc["qc_version"] = qc_version_string();
  doc["cpu"] = info.cpu;
  doc["cpu_avx2"] = info.cpu_avx2;
  doc["cpu_avx512"] = info.cpu_avx512;
  doc["compiler"] = info.compiler;
  doc["build_type"] = info.build_type;
  doc["auto_isa"] = info.auto_isa;
  doc["bytes"] = b.bytes();
  doc["count"] = b.in.count;
  doc["threads"] = 1;
  doc["iters"] = opt.iters;
  doc["warmup"] = 1;
  doc["statistic"] = "median";
  doc["rounding"] = opt.stochastic ? "stochastic" : "nearest";
  doc["memcpy_gbps"] = memcpy_gbps;
  doc["memcpy_samples_seconds"] = b.memcpy_samples;
  doc["rows"] = qctool::Json::array();
  for (const Row& r : rows) doc["rows"].push_back(json_row(r, memcpy_gbps));
  doc["targets"] = qctool::Json::array();
  for (const TargetCheck& t : targets) doc["targets"].push_back(json_target(t));
  return qctool::write_json_file(kProg, path, doc);
}

// A kernel table's ISA (the rows that call one table directly).
bool is_table(IsaSel s) { return s != IsaSel::kAuto && s != IsaSel::kApi; }

Isa to_isa(IsaSel s) {
  return s == IsaSel::kAvx2 ? Isa::kAvx2 : s == IsaSel::kAvx512 ? Isa::kAvx512 : Isa::kScalar;
}

int run(const Options& opt) {
  RunInfo info;
  info.date = qctool::iso_date_utc();
  info.cpu = cpu_model();
  info.compiler = compiler_string();
  info.build_type = QC_CODEC_BENCH_BUILD_TYPE;
  info.cpu_avx2 = cpu_supports(Isa::kAvx2);
  info.cpu_avx512 = cpu_supports(Isa::kAvx512);
  info.auto_isa = qc::cpu::kernels().name;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!info.kernels.empty()) info.kernels += ", ";
    info.kernels += std::string(qc::cpu::isa_name(isa)) +
                    (qc::cpu::kernels_for(isa) ? " yes"
                     : cpu_supports(isa)       ? " n/a (no kernels in this build)"
                                               : " n/a (CPU lacks it)");
  }

  if (!opt.json_path.empty()) {  // fail before the sweep, not after it
    std::FILE* f = std::fopen(opt.json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "%s: error: cannot write --json file '%s'\n", kProg,
                   opt.json_path.c_str());
      return 2;
    }
    std::fclose(f);
  }

  Bench b(opt);
  const std::vector<Config> configs = plan(opt);

  std::printf("# %s: %s fp32 (%zu elements), 1 thread, per measurement 1 warmup + %d timed "
              "runs, median\n",
              kProg, qctool::human_bytes(b.bytes()).c_str(), b.in.count, opt.iters);
  std::printf("# date %s; cpu %s (avx2 %s, avx512 %s); %s, %s build\n", info.date.c_str(),
              info.cpu.c_str(), info.cpu_avx2 ? "yes" : "no", info.cpu_avx512 ? "yes" : "no",
              info.compiler.c_str(), info.build_type.c_str());
  std::printf("# kernels: %s; auto = the Codec class, which dispatches to %s\n",
              info.kernels.c_str(), info.auto_isa.c_str());
  std::printf("# rounding %s; input N(0,1) floats (Box-Muller, splitmix64 seed 1)\n",
              opt.stochastic ? "stochastic" : "nearest");
  std::printf("# GB/s = %zu input bytes / median time (GB = 1e9 B); xR = GB/s / memcpy GB/s of "
              "this run\n#\n",
              b.bytes());
  std::fflush(stdout);

  std::vector<Row> rows;
  size_t total = 0;
  for (const Config& c : configs) {
    size_t k = 0;
    for (IsaSel s : opt.isas) k += (has_kernels(c.codec) || !is_table(s)) ? 1 : 0;
    total += std::max<size_t>(k, 1);
  }
  size_t row_no = 0;
  for (const Config& cfg : configs) {
    b.have_ref = false;
    std::vector<IsaSel> isas;
    for (IsaSel s : opt.isas)
      if (has_kernels(cfg.codec) || !is_table(s)) isas.push_back(s);
    if (isas.empty()) isas.push_back(IsaSel::kAuto);  // codecs with no kernel table
    for (IsaSel sel : isas) {
      Row row;
      row.cfg = cfg;
      row.isa = sel == IsaSel::kAuto  ? "auto"
                : sel == IsaSel::kApi ? "api"
                                      : qc::cpu::isa_name(to_isa(sel));
      ++row_no;
      std::fprintf(stderr, "# [%zu/%zu] %s %s/%s %s\n", row_no, total, qc::codec_name(cfg.codec),
                   bits_label(cfg).c_str(), bucket_label(cfg).c_str(), row.isa.c_str());
      const KernelTable* k = is_table(sel) ? qc::cpu::kernels_for(to_isa(sel)) : nullptr;
      if (is_table(sel) && k == nullptr) {
        row.why = cpu_supports(to_isa(sel)) ? "n/a (no " + row.isa + " kernels in this build)"
                                            : "n/a (this CPU lacks " + row.isa + ")";
        rows.push_back(row);
        continue;
      }
      row.memcpy_gbps = b.measure_memcpy();  // interleaved: one memcpy median per row
      if (k != nullptr) b.run_kernel_row(*k, cfg, &row);
      else if (sel == IsaSel::kApi) b.run_api_row(cfg, &row);
      else b.run_codec_row(cfg, &row);
      row.ran = row.why.empty();
      if (row.ran) row.comp = double(b.bytes()) / double(row.wire);
      rows.push_back(row);
    }
  }
  if (b.memcpy_samples.empty()) b.measure_memcpy();
  const double memcpy_gbps = double(b.bytes()) / median(b.memcpy_samples) / 1e9;

  std::printf("# %-13s %4s %6s %6s  %15s  %15s  %15s  %15s  %7s %10s %11s %10s\n", "codec", "bits",
              "bucket", "isa", "encode GB/s xR", "decode GB/s xR", "dec-acc GB/s xR",
              "dqe GB/s xR", "ratio", "nmse", "maxerr", "bound");
  for (const Row& r : rows) print_row(r, memcpy_gbps);
  bool any_over = false;
  for (const Row& r : rows) any_over = any_over || (r.ran && r.over_bound);
  std::printf("#\n");
  if (any_over)
    std::printf("# ! marks a max error beyond the bound (plus 2^-21 max|x| of decode rounding)\n");
  std::printf("# memcpy: %.3f GB/s (median of %zu runs of a %s memcpy, interleaved with the rows)\n",
              memcpy_gbps, b.memcpy_samples.size(), qctool::human_bytes(b.bytes()).c_str());

  const std::vector<TargetCheck> targets = check_targets(rows, memcpy_gbps);
  for (const TargetCheck& t : targets) {
    if (t.measured)
      std::printf("# target: minmax 4-bit b128 %s %s x%.2f memcpy (target %.1f): %s\n",
                  t.isa.c_str(), t.op.c_str(), t.ratio, t.target, t.pass() ? "PASS" : "MISS");
    else
      std::printf("# target: minmax 4-bit b128 %s %s (target %.1f): %s%s%s\n", t.isa.c_str(),
                  t.op.c_str(), t.target, t.why.compare(0, 3, "n/a") == 0 ? "" : "n/a (",
                  t.why.c_str(), t.why.compare(0, 3, "n/a") == 0 ? "" : ")");
  }
  std::fflush(stdout);
  if (!opt.json_path.empty() &&
      !write_json(opt.json_path, opt, info, b, memcpy_gbps, rows, targets))
    return 2;
  return 0;
}

}  // namespace
}  // namespace qcbench

int main(int argc, char** argv) {
  const qcbench::Options opt = qcbench::parse_args(argc, argv);
  return qcbench::run(opt);
}
