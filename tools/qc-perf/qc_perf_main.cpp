// qc-perf: benchmark and correctness sweep of qc collectives, in the spirit of
// nccl-tests. The sweep plan and the main loop (the command line: perf_cli.cpp).
#include "perf.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace qcperf {
namespace {

// ---- the sweep plan ------------------------------------------------------------

struct SizeStep {
  uint64_t bytes;  // input bytes per rank
  size_t count;    // the call's count (see Op in perf.h)
};

// Sizes min, min*f, ... <= max, rounded down to a whole number of counts
// (alltoall, reduce_scatter: of nranks blocks); sizes that round to 0 or
// repeat are skipped.
std::vector<SizeStep> plan_sizes(const Options& opt, Op op) {
  const uint64_t unit = dtype_size(opt.dtype) * size_elems_per_count(op, opt.nranks);
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
// allreduce: every -a value; alltoall: one row per codec; reduce_scatter,
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
      if (op == Op::Allreduce) {
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

// The companion row of a size under --transport mpi: the op's plain MPI
// call (fp32, sum) on the same inputs, its result checked as codec none
// would be (float32 only).
Row baseline_row(WorkerPool& pool, const Options& opt, Op op, const SizeStep& step,
                 Buffers& buf, const InputStats& stats) {
  const double mpi_us = mpi_baseline_time_us(opt, op, buf, step.count);
  Row row;
  row.op = op;
  row.baseline = true;
  row.size = step.bytes;
  row.count = step.count;
  row.type = "float";
  row.algo = "mpi";
  row.codec = mpi_baseline_name(op);
  row.codec_name = "mpi";
  row.time_us = mpi_us;
  // Its own bytes: fp32, whatever -d says.
  const double size = double(step.bytes) / double(dtype_size(opt.dtype)) * 4;
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
  // Checked as codec none on a ring (any summation order).
  qc_policy_t none = opt.policy;
  none.codec = QC_CODEC_NONE;
  none.algorithm = QC_ALGO_RING;
  none.error_feedback = 0;
  const ErrorModel model = error_model(op, opt.nranks, opt.dtype, QC_OP_SUM, none, stats);
  Options sum_opt = opt;
  sum_opt.redop = QC_OP_SUM;
  const CheckResult cr = check_result(pool, sum_opt, model, op, buf, step.count, stats);
  row.bound = model.bound;
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

  size_t total_rows = 0;
  for (Op op : opt.ops)
    for (const SizeStep& step : plan_sizes(opt, op)) total_rows += plan_rows(opt, op, step.count).size();

  std::vector<Row> rows;
  size_t row_no = 0;
  for (Op op : opt.ops) {
    print_section_header(opt, op);
    for (const SizeStep& step : plan_sizes(opt, op)) {
      Buffers buf;  // one size at a time: freed at the end of this iteration
      progress.begin(std::string(op_name(op)) + " " + human_bytes(step.bytes) + ": preparing inputs");
      const size_t send_bytes = send_elems(op, opt.nranks, step.count) * ds;
      const size_t recv_bytes = recv_elems(op, opt.nranks, step.count) * ds;
      const bool allocated = mpi_all(
          opt.mpi ? buf.allocate_shared_recv(opt.nranks, send_bytes, recv_bytes, opt.mpi_rank)
                  : buf.allocate(opt.nranks, send_bytes, recv_bytes));
      InputStats stats;
      if (allocated) {
        fill_inputs(pool, opt, op, buf, send_elems(op, opt.nranks, step.count));
        stats = input_stats(pool, opt, op, buf, step.count);
      }
      progress.end();

      // MPI: the op's plain MPI call on the same buffer, as a companion row
      // (algo "mpi"); every qc row of this size gets speedup = its time /
      // this time.
      double mpi_us = std::numeric_limits<double>::quiet_NaN();
      if (opt.mpi && allocated) {
        progress.begin(std::string(op_name(op)) + " " + human_bytes(step.bytes) + ": " +
                       mpi_baseline_name(op));
        const Row row = baseline_row(pool, opt, op, step, buf, stats);
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
        row.count = step.count;
        row.type = dtype_name(opt.dtype);
        row.algo = plan.label;
        qc_policy_t policy = codec_policy(opt, plan.ci);
        policy.algorithm = algo;
        row.codec = codec_label(policy);
        row.bits = policy.bits;
        row.error_feedback = policy.error_feedback != 0;
        row.codec_name = codec_name(codec);
        if (!allocated) {
          row.ran = false;
          row.failure = "out of memory (" + std::to_string(opt.nranks) + " x " +
                        human_bytes(send_bytes) + " + " + human_bytes(recv_bytes) + ")";
          print_row(row);
          rows.push_back(row);
          continue;
        }
        // What the library will send: below min_compress_bytes, codec none.
        const qc_policy_t sent = sent_policy(policy, step.count * ds);
        const bool native_ok =
            is_global_codec(sent.codec) || (sent.codec == QC_CODEC_NONE && opt.mpi);
        // allreduce's native exists only for the global codecs (and none over MPI).
        const bool native_na =
            op == Op::Allreduce && sent.algorithm == QC_ALGO_NATIVE && !native_ok;
        const ErrorModel model = error_model(op, opt.nranks, opt.dtype, opt.redop, sent, stats);
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
          row.ratio = rr.wire_bytes > 0
                          ? optimal_wire_bytes(op, opt.nranks, double(step.bytes)) / rr.wire_bytes
                          : std::numeric_limits<double>::infinity();
          row.error = cr.max_err;
          row.wrong = cr.wrong;
          row.replica_diff = cr.replica_diff;
          if (op == Op::Allreduce) check_allreduce_wire(opt, sent, algo, rr, step.count, &row);
        }
        progress.end();
        if (!rr.ok) {
          const std::string msg = std::string(qc_status_string(rr.status)) + ": " + rr.message;
          if (native_na && rr.status == QC_ERROR_UNSUPPORTED && !rr.policy_failed) {
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
        } else if (native_na) {
          row.wire_ok = false;
          row.wire_note = "native with a non-global codec succeeded; QC_ERROR_UNSUPPORTED expected";
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
