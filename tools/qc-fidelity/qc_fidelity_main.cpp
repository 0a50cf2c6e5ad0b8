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
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qc.h"
#include "qc_tool_cli.h"
#include "qc_tool_json.h"
#include "qc_tool_text.h"

namespace {

constexpr size_t kErrorBufferHeaderBytes = 56;  // qc_error_buffer_save's header

constexpr const char* kAbout =
    "The error-feedback convergence table of docs/fidelity.md: the error of the mean\n"
    "output of T allreduce calls on the same inputs, with and without error feedback.\n"
    "Markdown on stdout (--json: JSON instead); progress on stderr.";
constexpr const char* kExitStatus =
    "Exit status: 0 ok, 1 a bookkeeping or replica check failed, 2 usage or library error.";

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
  double topk_ratio = 0.01;
  uint64_t seed = 1;
  bool fixed_seed = false;
  bool json = false;  // --json: the results as JSON on stdout, no markdown
  std::vector<CodecSpec> codecs;
  std::vector<AlgoSpec> algos;
  std::string ef = "both";  // on, off, both
  std::string command_line;
};

// NAME, NAME<BITS>, either with '~' for stochastic rounding: minmax4, qsgd4~.
// A name that itself ends in digits (fp16) is taken whole.
CodecSpec parse_codec(const CLI::App& app, const std::string& s) {
  CodecSpec c;
  c.name = s;
  std::string base = s;
  if (!base.empty() && base.back() == '~') {
    c.stochastic = true;
    base.pop_back();
  }
  if (qctool::enum_from_name(qc_codec_from_name, base, &c.codec)) return c;
  size_t d = base.size();
  while (d > 0 && std::isdigit(static_cast<unsigned char>(base[d - 1]))) --d;
  const std::string bits = base.substr(d);
  if (!bits.empty() && !qctool::parse_integer(bits, 1, 8, &c.bits))
    qctool::usage_error(app, qctool::bad_integer_message("-c " + s, bits, "1", "8"));
  if (!qctool::enum_from_name(qc_codec_from_name, base.substr(0, d), &c.codec)) {
    qctool::usage_error(app, "unknown codec '" + s + "' for -c (" +
                                 qctool::names_of(qc_codec_name) + ")");
  }
  return c;
}

Options parse_args(int argc, char** argv) {
  Options o;
  o.command_line = qctool::command_line(argc, argv);
  CLI::App app{kAbout, "qc-fidelity"};
  qctool::init_app(app, kExitStatus);
  std::string codecs = "minmax2,minmax4,onebit,topk,qsgd4~";
  std::string algos = "ring,sra";
  qctool::add_integer(app, "-n,--nranks", &o.nranks, 1, 1024, "virtual ranks (default 8)");
  qctool::add_integer(app, "--count", &o.count, size_t{1}, size_t{1} << 30,
                      "elements per rank (default 65536)");
  qctool::add_integer(app, "-T,--tmax", &o.tmax, 1, 1 << 20,
                      "largest T, a power of two (default 256)");
  app.add_option("-c,--codecs", codecs,
                 "comma separated: NAME[BITS][~], NAME one of minmax, qsgd,\n"
                 "onebit, topk, global_linear, global_exp, fp16, bf16, none, mxfp8,\n"
                 "mxfp8_e5m2, mxfp6, mxfp6_e3m2, mxfp4, mxint8, nvfp4;\n"
                 "'~' = stochastic rounding\n"
                 "(default minmax2,minmax4,onebit,topk,qsgd4~)")
      ->type_name("LIST");
  app.add_option("-a,--algos", algos, "ring, rd, sra, tree, native, auto (default ring,sra)")
      ->type_name("LIST");
  app.add_option("--ef", o.ef, "error feedback rows: on, off or both (default both)")
      ->type_name("on|off|both");
  qctool::add_integer(app, "--bucket", &o.bucket, 1, 1 << 30, "bucket size (default 128)");
  qctool::add_real(
      app, "--topk-ratio", &o.topk_ratio, [](double r) { return r > 0 && r <= 1; }, "0 < R <= 1",
      "fraction kept by topk (default 0.01)");
  qctool::add_integer(app, "--seed", &o.seed, uint64_t{0}, uint64_t{1} << 62,
                      "stochastic-rounding seed (default 1); call t is emulated as\n"
                      "call t of its layer, so the random bits change from call to\n"
                      "call as they do on a real communicator");
  app.add_flag("--fixed-seed", o.fixed_seed, "emulate every call as the layer's first (the same bits) instead");
  app.add_flag("--json", o.json, "write the results as one JSON document on stdout\n"
                                 "instead of the markdown tables");
  qctool::parse_or_exit(app, argc, argv);

  if ((o.tmax & (o.tmax - 1)) != 0) qctool::usage_error(app, "-T must be a power of two");
  if (o.ef != "on" && o.ef != "off" && o.ef != "both")
    qctool::usage_error(app, "bad value '" + o.ef + "' for --ef (on, off, both)");
  for (const std::string& s : qctool::split_list(codecs)) o.codecs.push_back(parse_codec(app, s));
  for (const std::string& s : qctool::split_list(algos)) {
    o.algos.push_back({s, qctool::enum_value(app, "algorithm", "-a", s, qc_algorithm_from_name,
                                             qc_algorithm_name, ", rd")});
  }
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
  // float32 rounding of partial sums and residuals: far below 1e-4.
  bool bookkeeping_ok(bool ef) const { return !ef || bookkeeping < 1e-4; }
  bool passed(bool ef) const { return replica_mismatch == 0 && bookkeeping_ok(ef); }
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
  policy.topk_ratio = static_cast<float>(o.topk_ratio);

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

// ---- output: markdown tables, or --json ---------------------------------------------

void print_preamble(const Options& o, double norm) {
  std::printf("# qc-fidelity %s: error of the mean output over the first T calls,\n"
              "# max_i |mean_t out_t,i - sum_r x_r,i| / max_i sum_r |x_r,i| (= %.4f)\n",
              qc_version_string(), norm);
  std::printf("# ranks %d, count %zu per rank, float32, sum, bucket %d, topk ratio %g, seed %s\n",
              o.nranks, o.count, o.bucket, o.topk_ratio,
              o.fixed_seed ? "call 0 every time" : "call t of the layer");
  std::printf("# bookkeeping: max over T and i of |sum_t out_t,i + sum_r e_r,i(T) - T sum_r "
              "x_r,i| / (T max_i sum_r |x_r,i|)\n\n");
}

void print_table_header(const Options& o, const AlgoSpec& a) {
  std::printf("## %s, n = %d\n\n| codec | EF |", a.name.c_str(), o.nranks);
  for (int t = 1; t <= o.tmax; t *= 2) std::printf(" T=%d |", t);
  std::printf(" bookkeeping |\n| --- | --- |");
  for (int t = 1; t <= o.tmax; t *= 2) std::printf(" ---: |");
  std::printf(" ---: |\n");
  std::fflush(stdout);
}

void print_table_row(const CodecSpec& c, bool ef, const Row& row) {
  std::printf("| %s | %s |", c.name.c_str(), ef ? "on" : "off");
  for (double e : row.error) std::printf(" %.3g |", e);
  if (ef) std::printf(" %.1e |", row.bookkeeping);
  else std::printf(" – |");
  std::printf("\n");
  if (row.replica_mismatch > 0)
    std::printf("# ^ ranks' outputs differ at %zu element-calls\n", row.replica_mismatch);
  if (!row.bookkeeping_ok(ef)) std::printf("# ^ bookkeeping identity violated\n");
  std::fflush(stdout);
}

bool uses_bits(qc_codec_t c) {
  return c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_GLOBAL_LINEAR ||
         c == QC_CODEC_GLOBAL_EXP;
}

// One row of --json; docs/fidelity.md lists the fields.
qctool::Json json_row(const AlgoSpec& a, const CodecSpec& c, bool ef, const Row& row) {
  qctool::Json j;
  j["algo"] = a.name;
  j["algorithm"] = qc_algorithm_name(a.algo);
  j["codec"] = c.name;
  j["codec_name"] = qc_codec_name(c.codec);
  j["bits"] = uses_bits(c.codec) ? qctool::Json(c.bits) : qctool::Json(nullptr);
  j["rounding"] = c.stochastic ? "stochastic" : "nearest";
  j["error_feedback"] = ef;
  j["error"] = row.error;
  j["bookkeeping"] = ef ? qctool::Json(row.bookkeeping) : qctool::Json(nullptr);
  j["replica_mismatch"] = row.replica_mismatch;
  j["passed"] = row.passed(ef);
  j["seconds"] = row.seconds;
  return j;
}

qctool::Json json_document(const Options& o, double norm, const qctool::Json& rows, bool passed) {
  qctool::Json doc;
  doc["tool"] = "qc-fidelity";
  doc["qc_version"] = qc_version_string();
  doc["command"] = o.command_line;
  doc["nranks"] = o.nranks;
  doc["count"] = o.count;
  doc["dtype"] = "float32";
  doc["redop"] = "sum";
  doc["bucket"] = o.bucket;
  doc["topk_ratio"] = o.topk_ratio;
  doc["seed"] = o.seed;
  doc["seed_per_call"] = o.fixed_seed ? "call 0" : "call t";
  doc["norm"] = norm;
  doc["T"] = qctool::Json::array();
  for (int t = 1; t <= o.tmax; t *= 2) doc["T"].push_back(t);
  doc["rows"] = rows;
  doc["passed"] = passed;
  return doc;
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

  std::vector<bool> efs;
  if (o.ef != "on") efs.push_back(false);
  if (o.ef != "off") efs.push_back(true);

  qctool::Json rows = qctool::Json::array();
  if (!o.json) print_preamble(o, norm);
  bool failed = false;
  for (const AlgoSpec& a : o.algos) {
    if (!o.json) print_table_header(o, a);
    for (const CodecSpec& c : o.codecs) {
      for (bool ef : efs) {
        const Row row = run_row(o, c, a, ef, x, exact, norm);
        failed = failed || !row.passed(ef);
        if (o.json) rows.push_back(json_row(a, c, ef, row));
        else print_table_row(c, ef, row);
        std::fprintf(stderr, "qc-fidelity: %s %s ef=%s: %.1f s\n", a.name.c_str(),
                     c.name.c_str(), ef ? "on" : "off", row.seconds);
      }
    }
    if (!o.json) std::printf("\n");
  }
  if (o.json) std::fputs(qctool::json_text(json_document(o, norm, rows, !failed)).c_str(), stdout);
  return failed ? 1 : 0;
}
