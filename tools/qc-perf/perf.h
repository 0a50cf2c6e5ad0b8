// qc-perf: shared declarations of the benchmark's four parts.
//   qc_perf_main.cpp  command line, the sweep plan, the main loop
//   perf_runner.cpp   worker threads, barrier, timing, the qc group
//   perf_check.cpp    input data, dtype conversion, exact reference, error bounds
//   perf_report.cpp   the table, the footer and --json
// Only the public header qc.h is used.
#ifndef QC_PERF_H
#define QC_PERF_H

#include "qc.h"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace qcperf {

enum class Op { Allreduce, Alltoall };

const char* op_name(Op op);

// ---- options -------------------------------------------------------------

struct Options {
  int nranks = 4;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 16ull << 20;  // default sweep: 8 B .. 16 MiB (< 1 min, 2 cores)
  uint64_t factor = 2;
  std::vector<Op> ops{Op::Allreduce};
  std::vector<qc_algorithm_t> algos;  // allreduce algorithms, in sweep order
  qc_policy_t policy;                  // codec, bits, bucket, rounding, ef, seed
  qc_dtype_t dtype = QC_DTYPE_FLOAT32;
  qc_reduce_op_t redop = QC_OP_SUM;
  int warmup = 2;
  int iters = 5;
  double timeout = 60.0;
  std::string json_path;
  std::string command_line;
};

// ---- names ---------------------------------------------------------------

const char* algo_short_name(qc_algorithm_t a);  // "ring", "rd", ...
const char* codec_name(qc_codec_t c);           // "none", "minmax", ...
std::string codec_label(const qc_policy_t& p);  // "minmax4/128", "none", ...
const char* dtype_name(qc_dtype_t d);           // "float", "half", "bfloat16"
const char* redop_name(qc_reduce_op_t op);
size_t dtype_size(qc_dtype_t d);
std::string human_bytes(uint64_t bytes);        // "32 MiB"

// ---- dtype conversion (perf_check.cpp) -----------------------------------

uint16_t float_to_half(float f);     // IEEE binary16, round to nearest even
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);     // upper 16 bits, round to nearest even
float bf16_to_float(uint16_t b);

// Element i of a buffer of dtype d, widened exactly to double.
inline double load_elem(const void* buf, qc_dtype_t d, size_t i) {
  if (d == QC_DTYPE_FLOAT32) return static_cast<const float*>(buf)[i];
  uint16_t v = static_cast<const uint16_t*>(buf)[i];
  return d == QC_DTYPE_FLOAT16 ? half_to_float(v) : bf16_to_float(v);
}

// ---- threads (perf_runner.cpp) -------------------------------------------

// std::barrier is C++20; this is the small condition-variable version.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait();

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
};

// n persistent threads; run(job) calls job(rank) on thread `rank` for every
// rank and returns when all have returned.
class WorkerPool {
 public:
  explicit WorkerPool(int n);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  void run(const std::function<void(int)>& job);
  int size() const { return n_; }

 private:
  void loop(int rank);
  int n_;
  std::vector<std::thread> threads_;
  std::mutex m_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int remaining_ = 0;
  bool stop_ = false;
};

// Per-rank buffers of one message size (allocated once per size).
struct RankBuffers {
  void* send = nullptr;
  void* recv = nullptr;
  size_t bytes = 0;  // of each of send and recv
};

class Buffers {
 public:
  Buffers() = default;
  ~Buffers();
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  // Allocate nranks pairs of `bytes`; false on out of memory.
  bool allocate(int nranks, size_t bytes);
  void release();
  std::vector<RankBuffers> rank;
};

// The qc group: one communicator per rank of a local group.
class Group {
 public:
  Group(int nranks, double timeout) : nranks_(nranks), timeout_(timeout) {}
  ~Group() { destroy(); }
  // Create the communicators; on failure returns the status (message in *err).
  qc_status_t create(std::string* err);
  void destroy();
  bool intact() const;  // every rank still has its communicator
  std::vector<qc_comm_t> comms;

 private:
  int nranks_;
  double timeout_;
};

// What one (op, algo, size) run measured.
struct RunResult {
  bool ok = true;
  bool policy_failed = false;  // qc_set_layer_policy failed (a usage error)
  qc_status_t status = QC_SUCCESS;
  int failed_rank = -1;
  std::string message;         // qc_last_error() of the first failure
  double time_us = 0;          // mean over iterations of the slowest rank
  double wire_bytes = 0;       // per rank per call, averaged over ranks
};

RunResult run_collective(WorkerPool& pool, Group& group, const Options& opt,
                         const qc_policy_t& policy, Op op, Buffers& buf, size_t count);

// Fill every rank's send buffer with its deterministic inputs.
void fill_inputs(WorkerPool& pool, const Options& opt, Op op, Buffers& buf,
                 size_t elems_per_rank);

// ---- checking (perf_check.cpp) -------------------------------------------

enum class Norm {
  PerElement,  // err_i = |out_i - exact_i| / max(sum_r |x_{r,i}|, floor)
  Global       // err_i = |out_i - exact_i| / max(max_j sum_r |x_{r,j}|, floor)
};

struct ErrorModel {
  Norm norm = Norm::PerElement;
  double bound = 0;    // an element is wrong when !(err <= bound)
  double floor = 0;    // smallest normaliser (below it errors are absolute)
  std::string text;    // how the bound was derived, for the header
};

// THE error-bound function: every bound qc-perf applies comes from here.
ErrorModel error_model(Op op, int nranks, qc_dtype_t dtype, qc_reduce_op_t redop,
                       const qc_policy_t& policy);

struct CheckResult {
  double max_err = 0;         // NaN if any element's error was NaN
  uint64_t wrong = 0;         // elements beyond the bound, plus replica mismatches
  uint64_t replica_diff = 0;  // allreduce: elements where ranks' outputs differ
};

CheckResult check_result(WorkerPool& pool, const Options& opt, const ErrorModel& model,
                         Op op, const Buffers& buf, size_t count);

// ---- report (perf_report.cpp) ---------------------------------------------

struct Row {
  Op op = Op::Allreduce;
  uint64_t size = 0;   // logical bytes per rank
  uint64_t count = 0;  // elements (per peer for alltoall)
  std::string type, algo, codec;
  double time_us = std::numeric_limits<double>::quiet_NaN();
  double algbw = 0, busbw = 0;
  double wire = 0, ratio = 0;
  double error = 0, bound = 0;
  uint64_t wrong = 0;
  uint64_t replica_diff = 0;
  bool ran = true;         // false: the collective failed
  std::string failure;     // status name and message when !ran
  bool passed() const { return ran && wrong == 0; }
};

double busbw_factor(Op op, int nranks);

void print_preamble(const Options& opt);
void print_section_header(const Options& opt, Op op, const ErrorModel& model);
void print_row(const Row& row);
void print_footer(const std::vector<Row>& rows);
// Returns false (with a message on stderr) when the file cannot be written.
bool write_json(const std::string& path, const Options& opt, const std::vector<Row>& rows);

}  // namespace qcperf

#endif  // QC_PERF_H
