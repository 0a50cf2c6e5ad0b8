// qc-perf: benchmark and correctness sweep of qc collectives, in the spirit of
// nccl-tests. The sweep plan and the main loop (the command line: perf_cli.cpp).
#include "perf.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace qcperf {
namespace {

// ---- the sweep plan ------------------------------------------------------------

struct SizeStep {
  uint64_t bytes;  // input bytes per rank (sparse_allreduce: its dense table)
  size_t count;    // the call's count (see Op in perf.h); sparse_allreduce: the table's rows
};

// Sizes min, min*f, ... <= max, rounded down to a whole number of counts
// (alltoall, reduce_scatter: of nranks blocks; sparse_allreduce: of rows);
// sizes that round to 0 or repeat are skipped.
std::vector<SizeStep> plan_sizes(const Options& opt, Op op) {
  const uint64_t unit = dtype_size(opt.dtype) * (op == Op::SparseAllreduce
                                                     ? opt.row_len
                                                     : size_elems_per_count(op, opt.nranks));
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

// One row of a size: codec number ci with an algorithm, and the algo
// column's text.
struct RowPlan {
  size_t ci;
  qc_algorithm_t algo;
  std::string label;
};

// The rows of one (op, size), in sweep order (codec, then algorithm).
// allreduce, sparse_allreduce: every -a value; alltoall: one row per codec; reduce_scatter,
// allgather, broadcast: one row per distinct schedule the -a values give
// (the library maps several values to one schedule, and runs the same
// thing for each), labelled with the schedule.
std::vector<RowPlan> plan_rows(const Options& opt, Op op, size_t count) {
  const size_t message_bytes = count * dtype_size(opt.dtype);
  std::vector<RowPlan> out;
  for (size_t ci = 0; ci < opt.codecs.size(); ++ci) {
    if (op == Op::Alltoall) {
      out.push_back({ci, QC_ALGO_AUTO, "-"});
      continue;
    }
    const size_t first = out.size();
    for (qc_algorithm_t algo : opt.algos) {
      if (op == Op::Allreduce || op == Op::SparseAllreduce) {
        out.push_back({ci, algo, algo_name(algo)});
        continue;
      }
      qc_policy_t p = codec_policy(opt, ci);
      p.algorithm = algo;
      const std::string label = schedule_name(
          op, sent_policy(p, message_bytes).algorithm, opt.nranks, message_bytes);
      bool seen = false;
      for (size_t k = first; k < out.size(); ++k) seen = seen || out[k].label == label;
      if (!seen) out.push_back({ci, algo, label});
    }
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

// The inputs of a size (sparse_allreduce: of a size and a density), the
// rows' buffers and what their checks need.
struct Inputs {
  Op op = Op::Allreduce;
  SizeStep step{0, 0};
  size_t count = 0;  // the call's count (sparse_allreduce: nnz per rank)
  double density = std::numeric_limits<double>::quiet_NaN();
  Buffers buf;
  bool allocated = false;
  size_t send_bytes = 0, recv_bytes = 0;
  InputStats stats;         // the dense ops
  SparseReference sparse;   // sparse_allreduce
};

void prepare_inputs(WorkerPool& pool, const Options& opt, Inputs* in) {
  const size_t ds = dtype_size(opt.dtype);
  const int n = opt.nranks;
  const bool sparse = in->op == Op::SparseAllreduce;
  if (sparse) {
    in->count = sparse_nnz(in->density, in->step.count);
    in->send_bytes = in->count * opt.row_len * ds;
    in->recv_bytes = size_t(in->step.bytes);
  } else {
    in->count = in->step.count;
    in->send_bytes = send_elems(in->op, n, in->count) * ds;
    in->recv_bytes = recv_elems(in->op, n, in->count) * ds;
  }
  in->allocated = mpi_all(
      opt.mpi ? in->buf.allocate_shared_recv(n, in->send_bytes, in->recv_bytes, opt.mpi_rank)
              : in->buf.allocate(n, in->send_bytes, in->recv_bytes));
  if (!in->allocated) return;
  if (sparse) {
    fill_sparse_inputs(pool, opt, in->buf, in->count, in->step.count);
    sparse_reference(opt, in->buf, in->count, in->step.count, &in->sparse);
  } else {
    fill_inputs(pool, opt, in->op, in->buf, send_elems(in->op, n, in->count));
    in->stats = input_stats(pool, opt, in->op, in->buf, in->count);
  }
}

// Fills the row's row-label fields of a sparse_allreduce row.
void describe_sparse(const Options& opt, const Inputs& in, Row* row) {
  if (in.op != Op::SparseAllreduce) return;
  row->density = in.density;
  row->nrows = in.step.count;
  row->row_len = opt.row_len;
}

// Test hook (README "Testing the checks"): QC_PERF_CORRUPT=I adds 1 to
// element I of every output this process holds, after the timed calls and
// before the check, so a test can see the check catch a wrong result.
void corrupt_outputs(const Options& opt, Buffers& buf) {
  const char* text = std::getenv("QC_PERF_CORRUPT");
  if (text == nullptr || *text == '\0') return;
  const size_t i = static_cast<size_t>(std::strtoull(text, nullptr, 10));
  const size_t ds = dtype_size(opt.dtype);
  for (RankBuffers& b : buf.rank) {
    if (i >= b.recv_bytes / ds) continue;
    const float v = float(load_elem(b.recv, opt.dtype, i)) + 1.0f;
    if (opt.dtype == QC_DTYPE_FLOAT32) static_cast<float*>(b.recv)[i] = v;
    else if (opt.dtype == QC_DTYPE_FLOAT16) static_cast<uint16_t*>(b.recv)[i] = float_to_half(v);
    else static_cast<uint16_t*>(b.recv)[i] = float_to_bf16(v);
    if (opt.mpi) break;  // every entry is this process's one table
  }
}

// The companion row of a size under --transport mpi: the op's plain MPI
// call (fp32, sum) on the same inputs, its result checked as codec none
// would be (float32 only).
Row baseline_row(WorkerPool& pool, const Options& opt, Inputs& in) {
  const Op op = in.op;
  Buffers& buf = in.buf;
  const double mpi_us = mpi_baseline_time_us(opt, op, buf, in.count);
  Row row;
  row.op = op;
  row.baseline = true;
  row.size = in.step.bytes;
  row.count = in.count;
  describe_sparse(opt, in, &row);
  row.type = "float";
  row.algo = "mpi";
  row.codec = mpi_baseline_name(op);
  row.codec_name = "mpi";
  row.time_us = mpi_us;
  // Its own bytes: fp32, whatever -d says.
  const double size = double(in.step.bytes) / double(dtype_size(opt.dtype)) * 4;
  row.algbw = mpi_us > 0 ? algbw_bytes(op, opt.nranks, size) / (mpi_us * 1e-6) / 1e9 : 0;
  row.busbw = row.algbw * busbw_factor(op, opt.nranks);
  row.mpi_time_us = mpi_us;
  row.speedup = 1.0;
  row.wire = std::numeric_limits<double>::quiet_NaN();
  row.ratio = std::numeric_limits<double>::quiet_NaN();
  if (opt.dtype != QC_DTYPE_FLOAT32) {
    row.error = row.bound = std::numeric_limits<double>::quiet_NaN();
    return row;
  }
  // Checked as codec none on a ring (any summation order; sparse: added
  // without encodes, the bound of any order).
  qc_policy_t none = opt.policy;
  none.codec = QC_CODEC_NONE;
  none.algorithm = QC_ALGO_RING;
  none.error_feedback = 0;
  Options sum_opt = opt;
  sum_opt.redop = QC_OP_SUM;
  CheckResult cr;
  if (op == Op::SparseAllreduce) {
    cr = check_sparse(pool, sum_opt, none, in.sparse, buf, &row.bound);
  } else {
    const ErrorModel model = error_model(op, opt.nranks, opt.dtype, QC_OP_SUM, none, in.stats);
    cr = check_result(pool, sum_opt, model, op, buf, in.count, in.stats);
    row.bound = model.bound;
  }
  row.error = cr.max_err;
  // Bit-identical replicas are qc's promise, not MPI's: not counted.
  row.wrong = cr.wrong - cr.replica_diff;
  return row;
}

// The allreduce wire check: wire over SRA's ideal (2(n-1) encoded chunks
// per rank, no envelopes); SRA itself must be within ideal .. ideal +
// allowance on every rank.
void check_allreduce_wire(const Options& opt, const qc_policy_t& sent, qc_algorithm_t algo,
                          const RunResult& rr, size_t count, Row* row) {
  double ideal = 0;
  for (int r = 0; r < opt.nranks; ++r)
    ideal += double(sra_ideal_bytes(sent, opt.dtype, opt.nranks, r, count));
  ideal /= opt.nranks;
  row->wire_ideal = ideal > 0 ? rr.wire_bytes / ideal : std::numeric_limits<double>::quiet_NaN();
  if (algo != QC_ALGO_SRA) return;
  // Pipelined, every piece is a message of its own.
  const double allow =
      double(sra_allowance_bytes(opt.nranks, sra_pieces(sent, opt.nranks, count)));
  for (int r = 0; r < opt.nranks && row->wire_ok; ++r) {
    const double id = double(sra_expected_bytes(sent, opt.dtype, opt.nranks, r, count));
    const double w = rr.wire_per_rank[r];
    if (w < id || w > id + allow) {
      row->wire_ok = false;
      char note[200];
      std::snprintf(note, sizeof note,
                    "rank %d sent %.0f B per call; SRA ideal %.0f B, allowance %.0f B", r, w,
                    id, allow);
      row->wire_note = note;
    }
  }
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
  const size_t ds = dtype_size(opt.dtype);

  // sparse_allreduce: each size once per density; the other ops once.
  auto densities = [&](Op op) {
    return op == Op::SparseAllreduce ? opt.densities
                                     : std::vector<double>{std::numeric_limits<double>::quiet_NaN()};
  };
  size_t total_rows = 0;
  for (Op op : opt.ops)
    for (const SizeStep& step : plan_sizes(opt, op))
      total_rows += plan_rows(opt, op, step.count).size() * densities(op).size();

  std::vector<Row> rows;
  size_t row_no = 0;
  for (Op op : opt.ops) {
    print_section_header(opt, op);
    for (const SizeStep& step : plan_sizes(opt, op)) for (double density : densities(op)) {
      Inputs in;  // one size at a time: freed at the end of this iteration
      in.op = op;
      in.step = step;
      in.density = density;
      std::string what_inputs = std::string(op_name(op)) + " " + human_bytes(step.bytes);
      if (op == Op::SparseAllreduce) {
        char d[32];
        std::snprintf(d, sizeof d, " density %g", density);
        what_inputs += d;
      }
      progress.begin(what_inputs + ": preparing inputs");
      prepare_inputs(pool, opt, &in);
      Buffers& buf = in.buf;
      const bool allocated = in.allocated;
      const size_t count = in.count;
      const InputStats& stats = in.stats;
      progress.end();

      // MPI: the op's plain MPI call on the same buffer, as a companion row
      // (algo "mpi"); every qc row of this size gets speedup = its time /
      // this time.
      double mpi_us = std::numeric_limits<double>::quiet_NaN();
      if (opt.mpi && allocated) {
        progress.begin(what_inputs + ": " + mpi_baseline_name(op));
        const Row row = baseline_row(pool, opt, in);
        mpi_us = row.time_us;
        progress.end();
        print_row(row);
        rows.push_back(row);
      }

      for (const RowPlan& plan : plan_rows(opt, op, step.count)) {
        const qc_codec_t codec = opt.codecs[plan.ci];
        const qc_algorithm_t algo = plan.algo;
        ++row_no;
        Row row;
        row.op = op;
        row.size = step.bytes;
        row.count = count;
        describe_sparse(opt, in, &row);
        row.type = dtype_name(opt.dtype);
        row.algo = plan.label;
        qc_policy_t policy = codec_policy(opt, plan.ci);
        policy.algorithm = algo;
        // A sparse allreduce's bucket is the row (one scale per row).
        qc_policy_t shown = policy;
        if (op == Op::SparseAllreduce) shown.bucket_size = int(std::min<size_t>(opt.row_len, INT32_MAX));
        row.codec = codec_label(shown);
        row.bits = policy.bits;
        row.error_feedback = policy.error_feedback != 0;
        row.codec_name = codec_name(codec);
        if (!allocated) {
          row.ran = false;
          row.failure = "out of memory (" + std::to_string(opt.nranks) + " x " +
                        human_bytes(in.send_bytes) + " + " + human_bytes(in.recv_bytes) + ")";
          print_row(row);
          rows.push_back(row);
          continue;
        }
        // What the library will send: below min_compress_bytes, codec none
        // (sparse_allreduce: judged on all ranks' rows together).
        const bool sparse = op == Op::SparseAllreduce;
        const qc_policy_t sent = sent_policy(
            policy, sparse ? size_t(in.sparse.distinct_rows) * opt.row_len * ds : count * ds);
        const bool native_ok =
            is_global_codec(sent.codec) || (sent.codec == QC_CODEC_NONE && opt.mpi);
        // allreduce's native exists only for the global codecs (and none over MPI).
        const bool native_na =
            op == Op::Allreduce && sent.algorithm == QC_ALGO_NATIVE && !native_ok;
        // sparse_allreduce: the bound is per row (check_sparse gives the largest).
        const ErrorModel model = sparse ? ErrorModel{}
                                        : error_model(op, opt.nranks, opt.dtype, opt.redop, sent, stats);
        row.bound = model.bound;
        if (!mpi_all(group.intact()) && !mpi_all(group.create(&err) == QC_SUCCESS)) {
          std::fprintf(stderr, "qc-perf: error: cannot recreate the local group: %s\n",
                       err.c_str());
          return 2;
        }
        char what[200];
        std::snprintf(what, sizeof what, "[%zu/%zu] %s %s %s", row_no, total_rows,
                      what_inputs.c_str(), row.algo.c_str(), row.codec.c_str());
        progress.begin(what);
        const RunResult rr = run_collective(pool, group, opt, policy, op, buf, count);
        if (rr.ok) {
          corrupt_outputs(opt, buf);
          const CheckResult cr =
              sparse ? check_sparse(pool, opt, sent, in.sparse, buf, &row.bound)
                     : check_result(pool, opt, model, op, buf, count, stats);
          const double t = rr.time_us * 1e-6;
          row.time_us = rr.time_us;
          row.algbw = t > 0 ? algbw_bytes(op, opt.nranks, double(step.bytes)) / t / 1e9 : 0;
          row.busbw = row.algbw * busbw_factor(op, opt.nranks);
          row.wire = rr.wire_bytes;
          row.codec_us = rr.codec_us;
          row.transport_us = rr.transport_us;
          row.hidden_codec_us = rr.hidden_codec_us;
          row.mpi_time_us = mpi_us;
          row.speedup = rr.time_us > 0 ? mpi_us / rr.time_us
                                       : std::numeric_limits<double>::quiet_NaN();
          // Compression ratio: what an uncompressed, bandwidth-optimal run
          // sends per rank over what was sent, so codec none gives about 1
          // whatever the algorithm. One rank sends nothing: the ratio is
          // infinite ("inf"; null in JSON).
          row.ratio = std::isnan(rr.wire_bytes) ? rr.wire_bytes  // emulated: not measured
                      : rr.wire_bytes > 0
                          ? optimal_wire_bytes(op, opt.nranks, double(step.bytes)) / rr.wire_bytes
                          : std::numeric_limits<double>::infinity();
          row.error = cr.max_err;
          row.wrong = cr.wrong;
          row.replica_diff = cr.replica_diff;
          if (op == Op::Allreduce && !opt.emulate)
            check_allreduce_wire(opt, sent, algo, rr, count, &row);
        }
        progress.end();
        if (!rr.ok) {
          const std::string msg = std::string(qc_status_string(rr.status)) + ": " + rr.message;
          if (native_na && rr.status == QC_ERROR_UNSUPPORTED && !rr.policy_failed) {
            // native needs a global codec (or none on MPI): the pair does not exist.
            row.na = true;
            row.failure = opt.mpi ? "n/a (native needs none, global_linear or global_exp)"
                                  : "n/a (native needs global_linear or global_exp)";
          } else if (sparse && !sparse_row_codec(sent.codec) &&
                     rr.status == QC_ERROR_UNSUPPORTED && !rr.policy_failed) {
            row.na = true;
            row.failure = "n/a (sparse rows: none, fp16, bf16, minmax, qsgd, onebit)";
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
            row.failure = rr.failed_rank < 0
                              ? msg  // an emulation's message names its virtual rank
                              : msg + " (rank " + std::to_string(rr.failed_rank) + ")";
          }
        } else if (native_na || (sparse && !sparse_row_codec(sent.codec))) {
          row.wire_ok = false;
          row.wire_note = std::string(native_na ? "native with a non-global codec"
                                                : "a sparse allreduce with a codec without rows") +
                          " succeeded; QC_ERROR_UNSUPPORTED expected";
        }
        print_row(row);
        rows.push_back(row);
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
