// qc-perf: benchmark and correctness sweep of qc collectives, in the spirit of
// nccl-tests. Command line, the sweep plan and the main loop.
#include "perf.h"
#include "qc_tool_names.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace qcperf {
namespace {

// Default -e when more than one codec is swept (README: "Default sweep").
constexpr uint64_t kMultiCodecMaxBytes = 4ull << 20;

// ---- command line --------------------------------------------------------------

void usage(std::FILE* out) {
  std::fprintf(out,
"usage: qc-perf [options]\n"
"Sweeps message sizes of qc collectives on the local transport (ranks are\n"
"threads), prints an nccl-tests-like table and checks every result.\n"
"\n"
"  -n, --nranks N          ranks (threads) of the local group (default 4)\n"
"  -b, --minbytes SIZE     smallest size per rank (default 8); K/M/G = 1024^1..3\n"
"  -e, --maxbytes SIZE     largest size per rank (default 16M for one codec,\n"
"                          4M when several codecs are swept)\n"
"  -f, --stepfactor F      multiply the size by F each step, F >= 2 (default 2)\n"
"  -o, --op OP             allreduce | alltoall | all (default allreduce)\n"
"  -a, --algo LIST         allreduce algorithms, comma separated: auto, ring,\n"
"                          rd (recursive_doubling), sra, tree, native, all\n"
"                          (default all = ring,rd,sra,tree,native,auto; without\n"
"                          -a, native only if a global codec is swept);\n"
"                          alltoall has none. native with a non-global codec is n/a\n"
"  -c, --codec LIST        codecs, comma separated: none, fp16, bf16, minmax, qsgd,\n"
"                          global_linear, global_exp, onebit, topk, all\n"
"                          (default all). NAME:BITS sets that entry's bits\n"
"                          (minmax:8), NAME+ef its error feedback (onebit+ef)\n"
"      --bits N            code width 1..8 (default: the library's, 4)\n"
"      --bucket N          elements per bucket (default: the library's, 128)\n"
"      --topk-ratio R      fraction kept by topk, (0, 1]\n"
"      --rounding MODE     nearest | stochastic (default nearest)\n"
"      --seed N            stochastic rounding seed (default 0)\n"
"      --ef                error feedback on (allreduce)\n"
"      --min-compress SIZE policy min_compress_bytes: smaller messages go\n"
"                          uncompressed (default 0 here, so every row measures\n"
"                          its codec; 'lib' = the library's default)\n"
"      --scale-period K    policy scale_update_period: scales computed every\n"
"                          K-th call and reused in between (default 1)\n"
"  -d, --dtype TYPE        float | half | bfloat16 (default float)\n"
"  -r, --redop OP          sum | avg (default sum)\n"
"  -w, --warmup_iters N    untimed iterations per row (default 2)\n"
"  -i, --iters N           timed iterations per row (default 5)\n"
"  -t, --timeout SECONDS   how long a call may wait for peers (default 60)\n"
"  -J, --json FILE         also write the rows as JSON to FILE\n"
"      --transport T       local (threads, default) | mpi (one process per rank\n"
"                          under mpirun; -n must be omitted or equal the MPI\n"
"                          size; adds an MPI_Allreduce row per size and a\n"
"                          speedup column)\n"
"      --profile           add columns codec(us) / hidden(us) / xport(us): qc_stats\n"
"                          codec_seconds / codec_seconds_in_flight (codec\n"
"                          time that overlapped transfers) / transport_seconds\n"
"                          per call\n"
"      --device            CUDA device buffers and a stream per rank (local\n"
"                          transport; copies before and after a row are not\n"
"                          timed); QC_DEVICE_CODEC=0 times whole-buffer staging\n"
"  -h, --help              this text\n"
"\n"
"Exit status: 0 all rows passed (n/a rows do not count), 1 some row failed,\n"
"2 bad usage or a codec / algorithm this qc library does not support,\n"
"77 --device without a CUDA device.\n");
}

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "qc-perf: %s\n(try 'qc-perf --help')\n", msg.c_str());
  std::exit(2);
}

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || !(s[0] >= '0' && s[0] <= '9')) return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

int parse_int(const std::string& flag, const std::string& s, int lo, int hi) {
  uint64_t v;
  if (!parse_u64(s, &v) || v < uint64_t(lo) || v > uint64_t(hi))
    usage_error("bad value '" + s + "' for " + flag + " (an integer in " + std::to_string(lo) +
                ".." + std::to_string(hi) + ")");
  return static_cast<int>(v);
}

double parse_double(const std::string& flag, const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || errno || *end || !std::isfinite(v))
    usage_error("bad value '" + s + "' for " + flag + " (a number)");
  return v;
}

// "8", "64K", "128M", "1G" (also "64KB", "64KiB"); powers of 1024.
uint64_t parse_size(const std::string& flag, const std::string& s) {
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  uint64_t v;
  if (i == 0 || !parse_u64(s.substr(0, i), &v)) usage_error("bad size '" + s + "' for " + flag);
  std::string suf = s.substr(i);
  for (char& c : suf) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suf.empty() || suf == "B") shift = 0;
  else if (suf == "K" || suf == "KB" || suf == "KIB") shift = 10;
  else if (suf == "M" || suf == "MB" || suf == "MIB") shift = 20;
  else if (suf == "G" || suf == "GB" || suf == "GIB") shift = 30;
  else usage_error("bad size '" + s + "' for " + flag + " (suffixes: K, M, G)");
  if (shift && v > (UINT64_MAX >> shift)) usage_error("size '" + s + "' is too large");
  return v << shift;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

std::vector<qc_algorithm_t> parse_algos(const std::string& s) {
  std::vector<qc_algorithm_t> out;
  auto add = [&](qc_algorithm_t a) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  };
  for (const std::string& raw : split(s, ',')) {
    const std::string t = lower(raw);
    if (t == "all") {
      for (qc_algorithm_t a : {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA,
                               QC_ALGO_TREE, QC_ALGO_NATIVE, QC_ALGO_AUTO})
        add(a);
    } else {
      qc_algorithm_t a = QC_ALGO_AUTO;
      if (qc_algorithm_from_name(t.c_str(), &a) != QC_SUCCESS) {
        usage_error("unknown algorithm '" + raw + "' for -a (" + qctool::names_of(qc_algorithm_name) +
                    ", rd, all)");
      }
      add(a);
    }
  }
  return out;
}

qc_codec_t parse_codec(const std::string& s) {
  qc_codec_t c = QC_CODEC_NONE;
  if (qc_codec_from_name(lower(s).c_str(), &c) != QC_SUCCESS) {
    usage_error("unknown codec '" + s + "' for -c (" + qctool::names_of(qc_codec_name) + ")");
  }
  return c;
}

// Codec list entries: NAME, NAME:BITS (bits for that entry only), and a
// "+ef" suffix (error feedback for that entry only), e.g. minmax:8,onebit+ef.
void parse_codecs(const std::string& s, Options* opt) {
  opt->codecs.clear();
  opt->codec_bits.clear();
  opt->codec_ef.clear();
  auto add = [&](qc_codec_t c, int bits, int ef) {
    for (size_t i = 0; i < opt->codecs.size(); ++i)
      if (opt->codecs[i] == c && opt->codec_bits[i] == bits && opt->codec_ef[i] == ef) return;
    opt->codecs.push_back(c);
    opt->codec_bits.push_back(bits);
    opt->codec_ef.push_back(ef);
  };
  for (const std::string& raw : split(s, ',')) {
    if (lower(raw) == "all") {
      for (qc_codec_t c : {QC_CODEC_NONE, QC_CODEC_FP16, QC_CODEC_BF16, QC_CODEC_MINMAX,
                           QC_CODEC_QSGD, QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP,
                           QC_CODEC_ONEBIT, QC_CODEC_TOPK})
        add(c, 0, -1);
      continue;
    }
    std::string name = raw;
    int ef = -1, bits = 0;
    if (name.size() > 3 && lower(name.substr(name.size() - 3)) == "+ef") {
      ef = 1;
      name = name.substr(0, name.size() - 3);
    }
    const size_t colon = name.find(':');
    if (colon != std::string::npos) {
      bits = parse_int("-c " + raw, name.substr(colon + 1), 1, 8);
      name = name.substr(0, colon);
    }
    add(parse_codec(name), bits, ef);
  }
}

qc_dtype_t parse_dtype(const std::string& s) {
  qc_dtype_t d = QC_DTYPE_FLOAT32;
  if (qc_dtype_from_name(lower(s).c_str(), &d) != QC_SUCCESS) {
    usage_error("unknown dtype '" + s + "' for -d (" + qctool::names_of(qc_dtype_name) +
                "; float, half, bf16)");
  }
  return d;
}

Options parse_args(int argc, char** argv) {
  Options opt;
  opt.policy = QC_POLICY_INIT;
  if (qc_policy_init(&opt.policy) != QC_SUCCESS) {
    std::fprintf(stderr, "qc-perf: error: qc_policy_init failed: %s\n", qc_last_error());
    std::exit(2);
  }
  // A benchmark of codecs compresses every size unless told otherwise.
  opt.policy.min_compress_bytes = 0;
  for (int i = 0; i < argc; ++i) opt.command_line += std::string(i ? " " : "") + argv[i];

  struct Flag {
    char short_name;
    const char* long_name;
    bool takes_value;
  };
  static const Flag flags[] = {
      {'n', "nranks", true},     {'b', "minbytes", true}, {'e', "maxbytes", true},
      {'f', "stepfactor", true}, {'o', "op", true},       {'a', "algo", true},
      {'c', "codec", true},      {0, "bits", true},       {0, "bucket", true},
      {0, "topk-ratio", true},   {0, "rounding", true},   {0, "seed", true},
      {0, "ef", false},          {'d', "dtype", true},    {'r', "redop", true},
      {'w', "warmup_iters", true}, {'i', "iters", true},  {'t', "timeout", true},
      {'J', "json", true},       {'h', "help", false},
      {0, "transport", true},    {0, "profile", false},
      {0, "min-compress", true}, {0, "scale-period", true},
      {0, "device", false},
  };
  bool algos_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    const Flag* flag = nullptr;
    std::string value;
    bool has_value = false;
    if (arg.size() > 2 && arg[0] == '-' && arg[1] == '-') {
      std::string name = arg.substr(2);
      const size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      std::string norm = name;
      std::replace(norm.begin(), norm.end(), '_', '-');
      for (const Flag& f : flags) {
        std::string ln = f.long_name;
        std::replace(ln.begin(), ln.end(), '_', '-');
        if (ln == norm) flag = &f;
      }
    } else if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
      for (const Flag& f : flags)
        if (f.short_name == arg[1]) flag = &f;
      if (flag && arg.size() > 2) {  // -b8 form
        value = arg.substr(2);
        has_value = true;
      }
    }
    if (!flag) usage_error("unknown option '" + arg + "'");
    const std::string name = flag->short_name ? std::string("-") + flag->short_name
                                              : std::string("--") + flag->long_name;
    if (flag->takes_value && !has_value) {
      if (i + 1 >= argc) usage_error("option " + name + " needs a value");
      value = argv[++i];
    } else if (!flag->takes_value && has_value) {
      usage_error("option " + name + " takes no value");
    }
    const std::string ln = flag->long_name;
    if (ln == "help") {
      usage(stdout);
      std::exit(0);
    } else if (ln == "nranks") {
      opt.nranks = parse_int(name, value, 1, 1024);
      opt.nranks_given = true;
    } else if (ln == "transport") {
      const std::string t = lower(value);
      if (t == "local") opt.mpi = false;
      else if (t == "mpi") {
        if (!mpi_available())
          usage_error("--transport mpi: this qc-perf was built without MPI (QC_HAVE_MPI is "
                      "off: configure with an MPI library installed, or -DQC_WITH_MPI=ON)");
        opt.mpi = true;
      } else usage_error("unknown transport '" + value + "' for --transport (local, mpi)");
    } else if (ln == "profile") opt.profile = true;
    else if (ln == "device") opt.device = true;
    else if (ln == "min-compress") {
      if (lower(value) == "lib") {
        qc_policy_t lib = QC_POLICY_INIT;
        opt.policy.min_compress_bytes = lib.min_compress_bytes;
      } else {
        opt.policy.min_compress_bytes = parse_size(name, value);
      }
    }
    else if (ln == "minbytes") opt.min_bytes = parse_size(name, value);
    else if (ln == "maxbytes") {
      opt.max_bytes = parse_size(name, value);
      opt.max_bytes_given = true;
    }
    else if (ln == "stepfactor") {
      uint64_t f;
      if (!parse_u64(value, &f) || f < 2) usage_error("bad value '" + value + "' for -f (an integer >= 2)");
      opt.factor = f;
    } else if (ln == "op") {
      const std::string t = lower(value);
      if (t == "allreduce" || t == "all_reduce") opt.ops = {Op::Allreduce};
      else if (t == "alltoall" || t == "all_to_all") opt.ops = {Op::Alltoall};
      else if (t == "all") opt.ops = {Op::Allreduce, Op::Alltoall};
      else usage_error("unknown op '" + value + "' for -o (allreduce, alltoall, all)");
    } else if (ln == "algo") {
      opt.algos = parse_algos(value);
      algos_given = true;
    } else if (ln == "codec") parse_codecs(value, &opt);
    else if (ln == "bits") opt.policy.bits = parse_int(name, value, 1, 8);
    else if (ln == "bucket") opt.policy.bucket_size = parse_int(name, value, 1, 1 << 30);
    else if (ln == "scale-period")
      opt.policy.scale_update_period = parse_int(name, value, 1, 1 << 30);
    else if (ln == "topk-ratio") {
      const double r = parse_double(name, value);
      if (!(r > 0 && r <= 1)) usage_error("bad value '" + value + "' for --topk-ratio (0 < R <= 1)");
      opt.policy.topk_ratio = static_cast<float>(r);
    } else if (ln == "rounding") {
      if (qc_rounding_from_name(lower(value).c_str(), &opt.policy.rounding) != QC_SUCCESS) {
        usage_error("unknown rounding '" + value + "' (" + qctool::names_of(qc_rounding_name) + ")");
      }
    } else if (ln == "seed") {
      uint64_t s;
      if (!parse_u64(value, &s)) usage_error("bad value '" + value + "' for --seed");
      opt.policy.seed = s;
    } else if (ln == "ef") opt.policy.error_feedback = 1;
    else if (ln == "dtype") opt.dtype = parse_dtype(value);
    else if (ln == "redop") {
      const std::string t = lower(value);
      if (t == "sum") opt.redop = QC_OP_SUM;
      else if (t == "avg") opt.redop = QC_OP_AVG;
      else usage_error("unknown reduction '" + value + "' for -r (sum, avg)");
    } else if (ln == "warmup_iters") opt.warmup = parse_int(name, value, 0, 1000000);
    else if (ln == "iters") opt.iters = parse_int(name, value, 1, 1000000);
    else if (ln == "timeout") {
      opt.timeout = parse_double(name, value);
      if (!(opt.timeout > 0)) usage_error("bad value '" + value + "' for -t (seconds > 0)");
    } else if (ln == "json") {
      if (value.empty()) usage_error("--json needs a file name");
      opt.json_path = value;
    }
  }
  if (opt.device) {
    if (opt.mpi) usage_error("--device works with the local transport only");
    const DeviceSupport support = device_support();
    if (support == DeviceSupport::kNotBuilt) {
      usage_error("--device: this qc-perf was built without CUDA (configure where nvcc is "
                  "found, or with -DQC_WITH_CUDA=ON)");
    }
    if (support == DeviceSupport::kNoDevice) {
      std::fprintf(stderr, "qc-perf: no CUDA device: --device needs one (skipped)\n");
      std::exit(77);
    }
  }
  if (opt.codecs.empty()) parse_codecs("all", &opt);
  opt.policy.codec = opt.codecs.front();
  // Several codecs multiply the rows: the default sweep stops earlier.
  if (opt.codecs.size() > 1 && !opt.max_bytes_given) opt.max_bytes = kMultiCodecMaxBytes;
  if (opt.min_bytes == 0) usage_error("-b must be at least 1 byte");
  if (opt.max_bytes < opt.min_bytes) usage_error("-e must not be smaller than -b");
  if (!algos_given || opt.algos.empty()) {
    opt.algos = parse_algos("all");
    // Without -a, native only where it exists: some swept codec is global.
    bool any_global = false;
    for (qc_codec_t c : opt.codecs)
      any_global = any_global || c == QC_CODEC_GLOBAL_LINEAR || c == QC_CODEC_GLOBAL_EXP;
    if (!any_global)
      opt.algos.erase(std::find(opt.algos.begin(), opt.algos.end(), QC_ALGO_NATIVE));
  }
  return opt;
}

// ---- the sweep plan ------------------------------------------------------------

struct SizeStep {
  uint64_t bytes;  // logical bytes per rank
  size_t count;    // elements (allreduce) or elements per peer (alltoall)
};

// Sizes min, min*f, ... <= max, rounded down to a whole number of elements
// (alltoall: of elements per peer); sizes that round to 0 or repeat are skipped.
std::vector<SizeStep> plan_sizes(const Options& opt, Op op) {
  const uint64_t unit = dtype_size(opt.dtype) * (op == Op::Alltoall ? uint64_t(opt.nranks) : 1);
  std::vector<SizeStep> out;
  uint64_t last = 0;
  for (uint64_t s = opt.min_bytes; s <= opt.max_bytes;) {
    const uint64_t count = s / unit;
    if (count > 0 && count * unit != last) {
      out.push_back({count * unit, static_cast<size_t>(count)});
      last = count * unit;
    }
    if (s > opt.max_bytes / opt.factor) break;
    s *= opt.factor;
  }
  return out;
}

// ---- progress on stderr ----------------------------------------------------------

// A watchdog thread: when one step (a row, or preparing a size) has run for
// more than 2 s it prints what is running, then every 30 s, and says when it
// finished.
class Progress {
 public:
  explicit Progress(bool enabled = true) : enabled_(enabled), thread_([this] { loop(); }) {}
  ~Progress() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void begin(const std::string& what) {
    std::lock_guard<std::mutex> lock(m_);
    what_ = what;
    start_ = std::chrono::steady_clock::now();
    active_ = true;
    printed_ = 0;
  }
  void end() {
    std::lock_guard<std::mutex> lock(m_);
    if (printed_ && enabled_)
      std::fprintf(stderr, "# qc-perf: %s: done in %.1f s\n", what_.c_str(), elapsed());
    active_ = false;
  }

 private:
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void loop() {
    std::unique_lock<std::mutex> lock(m_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (!active_ || !enabled_) continue;
      const double t = elapsed();
      if ((printed_ == 0 && t > 2.0) || (printed_ > 0 && t > 2.0 + 30.0 * printed_)) {
        std::fprintf(stderr, "# qc-perf: %s: running (%.0f s so far)\n", what_.c_str(), t);
        std::fflush(stderr);
        ++printed_;
      }
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  bool enabled_;
  bool stop_ = false, active_ = false;
  int printed_ = 0;
  std::string what_;
  std::chrono::steady_clock::time_point start_;
  std::thread thread_;  // last: starts after the other members exist
};

// ---- main loop -----------------------------------------------------------------

}  // namespace

qc_policy_t codec_policy(const Options& opt, size_t i) {
  qc_policy_t p = opt.policy;
  p.codec = opt.codecs[i];
  if (i < opt.codec_bits.size() && opt.codec_bits[i] > 0) p.bits = opt.codec_bits[i];
  if (i < opt.codec_ef.size() && opt.codec_ef[i] >= 0) p.error_feedback = opt.codec_ef[i];
  return p;
}

namespace {

bool is_global_codec(qc_codec_t c) {
  return c == QC_CODEC_GLOBAL_LINEAR || c == QC_CODEC_GLOBAL_EXP;
}

int run_sweep(const Options& opt) {
  print_preamble(opt);

  Group group(opt.nranks, opt.timeout, opt.mpi ? opt.mpi_rank : -1);
  std::string err;
  if (!mpi_all(group.create(&err) == QC_SUCCESS)) {
    std::fprintf(stderr, "qc-perf: error: cannot create %s group of %d ranks: %s\n",
                 opt.mpi ? "an MPI" : "a local", opt.nranks, err.c_str());
    if (opt.mpi) mpi_abort(2);
    return 2;
  }
  WorkerPool pool(opt.nranks);
  Progress progress(!opt.mpi || opt.mpi_rank == 0);

  size_t total_rows = 0;
  for (Op op : opt.ops)
    total_rows += plan_sizes(opt, op).size() * opt.codecs.size() *
                  (op == Op::Allreduce ? opt.algos.size() : 1);

  std::vector<Row> rows;
  size_t row_no = 0;
  for (Op op : opt.ops) {
    print_section_header(opt, op);
    const std::vector<qc_algorithm_t> algos =
        op == Op::Allreduce ? opt.algos : std::vector<qc_algorithm_t>{QC_ALGO_AUTO};
    for (const SizeStep& step : plan_sizes(opt, op)) {
      const size_t elems_per_rank = op == Op::Allreduce ? step.count : step.count * opt.nranks;
      Buffers buf;  // one size at a time: freed at the end of this iteration
      progress.begin(std::string(op_name(op)) + " " + human_bytes(step.bytes) + ": preparing inputs");
      const size_t buf_bytes = elems_per_rank * dtype_size(opt.dtype);
      const bool allocated =
          mpi_all(opt.mpi ? buf.allocate_shared_recv(opt.nranks, buf_bytes, opt.mpi_rank)
                          : buf.allocate(opt.nranks, buf_bytes));
      InputStats stats;
      if (allocated) {
        fill_inputs(pool, opt, op, buf, elems_per_rank);
        stats = input_stats(pool, opt, op, buf, step.count);
      }
      progress.end();

      // MPI: the plain MPI_Allreduce of the same buffer (fp32 sum), as a
      // companion row (algo "mpi"); every qc row of this size gets
      // speedup = its time / this time.
      double mpi_us = std::numeric_limits<double>::quiet_NaN();
      if (opt.mpi && op == Op::Allreduce && allocated) {
        progress.begin("allreduce " + human_bytes(step.bytes) + ": MPI_Allreduce");
        mpi_us = mpi_allreduce_time_us(opt, buf, step.count);
        Row row;
        row.op = op;
        row.baseline = true;
        row.size = step.bytes;
        row.count = step.count;
        row.type = "float";
        row.algo = "mpi";
        row.codec = "MPI_Allreduce";
        row.codec_name = "mpi";
        row.time_us = mpi_us;
        row.algbw = mpi_us > 0 ? double(step.count) * 4 / (mpi_us * 1e-6) / 1e9 : 0;
        row.busbw = row.algbw * busbw_factor(op, opt.nranks);
        row.mpi_time_us = mpi_us;
        row.speedup = 1.0;
        row.wire = std::numeric_limits<double>::quiet_NaN();
        row.ratio = std::numeric_limits<double>::quiet_NaN();
        if (opt.dtype == QC_DTYPE_FLOAT32) {
          // Its result, checked as codec none on a ring (any summation order).
          qc_policy_t none = opt.policy;
          none.codec = QC_CODEC_NONE;
          none.algorithm = QC_ALGO_RING;
          none.error_feedback = 0;
          const ErrorModel model =
              error_model(op, opt.nranks, opt.dtype, QC_OP_SUM, none, stats);
          Options sum_opt = opt;
          sum_opt.redop = QC_OP_SUM;
          CheckResult cr = check_result(pool, sum_opt, model, op, buf, step.count, stats);
          row.bound = model.bound;
          row.error = cr.max_err;
          // Bit-identical replicas are qc's promise, not MPI's: not counted.
          row.wrong = cr.wrong - cr.replica_diff;
        } else {
          row.error = row.bound = std::numeric_limits<double>::quiet_NaN();
        }
        progress.end();
        print_row(row);
        rows.push_back(row);
      }

      for (size_t ci = 0; ci < opt.codecs.size(); ++ci) {
        const qc_codec_t codec = opt.codecs[ci];
        for (qc_algorithm_t algo : algos) {
          ++row_no;
          Row row;
          row.op = op;
          row.size = step.bytes;
          row.count = step.count;
          row.type = dtype_name(opt.dtype);
          row.algo = op == Op::Allreduce ? algo_name(algo) : "-";
          qc_policy_t policy = codec_policy(opt, ci);
          policy.algorithm = op == Op::Allreduce ? algo : QC_ALGO_AUTO;
          row.codec = codec_label(policy);
          row.bits = policy.bits;
          row.error_feedback = policy.error_feedback != 0;
          row.codec_name = codec_name(codec);
          if (!allocated) {
            row.ran = false;
            row.failure = "out of memory (" + std::to_string(opt.nranks) + " x 2 x " +
                          human_bytes(step.bytes) + ")";
            print_row(row);
            rows.push_back(row);
            continue;
          }
          // What the library will send: below min_compress_bytes, codec none.
          qc_policy_t sent = policy;
          if (step.count * dtype_size(opt.dtype) < policy.min_compress_bytes)
            sent.codec = QC_CODEC_NONE;
          const bool native_ok =
              is_global_codec(sent.codec) || (sent.codec == QC_CODEC_NONE && opt.mpi);
          const ErrorModel model =
              error_model(op, opt.nranks, opt.dtype, opt.redop, sent, stats);
          row.bound = model.bound;
          if (!mpi_all(group.intact()) && !mpi_all(group.create(&err) == QC_SUCCESS)) {
            std::fprintf(stderr, "qc-perf: error: cannot recreate the local group: %s\n",
                         err.c_str());
            return 2;
          }
          char what[200];
          std::snprintf(what, sizeof what, "[%zu/%zu] %s %s %s %s", row_no, total_rows,
                        op_name(op), row.algo.c_str(), row.codec.c_str(),
                        human_bytes(step.bytes).c_str());
          progress.begin(what);
          const RunResult rr = run_collective(pool, group, opt, policy, op, buf, step.count);
          if (rr.ok) {
            const CheckResult cr = check_result(pool, opt, model, op, buf, step.count, stats);
            const double t = rr.time_us * 1e-6;
            row.time_us = rr.time_us;
            row.algbw = t > 0 ? double(step.bytes) / t / 1e9 : 0;
            row.busbw = row.algbw * busbw_factor(op, opt.nranks);
            row.wire = rr.wire_bytes;
            row.codec_us = rr.codec_us;
            row.transport_us = rr.transport_us;
            row.hidden_codec_us = rr.hidden_codec_us;
            row.mpi_time_us = mpi_us;
            row.speedup = rr.time_us > 0 ? mpi_us / rr.time_us
                                         : std::numeric_limits<double>::quiet_NaN();
            // Compression ratio: the bytes an uncompressed, bandwidth-optimal
            // run sends per rank (size x the busbw factor) over what was sent,
            // so codec none gives about 1 whatever the algorithm. One rank
            // sends nothing: the ratio is infinite ("inf"; null in JSON).
            row.ratio = rr.wire_bytes > 0
                            ? double(step.bytes) * busbw_factor(op, opt.nranks) / rr.wire_bytes
                            : std::numeric_limits<double>::infinity();
            row.error = cr.max_err;
            row.wrong = cr.wrong;
            row.replica_diff = cr.replica_diff;
            if (op == Op::Allreduce) {
              // Wire over SRA's ideal (2(n-1) encoded chunks per rank, no
              // envelopes); SRA itself must be within ideal .. ideal + allowance.
              double ideal = 0;
              for (int r = 0; r < opt.nranks; ++r)
                ideal += double(sra_ideal_bytes(sent, opt.dtype, opt.nranks, r, step.count));
              ideal /= opt.nranks;
              row.wire_ideal = ideal > 0 ? rr.wire_bytes / ideal
                                         : std::numeric_limits<double>::quiet_NaN();
              if (algo == QC_ALGO_SRA) {
                // Pipelined, every piece is a message of its own.
                const double allow = double(sra_allowance_bytes(
                    opt.nranks, sra_pieces(sent, opt.nranks, step.count)));
                for (int r = 0; r < opt.nranks && row.wire_ok; ++r) {
                  const double id =
                      double(sra_expected_bytes(sent, opt.dtype, opt.nranks, r, step.count));
                  const double w = rr.wire_per_rank[r];
                  if (w < id || w > id + allow) {
                    row.wire_ok = false;
                    char note[200];
                    std::snprintf(note, sizeof note,
                                  "rank %d sent %.0f B per call; SRA ideal %.0f B, allowance %.0f B",
                                  r, w, id, allow);
                    row.wire_note = note;
                  }
                }
              }
            }
          }
          progress.end();
          if (!rr.ok) {
            const std::string msg = std::string(qc_status_string(rr.status)) + ": " + rr.message;
            if (op == Op::Allreduce && algo == QC_ALGO_NATIVE && !native_ok &&
                rr.status == QC_ERROR_UNSUPPORTED && !rr.policy_failed) {
              // native needs a global codec (or none on MPI): the pair does not exist.
              row.na = true;
              row.failure = opt.mpi ? "n/a (native needs none, global_linear or global_exp)"
                                    : "n/a (native needs global_linear or global_exp)";
            } else if (rr.policy_failed || rr.status == QC_ERROR_UNSUPPORTED) {
              std::fflush(stdout);
              std::fprintf(stderr,
                           "qc-perf: error: %s (codec %s, algo %s, dtype %s, %d ranks): %s\n",
                           rr.policy_failed ? "qc_comm_set_layer_policy failed" : op_name(op),
                           row.codec.c_str(), row.algo.c_str(), row.type.c_str(), opt.nranks,
                           msg.c_str());
              if (opt.mpi) mpi_abort(2);
              return 2;
            } else {
              row.ran = false;
              row.failure = msg + " (rank " + std::to_string(rr.failed_rank) + ")";
            }
          } else if (op == Op::Allreduce && algo == QC_ALGO_NATIVE && !native_ok) {
            row.wire_ok = false;
            row.wire_note = "native with a non-global codec succeeded; QC_ERROR_UNSUPPORTED expected";
          }
          print_row(row);
          rows.push_back(row);
        }
      }
    }
  }

  print_footer(rows);
  bool json_ok = true;
  if (!opt.json_path.empty() && opt.mpi_rank == 0) json_ok = write_json(opt.json_path, opt, rows);
  json_ok = mpi_all(json_ok);
  size_t passed = 0, failed = 0, na = 0;
  for (const Row& r : rows) {
    passed += r.passed() ? 1 : 0;
    failed += r.failed() ? 1 : 0;
    na += r.na ? 1 : 0;
  }
  if (na) std::printf("%zu passed, %zu failed, %zu n/a\n", passed, failed, na);
  else std::printf("%zu passed, %zu failed\n", passed, failed);
  std::fflush(stdout);
  if (!json_ok) return 2;
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace qcperf

int main(int argc, char** argv) {
  qcperf::Options opt = qcperf::parse_args(argc, argv);
  if (!opt.mpi) return qcperf::run_sweep(opt);
  int rank = 0, size = 1;
  qcperf::mpi_init(&argc, &argv, &rank, &size);
  if (opt.nranks_given && opt.nranks != size) {
    if (rank == 0)
      std::fprintf(stderr, "qc-perf: -n %d does not match the MPI size %d (with --transport mpi "
                   "the ranks are mpirun's processes; leave -n out)\n", opt.nranks, size);
    qcperf::mpi_finalize();
    return 2;
  }
  opt.nranks = size;
  opt.mpi_rank = rank;
  // Only rank 0 prints the table (stderr stays open on every rank).
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 2;
  const int rc = qcperf::run_sweep(opt);
  qcperf::mpi_finalize();
  return rc;
}
