// qc-perf: the command line (tools/common on CLI11) and the meaning of its
// values: codec and algorithm lists, ops, dtypes, the defaults that depend on
// other options.
#include "perf.h"
#include "qc_tool_cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace qcperf {
namespace {

// Default -e when more than one codec is swept (README: "Default sweep").
constexpr uint64_t kMultiCodecMaxBytes = 4ull << 20;

// Option values as given, for those whose meaning needs more than CLI11's
// types; apply_raw_values turns them into Options.
struct RawValues {
  std::string op, algos, codecs, rounding, dtype, redop, transport, min_compress, densities;
  double topk_ratio = 0;
  double timeout = 0;
  bool ef = false;
};

// Op list entries: a name (op_from_name's spellings) or "all" (every op;
// with --device every op but sparse_allreduce, which takes host memory only).
std::vector<Op> parse_ops(const CLI::App& app, const std::string& s, bool device) {
  std::vector<Op> out;
  auto add = [&](Op op) {
    if (std::find(out.begin(), out.end(), op) == out.end()) out.push_back(op);
  };
  for (const std::string& raw : qctool::split_list(s)) {
    const std::string t = qctool::normalize_name(raw);
    Op op = Op::Allreduce;
    if (t == "all") {
      for (Op o : {Op::Allreduce, Op::Alltoall, Op::ReduceScatter, Op::Allgather, Op::Broadcast})
        add(o);
      if (!device) add(Op::SparseAllreduce);
    } else if (op_from_name(t, &op)) {
      add(op);
    } else {
      qctool::usage_error(app, "unknown op '" + raw + "' for -o (allreduce, alltoall, "
                               "reduce_scatter, allgather, broadcast, sparse_allreduce, all)");
    }
  }
  return out;
}

// --density: fractions in (0, 1], in the order given, each once.
std::vector<double> parse_densities(const CLI::App& app, const std::string& s) {
  std::vector<double> out;
  for (const std::string& raw : qctool::split_list(s)) {
    double d = 0;
    if (!qctool::parse_real(raw, &d) || !(d > 0 && d <= 1))
      qctool::usage_error(app, "bad value '" + raw + "' for --density (0 < D <= 1)");
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  if (out.empty()) qctool::usage_error(app, "--density needs at least one value");
  return out;
}

std::vector<qc_algorithm_t> parse_algos(const CLI::App& app, const std::string& s) {
  std::vector<qc_algorithm_t> out;
  auto add = [&](qc_algorithm_t a) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  };
  for (const std::string& raw : qctool::split_list(s)) {
    const std::string t = qctool::normalize_name(raw);
    if (t == "all") {
      for (qc_algorithm_t a : {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA,
                               QC_ALGO_TREE, QC_ALGO_NATIVE, QC_ALGO_AUTO})
        add(a);
    } else {
      add(qctool::enum_value(app, "algorithm", "-a", raw, qc_algorithm_from_name,
                             qc_algorithm_name, ", rd, all"));
    }
  }
  return out;
}

// Codec list entries: NAME, NAME:BITS (bits for that entry only), and a
// "+ef" suffix (error feedback for that entry only), e.g. minmax:8,onebit+ef.
void parse_codecs(const CLI::App& app, const std::string& s, Options* opt) {
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
  for (const std::string& raw : qctool::split_list(s)) {
    if (qctool::normalize_name(raw) == "all") {
      for (qc_codec_t c : {QC_CODEC_NONE, QC_CODEC_FP16, QC_CODEC_BF16, QC_CODEC_MINMAX,
                           QC_CODEC_QSGD, QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP,
                           QC_CODEC_ONEBIT, QC_CODEC_TOPK, QC_CODEC_MXFP8,
                           QC_CODEC_MXFP8_E5M2, QC_CODEC_MXFP6, QC_CODEC_MXFP6_E3M2,
                           QC_CODEC_MXFP4, QC_CODEC_MXINT8, QC_CODEC_NVFP4})
        add(c, 0, -1);
      continue;
    }
    std::string name = raw;
    int ef = -1, bits = 0;
    if (name.size() > 3 && qctool::normalize_name(name.substr(name.size() - 3)) == "+ef") {
      ef = 1;
      name = name.substr(0, name.size() - 3);
    }
    const size_t colon = name.find(':');
    if (colon != std::string::npos) {
      const std::string text = name.substr(colon + 1);
      if (!qctool::parse_integer(text, 1, 8, &bits))
        qctool::usage_error(app, qctool::bad_integer_message("-c " + raw, text, "1", "8"));
      name = name.substr(0, colon);
    }
    add(qctool::enum_value(app, "codec", "-c", name, qc_codec_from_name, qc_codec_name), bits, ef);
  }
}

// The options whose presence (count() > 0) matters after parsing.
struct Parsed {
  CLI::Option* nranks;
  CLI::Option* maxbytes;
  CLI::Option* algo;
  CLI::Option* codec;
  CLI::Option* topk_ratio;
  CLI::Option* timeout;
};

// Every option, with its text of `qc-perf --help`.
Parsed add_options(CLI::App& app, Options* opt, RawValues* raw) {
  using qctool::with_both_spellings;
  Parsed p;
  p.nranks = qctool::add_integer(app, "-n,--nranks", &opt->nranks, 1, 1024,
                                 "ranks (threads) of the local group (default 4)");
  qctool::add_size(app, "-b,--minbytes", &opt->min_bytes,
                   "smallest size per rank (default 8); K/M/G = 1024^1..3");
  p.maxbytes = qctool::add_size(app, "-e,--maxbytes", &opt->max_bytes,
                                "largest size per rank (default 16M for one codec,\n"
                                "4M when several codecs are swept)");
  qctool::add_integer(app, "-f,--stepfactor", &opt->factor, uint64_t{2}, uint64_t{1} << 30,
                      "multiply the size by F each step, F >= 2 (default 2)")
      ->type_name("F");
  app.add_option("-o,--op", raw->op,
                 "collectives, comma separated: allreduce, alltoall,\n"
                 "reduce_scatter, allgather, broadcast (root 0),\n"
                 "sparse_allreduce (sparse), all (default allreduce)")
      ->type_name("LIST");
  app.add_option("--density", raw->densities,
                 "sparse_allreduce: rows each rank passes, as a fraction\n"
                 "of the table's rows, 0 < D <= 1; a list gives a row\n"
                 "per density (default 0.01). The size is the dense\n"
                 "table per rank (nrows x row_len values); each rank\n"
                 "draws round(D x nrows) row indices (repeats allowed,\n"
                 "unsorted) and qc_sparse_allreduce_dense sums them into\n"
                 "the table; busbw = algbw * 2(n-1)/n on the table's\n"
                 "bytes, as a dense allreduce of the same table")
      ->type_name("LIST");
  qctool::add_integer(app, with_both_spellings("--row-len"), &opt->row_len, size_t{1},
                      size_t{1} << 24, "sparse_allreduce: values per row (default 64)")
      ->type_name("L");
  p.algo = app.add_option("-a,--algo", raw->algos,
                          "algorithms, comma separated: auto, ring,\n"
                          "rd (recursive_doubling), sra, tree, native, all\n"
                          "(default all = ring,rd,sra,tree,native,auto; without\n"
                          "-a, native only if a global codec is swept).\n"
                          "allreduce: native with a non-global codec is n/a;\n"
                          "reduce_scatter: ring, else direct; allgather: ring,\n"
                          "rd (2^k ranks), else direct; broadcast: tree, auto\n"
                          "(tree < 64K, else chain), else chain; values giving\n"
                          "the same schedule run once; alltoall has none;\n"
                          "sparse_allreduce: sra = scatter-reduce-allgather by\n"
                          "row owner, auto = the library's choice, others its\n"
                          "allgather of rows (the column: the -a value)")
               ->type_name("LIST");
  p.codec = app.add_option("-c,--codec", raw->codecs,
                           "codecs, comma separated: none, fp16, bf16, minmax, qsgd,\n"
                           "global_linear, global_exp, onebit, topk, mxfp8, mxfp8_e5m2,\n"
                           "mxfp6, mxfp6_e3m2, mxfp4, mxint8, nvfp4, all\n"
                           "(default all). NAME:BITS sets that entry's bits\n"
                           "(minmax:8), NAME+ef its error feedback (onebit+ef)")
                ->type_name("LIST");
  qctool::add_integer(app, "--bits", &opt->policy.bits, 1, 8,
                      "code width 1..8 (default: the library's, 4)");
  qctool::add_integer(app, "--bucket", &opt->policy.bucket_size, 1, 1 << 30,
                      "elements per bucket (default: the library's, 128)");
  p.topk_ratio = qctool::add_real(
      app, with_both_spellings("--topk-ratio"), &raw->topk_ratio,
      [](double r) { return r > 0 && r <= 1; }, "0 < R <= 1", "fraction kept by topk, (0, 1]")
      ->type_name("R");
  app.add_option("--rounding", raw->rounding,
                 "auto | nearest | stochastic (default auto: stochastic for the global\n"
                 "codecs, nearest for the rest)")
      ->type_name("MODE");
  qctool::add_integer(app, "--seed", &opt->policy.seed, uint64_t{0},
                      std::numeric_limits<uint64_t>::max(),
                      "stochastic rounding seed (default 0)");
  app.add_flag("--ef", raw->ef,
               "error feedback on (allreduce, reduce_scatter, allgather:\n"
               "an error buffer per rank)");
  app.add_option(with_both_spellings("--min-compress"), raw->min_compress,
                 "policy min_compress_bytes: smaller messages go\n"
                 "uncompressed (default 0 here, so every row measures\n"
                 "its codec; 'lib' = the library's default)")
      ->type_name("SIZE");
  qctool::add_integer(app, with_both_spellings("--scale-period"),
                      &opt->policy.scale_update_period, 1, 1 << 30,
                      "policy scale_update_period: scales computed every\n"
                      "K-th call and reused in between (default 1)")
      ->type_name("K");
  app.add_option("-d,--dtype", raw->dtype, "float | half | bfloat16 (default float)")
      ->type_name("TYPE");
  app.add_option("-r,--redop", raw->redop, "sum | avg (default sum)")->type_name("OP");
  qctool::add_integer(app, with_both_spellings("-w,--warmup_iters"), &opt->warmup, 0, 1000000,
                      "untimed iterations per row (default 2)");
  qctool::add_integer(app, "-i,--iters", &opt->iters, 1, 1000000,
                      "timed iterations per row (default 5)");
  p.timeout = qctool::add_real(
      app, "-t,--timeout", &raw->timeout, [](double t) { return t > 0; }, "seconds > 0",
      "how long a call may wait for peers (default 60)")
      ->type_name("SECONDS");
  app.add_option("-J,--json", opt->json_path, "also write the rows as JSON to FILE")
      ->type_name("FILE");
  app.add_option("--transport", raw->transport,
                 "local (threads, default) | mpi (one process per rank\n"
                 "under mpirun; -n must be omitted or equal the MPI\n"
                 "size; adds a row per op and size timing the plain\n"
                 "MPI call, MPI_Allreduce, MPI_Reduce_scatter_block, ...,\n"
                 "and a speedup column) | emulate (every call one\n"
                 "qc_emulate_* over all -n ranks in this process, as a\n"
                 "training script emulating N nodes runs it; no wire\n"
                 "statistics)")
      ->type_name("T");
  app.add_flag("--profile", opt->profile,
               "add columns codec(us) / hidden(us) / xport(us): qc_stats\n"
               "codec_seconds / codec_seconds_in_flight (codec\n"
               "time that overlapped transfers) / transport_seconds\n"
               "per call");
  app.add_flag("--device", opt->device,
               "CUDA device buffers and a stream per rank (local\n"
               "transport; copies before and after a row are not\n"
               "timed); QC_DEVICE_CODEC=0 times whole-buffer staging");
  return p;
}

void apply_raw_values(const CLI::App& app, const Parsed& p, const RawValues& raw,
                        Options* opt) {
  if (!raw.op.empty()) opt->ops = parse_ops(app, raw.op, opt->device);
  if (p.algo->count() > 0) opt->algos = parse_algos(app, raw.algos);
  if (!raw.densities.empty()) opt->densities = parse_densities(app, raw.densities);
  if (p.codec->count() > 0) parse_codecs(app, raw.codecs, opt);
  if (p.topk_ratio->count() > 0) opt->policy.topk_ratio = static_cast<float>(raw.topk_ratio);
  if (p.timeout->count() > 0) opt->timeout = raw.timeout;
  if (raw.ef) opt->policy.error_feedback = 1;
  if (!raw.rounding.empty()) {
    opt->policy.rounding = qctool::enum_value(app, "rounding", "--rounding", raw.rounding,
                                              qc_rounding_from_name, qc_rounding_name);
  }
  if (!raw.dtype.empty()) {
    opt->dtype = qctool::enum_value(app, "dtype", "-d", raw.dtype, qc_dtype_from_name,
                                    qc_dtype_name, "; float, half, bf16");
  }
  if (!raw.redop.empty()) {
    const std::string t = qctool::normalize_name(raw.redop);
    if (t == "sum") opt->redop = QC_OP_SUM;
    else if (t == "avg") opt->redop = QC_OP_AVG;
    else qctool::usage_error(app, "unknown reduction '" + raw.redop + "' for -r (sum, avg)");
  }
  if (!raw.min_compress.empty()) {
    std::string why;
    uint64_t bytes = 0;
    if (qctool::normalize_name(raw.min_compress) == "lib") {
      const qc_policy_t lib = QC_POLICY_INIT;
      opt->policy.min_compress_bytes = lib.min_compress_bytes;
    } else if (qctool::parse_size(raw.min_compress, &bytes, &why)) {
      opt->policy.min_compress_bytes = bytes;
    } else {
      qctool::usage_error(app, qctool::bad_size_message("--min-compress", raw.min_compress, why));
    }
  }
  if (!raw.transport.empty()) {
    const std::string t = qctool::normalize_name(raw.transport);
    if (t == "local") {
      opt->mpi = false;
    } else if (t == "emulate") {
      if (opt->device)
        qctool::usage_error(app, "--transport emulate takes host buffers: leave out --device");
      if (opt->profile)
        qctool::usage_error(app, "--transport emulate keeps no statistics: leave out --profile");
      opt->emulate = true;
    } else if (t == "mpi") {
      if (!mpi_available())
        qctool::usage_error(app, "--transport mpi: this qc-perf was built without MPI "
                                 "(QC_HAVE_MPI is off: configure with an MPI library "
                                 "installed, or -DQC_WITH_MPI=ON)");
      opt->mpi = true;
    } else {
      qctool::usage_error(app, "unknown transport '" + raw.transport +
                                   "' for --transport (local, mpi, emulate)");
    }
  }
}

}  // namespace

Options parse_args(int argc, char** argv) {
  Options opt;
  opt.policy = QC_POLICY_INIT;
  if (qc_policy_init(&opt.policy) != QC_SUCCESS) {
    std::fprintf(stderr, "qc-perf: error: qc_policy_init failed: %s\n", qc_last_error());
    std::exit(2);
  }
  // A benchmark of codecs compresses every size unless told otherwise.
  opt.policy.min_compress_bytes = 0;
  opt.command_line = qctool::command_line(argc, argv);

  CLI::App app{"Sweeps message sizes of qc collectives on the local transport (ranks are\n"
               "threads) or MPI, prints an nccl-tests-like table and checks every result.\n"
               "A size is a rank's input in bytes: its send buffer (reduce_scatter and\n"
               "alltoall: all nranks blocks; broadcast: the message), for allgather its block,\n"
               "for sparse_allreduce its dense table (nrows x row_len values).",
               "qc-perf"};
  qctool::init_app(app,
                   "Exit status: 0 all rows passed (n/a rows do not count), 1 some row failed,\n"
                   "2 bad usage or a codec / algorithm this qc library does not support,\n"
                   "77 --device without a CUDA device.");
  RawValues raw;
  const Parsed parsed = add_options(app, &opt, &raw);
  qctool::parse_or_exit(app, argc, argv);
  apply_raw_values(app, parsed, raw, &opt);
  opt.nranks_given = parsed.nranks->count() > 0;
  opt.max_bytes_given = parsed.maxbytes->count() > 0;
  if (app.count("--json") > 0 && opt.json_path.empty())
    qctool::usage_error(app, "--json needs a file name");

  if (opt.device) {
    if (opt.mpi) qctool::usage_error(app, "--device works with the local transport only");
    if (std::find(opt.ops.begin(), opt.ops.end(), Op::SparseAllreduce) != opt.ops.end())
      qctool::usage_error(app, "--device: sparse_allreduce takes host memory only");
    const DeviceSupport support = device_support();
    if (support == DeviceSupport::kNotBuilt) {
      qctool::usage_error(app, "--device: this qc-perf was built without CUDA (configure where "
                               "nvcc is found, or with -DQC_WITH_CUDA=ON)");
    }
    if (support == DeviceSupport::kNoDevice) {
      std::fprintf(stderr, "qc-perf: no CUDA device: --device needs one (skipped)\n");
      std::exit(77);
    }
  }
  if (opt.codecs.empty()) parse_codecs(app, "all", &opt);
  opt.policy.codec = opt.codecs.front();
  // Several codecs multiply the rows: the default sweep stops earlier.
  if (opt.codecs.size() > 1 && !opt.max_bytes_given) opt.max_bytes = kMultiCodecMaxBytes;
  if (opt.min_bytes == 0) qctool::usage_error(app, "-b must be at least 1 byte");
  if (opt.max_bytes < opt.min_bytes) qctool::usage_error(app, "-e must not be smaller than -b");
  if (opt.algos.empty()) {
    opt.algos = parse_algos(app, "all");
    // Without -a, native only where it exists: some swept codec is global.
    bool any_global = false;
    for (qc_codec_t c : opt.codecs)
      any_global = any_global || c == QC_CODEC_GLOBAL_LINEAR || c == QC_CODEC_GLOBAL_EXP;
    if (!any_global)
      opt.algos.erase(std::find(opt.algos.begin(), opt.algos.end(), QC_ALGO_NATIVE));
  }
  return opt;
}

}  // namespace qcperf
