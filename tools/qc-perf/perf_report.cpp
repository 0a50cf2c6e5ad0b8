// qc-perf: names, the table, the footer and --json.
#include "perf.h"
#include "qc_tool_json.h"

#include <cmath>
#include <cstdio>

namespace qcperf {

// ---- names -------------------------------------------------------------------

// The library's names (qc_codec_name, ...), "?" for a value it does not know.
const char* algo_name(qc_algorithm_t a) {
  const char* n = qc_algorithm_name(a);
  return n != nullptr ? n : "?";
}

const char* codec_name(qc_codec_t c) {
  const char* n = qc_codec_name(c);
  return n != nullptr ? n : "?";
}

// Short label for the table: name, then bits and /bucket where the codec uses
// them, "+ef" with error feedback, "~" with stochastic rounding.
std::string codec_label(const qc_policy_t& p) {
  char buf[64];
  switch (p.codec) {
    case QC_CODEC_MINMAX:
    case QC_CODEC_QSGD:
      std::snprintf(buf, sizeof buf, "%s%d/%d", p.codec == QC_CODEC_MINMAX ? "minmax" : "qsgd",
                    p.bits, p.bucket_size);
      break;
    case QC_CODEC_GLOBAL_LINEAR: std::snprintf(buf, sizeof buf, "glin%d", p.bits); break;
    case QC_CODEC_GLOBAL_EXP: std::snprintf(buf, sizeof buf, "gexp%d", p.bits); break;
    case QC_CODEC_ONEBIT: std::snprintf(buf, sizeof buf, "onebit/%d", p.bucket_size); break;
    case QC_CODEC_TOPK: std::snprintf(buf, sizeof buf, "topk%g", double(p.topk_ratio)); break;
    default: std::snprintf(buf, sizeof buf, "%s", codec_name(p.codec)); break;
  }
  std::string s = buf;
  if (qctool::rounds_stochastically(p) && p.codec != QC_CODEC_NONE) s += "~";
  if (p.error_feedback) s += "+ef";
  return s;
}

const char* dtype_name(qc_dtype_t d) {
  const char* n = qc_dtype_name(d);
  return n != nullptr ? n : "?";
}

const char* redop_name(qc_reduce_op_t op) {
  const char* n = qc_reduce_op_name(op);
  return n != nullptr ? n : "?";
}

size_t dtype_size(qc_dtype_t d) { return d == QC_DTYPE_FLOAT32 ? 4 : 2; }

// ---- table -------------------------------------------------------------------

// Column widths; the first column's width includes the leading '#' of the
// header lines, so headers and rows line up.
static bool g_mpi = false, g_profile = false;  // set by print_preamble

static const char* kHead1 =
    "#     size(B)        count      type               algo          codec    time(us)  algbw(GB/s)"
    "  busbw(GB/s)       wire(B)    ratio w/ideal       error       bound   #wrong";

void print_preamble(const Options& opt) {
  const qc_policy_t& p = opt.policy;
  std::printf("# qc-perf: qc %s (built against header %d.%d.%d)\n", qc_version_string(),
              QC_VERSION_MAJOR, QC_VERSION_MINOR, QC_VERSION_PATCH);
  std::printf("# command: %s\n", opt.command_line.c_str());
  std::string ops;
  for (Op op : opt.ops) ops += std::string(ops.empty() ? "" : ",") + op_name(op);
  std::string algos;
  for (qc_algorithm_t a : opt.algos) algos += std::string(algos.empty() ? "" : ",") + algo_name(a);
  std::string codecs;
  for (size_t ci = 0; ci < opt.codecs.size(); ++ci) {
    const qc_policy_t q = codec_policy(opt, ci);
    codecs += std::string(codecs.empty() ? "" : ",") + codec_label(q);
  }
  g_mpi = opt.mpi;
  g_profile = opt.profile;
  std::printf("# nranks %d, transport %s, op %s, redop %s, codecs %s, dtype %s\n", opt.nranks,
              opt.mpi ? "mpi" : opt.emulate ? "emulate" : "local", ops.c_str(), redop_name(opt.redop), codecs.c_str(), dtype_name(opt.dtype));
  std::printf("# codec policy: bits %d, bucket %d, topk ratio %g, rounding %s, error feedback %s, seed %llu\n",
              p.bits, p.bucket_size, double(p.topk_ratio),
              qc_rounding_name(p.rounding),
              p.error_feedback ? "on" : "off", static_cast<unsigned long long>(p.seed));
  std::printf("# sizes %s .. %s, factor %llu; algos %s; warmup %d, iters %d, timeout %g s\n",
              human_bytes(opt.min_bytes).c_str(), human_bytes(opt.max_bytes).c_str(),
              static_cast<unsigned long long>(opt.factor), algos.c_str(), opt.warmup, opt.iters,
              opt.timeout);
  if (opt.mpi)
    std::printf("# mpi: one process per rank; row 'mpi MPI_...' = the op's plain MPI call "
                "(fp32, sum, same count, same iterations); speedup = its time / the row's time\n");
  if (opt.profile)
    std::printf("# profile: codec(us) / hidden(us) / xport(us) = qc_stats codec_seconds / "
                "codec_seconds_in_flight / transport_seconds per call, mean over ranks (hidden = "
                "codec time with transfers in flight; xport = sending and waiting for peers)\n");
  std::printf("# time: mean over iters of the slowest rank; algbw = size/time (1e9 B/s; "
              "allgather: nranks*size/time); wire = bytes sent per rank per call; ratio = "
              "what an uncompressed bandwidth-optimal run sends per rank / wire\n");
  std::printf("# w/ideal (allreduce) = wire / SRA's ideal (2(n-1) encoded chunks of count/n, no "
              "envelopes); sra rows fail above ideal + (n-1)*64 B\n");
  std::fflush(stdout);
}

namespace {

// The section header's definition of a row's size.
const char* size_text(Op op) {
  switch (op) {
    case Op::Allreduce: return "count * sizeof(type) per rank (the input)";
    case Op::Alltoall: return "count_per_peer * nranks * sizeof(type) per rank (the input)";
    case Op::ReduceScatter:
      return "recvcount * nranks * sizeof(type) per rank (the whole input; count = recvcount)";
    case Op::Allgather:
      return "sendcount * sizeof(type) per rank (the input block; the output is nranks blocks)";
    case Op::Broadcast: return "count * sizeof(type) (the message; root 0)";
    case Op::SparseAllreduce:
      return "nrows * row_len * sizeof(type) per rank (the dense table; nnz = round(density * "
             "nrows) rows per rank, the call's count)";
  }
  return "?";
}

const char* busbw_text(Op op) {
  switch (op) {
    case Op::Allreduce: return "busbw = algbw * 2(n-1)/n";
    case Op::SparseAllreduce: return "busbw = algbw * 2(n-1)/n (a dense allreduce's, on the table)";
    case Op::Allgather: return "algbw = nranks*size/time, busbw = algbw * (n-1)/n";
    case Op::Broadcast: return "busbw = algbw * 1";
    default: return "busbw = algbw * (n-1)/n";
  }
}

const char* exact_text(Op op) {
  switch (op) {
    case Op::Allreduce: return "S_i = sum_r |x_r,i|";
    case Op::ReduceScatter: return "S_i = sum_r |x_r,i| over the ranks' block r";
    case Op::Alltoall: return "S_i = |x_i|, the value sent";
    case Op::Allgather: return "S_i = |x_i|, the owner's value; replicas must be identical";
    case Op::Broadcast: return "S_i = |x_i|, the root's value; replicas must be identical";
    case Op::SparseAllreduce:
      return "S_i = sum of |x_i| over every rank's rows of its index; rows no rank has must be "
             "0; replicas must be identical";
  }
  return "?";
}

}  // namespace

void print_section_header(const Options& opt, Op op) {
  std::printf("#\n# op %s: size = %s, %s (nranks %d)\n", op_name(op), size_text(op),
              busbw_text(op), opt.nranks);
  if (op_scheduled(op))
    std::printf("# algo = the schedule the library runs for the -a value (-a values giving the "
                "same schedule run once)\n");
  if (op == Op::SparseAllreduce)
    std::printf("# row_len %zu, dtype %s; density = nnz / nrows per rank (column 3); algo = the "
                "policy's algorithm (sra: scatter-reduce-allgather by row owner, auto: the "
                "library's choice, others: allgather of rows)%s\n",
                opt.row_len, dtype_name(opt.dtype),
                opt.mpi ? "; the mpi row: MPI_Allreduce of the dense table holding the rank's rows"
                        : "");
  if (op == Op::SparseAllreduce)
    std::printf("# error = max |out - exact| / normaliser: per element max(S_i, floor) (none, fp16, "
                "bf16) or per table row max(S_row, floor), S_row = max_i S_i over the row (minmax, "
                "qsgd, onebit), %s; bound = the largest table row's (README: worst case per "
                "schedule)\n",
                exact_text(op));
  else
    std::printf("# error = max |out - exact| / normaliser: per element max(S_i, floor), or "
                "global max(Smax, floor), %s; bound per row (README: worst case per algorithm)\n",
                exact_text(op));
  for (size_t ci = 0; ci < opt.codecs.size(); ++ci) {
    const qc_policy_t q = codec_policy(opt, ci);
    std::printf("#   bound %s\n", bound_formula(op, opt.dtype, q).c_str());
  }
  std::string head = kHead1;
  if (op == Op::SparseAllreduce) {
    head.replace(head.find("        count"), 13, "          nnz");
    head.replace(head.find("      type"), 10, "   density");
  }
  std::printf("%s%s%s\n", head.c_str(), g_mpi ? "  speedup" : "",
              g_profile ? "   codec(us)  hidden(us)   xport(us)" : "");
  std::fflush(stdout);
}

void print_row(const Row& r) {
  char type[32];
  if (r.op == Op::SparseAllreduce) std::snprintf(type, sizeof type, "%g", r.density);
  else std::snprintf(type, sizeof type, "%s", r.type.c_str());
  std::printf("%13llu %12llu %9s %18s %14s", static_cast<unsigned long long>(r.size),
              static_cast<unsigned long long>(r.count), type, r.algo.c_str(), r.codec.c_str());
  if (r.na) {
    std::printf("  %s\n", r.failure.c_str());
  } else if (!r.ran) {
    std::printf("  FAILED: %s\n", r.failure.c_str());
  } else {
    char wi[16];
    if (std::isfinite(r.wire_ideal)) std::snprintf(wi, sizeof wi, "%7.3f", r.wire_ideal);
    else std::snprintf(wi, sizeof wi, "%7s", "-");
    // The baseline MPI row and an emulation (no statistics) have no wire bytes.
    if (r.baseline || std::isnan(r.wire))
      std::printf(" %11.2f %12.3f %12.3f %13s %8s %7s %11.3e %11.3e %8llu", r.time_us, r.algbw,
                  r.busbw, "-", "-", "-", r.error, r.bound,
                  static_cast<unsigned long long>(r.wrong));
    else
      std::printf(" %11.2f %12.3f %12.3f %13.0f %8.3f %s %11.3e %11.3e %8llu", r.time_us,
                  r.algbw, r.busbw, r.wire, r.ratio, wi, r.error, r.bound,
                  static_cast<unsigned long long>(r.wrong));
    if (g_mpi) std::printf(" %8.3f", r.speedup);
    if (g_profile) {
      if (r.baseline) std::printf(" %11s %11s %11s", "-", "-", "-");
      else std::printf(" %11.1f %11.1f %11.1f", r.codec_us, r.hidden_codec_us, r.transport_us);
    }
    std::printf("\n");
    if (!r.wire_ok)
      std::printf("#   ^ WIRE CHECK FAILED: %s\n", r.wire_note.c_str());
    if (r.replica_diff)
      std::printf("#   ^ ranks' outputs differ at %llu elements (replica consistency broken)\n",
                  static_cast<unsigned long long>(r.replica_diff));
  }
  std::fflush(stdout);
}

void print_footer(const std::vector<Row>& rows) {
  uint64_t oob = 0;
  std::vector<Op> ops;  // in the order they ran
  std::vector<double> bw;
  std::vector<int> nbw;
  double all_bw = 0;
  int all_n = 0;
  for (const Row& r : rows) {
    oob += r.wrong;
    if (!r.ran || r.na || r.baseline) continue;
    size_t k = 0;
    while (k < ops.size() && ops[k] != r.op) ++k;
    if (k == ops.size()) {
      ops.push_back(r.op);
      bw.push_back(0);
      nbw.push_back(0);
    }
    bw[k] += r.busbw;
    ++nbw[k];
    all_bw += r.busbw;
    ++all_n;
  }
  std::printf("#\n# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(oob),
              oob ? "FAILED" : "OK");
  if (ops.size() > 1) {
    for (size_t k = 0; k < ops.size(); ++k) {
      const std::string label = std::string("(") + op_name(ops[k]) + ")";
      std::printf("# Avg bus bandwidth %-16s : %g\n", label.c_str(), bw[k] / nbw[k]);
    }
  }
  std::printf("# Avg bus bandwidth    : %g\n#\n", all_n ? all_bw / all_n : 0.0);
  std::fflush(stdout);
}

// ---- json --------------------------------------------------------------------

// One row of -J. Its fields, their order and when they are null are what
// readers rely on (README.md "JSON", tools/plot_perf.py,
// tests/tools/check_tool_json.py).
static qctool::Json json_row(const Row& r, const Options& opt, const std::string& date) {
  const qc_policy_t& p = opt.policy;
  const bool ran = r.ran && !r.na;
  const double nan = std::numeric_limits<double>::quiet_NaN();  // written as null
  const auto if_ran = [&](double v) { return ran ? v : nan; };
  const auto if_measured = [&](double v) { return ran && !r.baseline ? v : nan; };
  qctool::Json j;
  j["op"] = op_name(r.op);
  j["size"] = r.size;
  j["count"] = r.count;
  j["type"] = r.type;
  j["algo"] = r.algo;
  j["codec"] = r.codec;
  j["time_us"] = if_ran(r.time_us);
  j["algbw"] = if_ran(r.algbw);
  j["busbw"] = if_ran(r.busbw);
  j["wire"] = if_ran(r.wire);
  j["ratio"] = if_ran(r.ratio);
  j["wire_ideal"] = if_ran(r.wire_ideal);
  j["wire_ok"] = r.wire_ok;
  j["na"] = r.na;
  j["error"] = if_ran(r.error);
  j["bound"] = r.bound;
  j["wrong"] = r.wrong;
  j["replica_mismatch"] = r.replica_diff;
  j["passed"] = r.passed();
  if (r.ran && r.wire_ok) j["failure"] = nullptr;
  else j["failure"] = r.ran ? r.wire_note : r.failure;
  j["mpi_time_us"] = r.mpi_time_us;
  j["speedup"] = if_ran(r.speedup);
  j["codec_us"] = if_measured(r.codec_us);
  j["hidden_codec_us"] = if_measured(r.hidden_codec_us);
  j["transport_us"] = if_measured(r.transport_us);
  j["baseline"] = r.baseline;
  j["nranks"] = opt.nranks;
  j["transport"] = opt.mpi ? "mpi" : opt.emulate ? "emulate" : "local";
  j["redop"] = redop_name(r.baseline ? QC_OP_SUM : opt.redop);
  j["dtype"] = dtype_name(opt.dtype);
  j["codec_name"] = r.codec_name;
  j["bits"] = r.bits ? r.bits : p.bits;
  // A sparse allreduce's bucket is its row.
  j["bucket"] = r.op == Op::SparseAllreduce ? r.row_len : uint64_t(p.bucket_size);
  j["rounding"] = qctool::rounds_stochastically(p) ? "stochastic" : "nearest";
  j["error_feedback"] = r.error_feedback;
  j["warmup"] = opt.warmup;
  j["iters"] = opt.iters;
  j["qc_version"] = qc_version_string();
  j["date"] = date;
  // sparse_allreduce only (null otherwise): the row's density, the table's
  // rows and the values per row.
  const bool sparse = r.op == Op::SparseAllreduce;
  if (sparse) {
    j["density"] = r.density;
    j["nrows"] = r.nrows;
    j["row_len"] = r.row_len;
  } else {
    j["density"] = nullptr;
    j["nrows"] = nullptr;
    j["row_len"] = nullptr;
  }
  return j;
}

bool write_json(const std::string& path, const Options& opt, const std::vector<Row>& rows) {
  const std::string date = qctool::iso_date_utc();
  qctool::Json doc = qctool::Json::array();
  for (const Row& r : rows) doc.push_back(json_row(r, opt, date));
  return qctool::write_json_file("qc-perf", path, doc);
}

}  // namespace qcperf
