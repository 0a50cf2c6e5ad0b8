// qc-perf: shared declarations of the benchmark's parts.
//   perf_cli.cpp      the command line (tools/common, CLI11)
//   perf_ops.cpp      what each collective is: buffers, sizes, bandwidth factors, schedules
//   qc_perf_main.cpp  the sweep plan, the main loop
//   perf_runner.cpp   worker threads, barrier, timing, the qc group
//   perf_check.cpp    input data, dtype conversion, exact reference, error bounds
//   perf_sparse.cpp   the sparse allreduce's rows, reference and check
//   perf_report.cpp   the table, the footer and --json
// Only the public header qc.h is used.
#ifndef QC_PERF_H
#define QC_PERF_H

#include "qc.h"
#include "qc_tool_names.h"
#include "qc_tool_text.h"

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

enum class Op { Allreduce, Alltoall, ReduceScatter, Allgather, Broadcast, SparseAllreduce };

// ---- the collectives (perf_ops.cpp) ----------------------------------------
//
// A row's `count` is the call's count argument: allreduce and broadcast the
// message's elements, alltoall elements per peer, reduce_scatter recvcount
// (the block each rank ends with), allgather sendcount (each rank's block),
// sparse_allreduce nnz (the rows each rank passes; its size is the dense
// table's bytes, nrows x row_len values).

constexpr int kBroadcastRoot = 0;  // the root of every broadcast row

const char* op_name(Op op);                           // "allreduce", "reduce_scatter", ...
bool op_from_name(const std::string& name, Op* op);   // also all_reduce, all_to_all, ...
bool op_reduces(Op op);     // allreduce, reduce_scatter: -r applies
bool op_replicated(Op op);  // every rank ends with the same output (bit-identical)
bool op_takes_error_buffer(Op op);  // --ef gives the call an error buffer
bool op_scheduled(Op op);   // reduce_scatter, allgather, broadcast: -a picks a schedule
// The codecs a sparse allreduce takes (qc.h: one scale per row).
bool sparse_row_codec(qc_codec_t c);
// Elements of one rank's send / receive buffer for a call of `count`.
size_t send_elems(Op op, int nranks, size_t count);
size_t recv_elems(Op op, int nranks, size_t count);
// Elements per unit of count in a row's size (the input bytes per rank):
// nranks for alltoall and reduce_scatter, else 1.
size_t size_elems_per_count(Op op, int nranks);
// nccl-tests' byte count of a row of `size` (algbw = this / time): the size,
// but for allgather the gathered output, nranks x size.
double algbw_bytes(Op op, int nranks, double size);
double busbw_factor(Op op, int nranks);
// What an uncompressed, bandwidth-optimal run sends per rank, on average
// over ranks (the ratio column's numerator).
double optimal_wire_bytes(Op op, int nranks, double size);
// The plain MPI call a row is compared with under --transport mpi.
const char* mpi_baseline_name(Op op);
// The schedule qc runs for a reduce-scatter, allgather or broadcast with
// this (effective) algorithm: qc.h's contract of each call, as
// src/core/planner.cpp's select_schedule implements it.
const char* schedule_name(Op op, qc_algorithm_t algorithm, int nranks, size_t message_bytes);
// The policy the library applies to a message of message_bytes
// (effective_policy): below min_compress_bytes codec none, and native then
// becomes auto.
qc_policy_t sent_policy(const qc_policy_t& policy, size_t message_bytes);
// What a sparse allreduce call takes besides send (the rows' values) and
// recv (the dense table).
struct SparseArgs {
  const int64_t* indices = nullptr;  // nnz (the call's count) row indices
  size_t row_len = 0;
  size_t nrows = 0;
};
// One call of the op (layer NULL). rank: the caller's; a broadcast's
// non-root ranks pass no sendbuf, as qc.h allows. sparse: the sparse
// allreduce's indices and shape (NULL for the other ops).
qc_status_t call_collective(Op op, qc_comm_t comm, int rank, const void* send, void* recv,
                            size_t count, qc_dtype_t dtype, qc_reduce_op_t redop,
                            qc_error_buffer_t eb, void* stream, const SparseArgs* sparse);

// ---- options -------------------------------------------------------------

struct Options {
  int nranks = 4;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 16ull << 20;  // single codec: 8 B .. 16 MiB (< 1 min, 2 cores)
  bool max_bytes_given = false;      // -e given (else the multi-codec default applies)
  uint64_t factor = 2;
  std::vector<Op> ops{Op::Allreduce};
  // sparse_allreduce: row densities per rank (one row of the table each) and
  // the values per row.
  std::vector<double> densities{0.01};
  size_t row_len = 64;
  std::vector<qc_algorithm_t> algos;  // algorithms (allreduce; schedules of the others), in sweep order
  qc_policy_t policy;                  // bits, bucket, rounding, ef, seed (codec: see codecs)
  std::vector<qc_codec_t> codecs;      // codecs, in sweep order (policy.codec is the first)
  std::vector<int> codec_bits;         // per codec: bits from "-c minmax:8", 0 = policy.bits
  std::vector<int> codec_ef;           // per codec: 1 from "-c onebit+ef", -1 = policy's
  qc_dtype_t dtype = QC_DTYPE_FLOAT32;
  qc_reduce_op_t redop = QC_OP_SUM;
  int warmup = 2;
  int iters = 5;
  double timeout = 60.0;
  std::string json_path;
  std::string command_line;
  bool nranks_given = false;
  bool profile = false;  // --profile: codec / transport seconds per call as columns
  // --transport mpi: one process per rank (perf_mpi.cpp). Each process still
  // generates every rank's inputs (deterministic) for the exact reference, but
  // runs and checks only its own rank; results are reduced over MPI.
  bool mpi = false;
  int mpi_rank = 0;  // this process's rank (0 with the local transport)
  // --transport emulate: every call is one qc_emulate_* over all the ranks,
  // in this process (perf_emulate.cpp).
  bool emulate = false;
  // --device: the calls take CUDA device buffers and a stream per rank
  // (perf_device.cpp); local transport only.
  bool device = false;
};

// The command line (perf_cli.cpp). A usage error exits with status 2,
// --device without a device with 77, --help and --version with 0.
Options parse_args(int argc, char** argv);

// The policy of codec number i of opt.codecs (codec, per-codec bits / ef).
qc_policy_t codec_policy(const Options& opt, size_t i);

// ---- names ---------------------------------------------------------------

const char* algo_name(qc_algorithm_t a);        // "ring", "recursive_doubling", ...
const char* codec_name(qc_codec_t c);           // "none", "minmax", ...
std::string codec_label(const qc_policy_t& p);  // "minmax4/128", "none", ...
const char* dtype_name(qc_dtype_t d);           // "float32", "float16", "bfloat16"
const char* redop_name(qc_reduce_op_t op);
size_t dtype_size(qc_dtype_t d);
using qctool::human_bytes;                      // "32 MiB"

// ---- dtype conversion (perf_check.cpp) -----------------------------------

// splitmix64: the inputs' random stream.
inline uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

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
  size_t send_bytes = 0;
  size_t recv_bytes = 0;
  std::vector<int64_t> indices;  // sparse_allreduce: the rows' indices
};

// Rank b's sparse arguments: its indices, opt.row_len, the rows of its table
// (perf_ops.cpp).
SparseArgs sparse_args(const Options& opt, const RankBuffers& b);

class Buffers {
 public:
  Buffers() = default;
  ~Buffers();
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  // Allocate nranks pairs of buffers; false on out of memory.
  bool allocate(int nranks, size_t send_bytes, size_t recv_bytes);
  // MPI: every rank's send buffer, but one receive buffer (own_rank's), which
  // every rank[r].recv points to (so replica checks are local no-ops;
  // perf_mpi.cpp compares ranks' outputs over MPI instead).
  bool allocate_shared_recv(int nranks, size_t send_bytes, size_t recv_bytes, int own_rank);
  void release();
  std::vector<RankBuffers> rank;

 private:
  bool shared_recv_ = false;
};

// The qc group: one communicator per rank of a local group.
class Group {
 public:
  // mpi_rank >= 0: an MPI group; comms[mpi_rank] is this process's
  // communicator over MPI_COMM_WORLD, the other entries stay NULL.
  Group(int nranks, double timeout, int mpi_rank = -1)
      : nranks_(nranks), timeout_(timeout), mpi_rank_(mpi_rank) {}
  ~Group() { destroy(); }
  // Create the communicators; on failure returns the status (message in *err).
  qc_status_t create(std::string* err);
  void destroy();
  bool intact() const;  // every rank still has its communicator
  std::vector<qc_comm_t> comms;

 private:
  int nranks_;
  double timeout_;
  int mpi_rank_;
};

// What one (op, algo, size) run measured.
struct RunResult {
  bool ok = true;
  bool policy_failed = false;  // qc_comm_set_layer_policy failed (a usage error)
  qc_status_t status = QC_SUCCESS;
  int failed_rank = -1;
  std::string message;         // qc_last_error() of the first failure
  double time_us = 0;          // mean over iterations of the slowest rank
  double wire_bytes = 0;       // per rank per call, averaged over ranks
  std::vector<double> wire_per_rank;  // per call
  double codec_us = 0;         // qc_stats codec_seconds per call, mean over ranks
  double transport_us = 0;     // qc_stats transport_seconds per call, mean over ranks
  double hidden_codec_us = 0;  // qc_stats codec_seconds_in_flight per call, mean over ranks
};

RunResult run_collective(WorkerPool& pool, Group& group, const Options& opt,
                         const qc_policy_t& policy, Op op, Buffers& buf, size_t count);
// --transport emulate (perf_emulate.cpp): warmup + iters calls of
// qc_emulate_<op> over all opt.nranks ranks; the mean time per call. No
// statistics: wire_bytes is NaN, wire_per_rank empty, failed_rank -1 (the
// message names the virtual rank).
RunResult run_collective_emulated(const Options& opt, const qc_policy_t& policy, Op op,
                                  Buffers& buf, size_t count);

// Fill every rank's send buffer with its deterministic inputs.
void fill_inputs(WorkerPool& pool, const Options& opt, Op op, Buffers& buf,
                 size_t elems_per_rank);

// ---- checking (perf_check.cpp) -------------------------------------------

// What the bounds need to know about one size's inputs (computed once per
// size by input_stats, in float64 from the stored inputs).
struct InputStats {
  size_t count = 0;      // the row's count (see Op)
  double smax = 0;       // allreduce, reduce_scatter: max_i sum_r |x_ri|; else max |x|
  double amax = 0;       // max_{r,i} |x_ri| (broadcast: the root's inputs only)
  double l2max = 0;      // max_r ||x_r||_2 over the rank's whole send buffer
  double l2all = 0;      // sqrt(sum_r ||x_r||_2^2): the all-rank norm (native)
  double l2bucket = 0;   // max_r, over every window of `bucket` consecutive
                         // elements, of the window's L2 norm
  int bucket = 0;        // the window length used for l2bucket
};

InputStats input_stats(WorkerPool& pool, const Options& opt, Op op, const Buffers& buf,
                       size_t count);

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
// policy.algorithm is the row's algorithm (QC_ALGO_AUTO is resolved with the
// library's documented rule); stats describe the row's inputs.
ErrorModel error_model(Op op, int nranks, qc_dtype_t dtype, qc_reduce_op_t redop,
                       const qc_policy_t& policy, const InputStats& stats);
// One line per codec for the section header: how its bound is derived.
std::string bound_formula(Op op, qc_dtype_t dtype, const qc_policy_t& policy);
// The algorithm QC_ALGO_AUTO resolves to (algorithm.h's rule, mirrored).
qc_algorithm_t resolve_auto(const qc_policy_t& policy, int nranks, size_t message_bytes);

// Wire check (perf_check.cpp). encoded_bytes: the exact size of one encoded
// message of k elements (32-byte wire header included) for this codec.
uint64_t encoded_bytes(const qc_policy_t& policy, qc_dtype_t dtype, size_t k);
// SRA's ideal bytes for rank r (2(n-1) messages of one encoded chunk each,
// without envelopes) and the allowance on top: 24-byte envelope per message
// plus a 16-byte blob-list entry per allgather message.
uint64_t sra_ideal_bytes(const qc_policy_t& policy, qc_dtype_t dtype, int nranks, int rank,
                         size_t count);
// Pipelining (docs/nonblocking.md), mirrored from the library: the values
// per piece SRA cuts its blocks into for a call of `count` values
// (QC_PIPELINE_CHUNK, raised to at most 1024 pieces, rounded up to the
// codec's bucket), 0 when blocks stay whole; and how many pieces a block has.
size_t sra_piece_values(const qc_policy_t& policy, int nranks, size_t count);
size_t sra_pieces(const qc_policy_t& policy, int nranks, size_t count);
// What rank r's SRA sends with its pieces: each piece is a message of its
// own (its own wire header); sra_ideal_bytes when blocks stay whole.
uint64_t sra_expected_bytes(const qc_policy_t& policy, qc_dtype_t dtype, int nranks, int rank,
                            size_t count);
// The allowance over that: per message, a 24-byte envelope, and a 16-byte
// blob-list entry per allgather message; 2(n-1) messages per piece.
uint64_t sra_allowance_bytes(int nranks, size_t pieces = 1);

struct CheckResult {
  double max_err = 0;         // NaN if any element's error was NaN
  uint64_t wrong = 0;         // elements beyond the bound, plus replica mismatches
  uint64_t replica_diff = 0;  // replicated ops: elements where ranks' outputs differ
};

CheckResult check_result(WorkerPool& pool, const Options& opt, const ErrorModel& model,
                         Op op, const Buffers& buf, size_t count, const InputStats& stats);

// ---- the sparse allreduce (perf_sparse.cpp; its bound in perf_check.cpp) ----

// Rows per rank for a density: round(density x nrows).
size_t sparse_nnz(double density, size_t nrows);
// Every rank's nnz row indices (uniform over the table, duplicates allowed,
// unsorted, from a stream seeded by the rank) and values (fill_inputs').
void fill_sparse_inputs(WorkerPool& pool, const Options& opt, Buffers& buf, size_t nnz,
                        size_t nrows);

// What one row of the summed table's bound needs: row i's contributions.
struct SparseRowStats {
  int ranks = 0;      // ranks with rows of this index (k)
  double terms = 0;   // rows of this index over all ranks, duplicates counted (m)
  double amax = 0;    // max |value| of a rank's row of this index (duplicates
                      // added), plus the float32 rounding of that addition
  double l2 = 0;      // max L2 norm of such a rank's row, likewise
  double smax = 0;    // max_j sum over all the rows' |x_j|: the row's normaliser
};

// The bound on |out - exact| of one element of row `s`, relative to its
// normaliser: max(S_ij, floor) for the per-element codecs (none, fp16,
// bf16), max(s.smax, floor) for the per-row scaled ones (minmax, qsgd,
// onebit). policy.algorithm sra: scatter-reduce-allgather; any other (the
// library's other schedule, or AUTO's choice) the looser of the two.
bool sparse_per_element(const qc_policy_t& policy);
double sparse_floor(qc_dtype_t dtype, const qc_policy_t& policy);
double sparse_row_bound(int nranks, qc_dtype_t dtype, qc_reduce_op_t redop,
                        const qc_policy_t& policy, size_t row_len, const SparseRowStats& s);

// The exact sum of every rank's rows as a dense table, in fp64, and each
// row's statistics (computed once per size and density).
struct SparseReference {
  size_t nrows = 0, row_len = 0;
  std::vector<double> exact;     // nrows x row_len
  std::vector<double> abs_sum;   // the same terms' |x|
  std::vector<SparseRowStats> rows;
  uint64_t distinct_rows = 0;    // sum over ranks of their distinct indices
};
void sparse_reference(const Options& opt, const Buffers& buf, size_t nnz, size_t nrows,
                      SparseReference* ref);
// Checks every rank's table held here against the reference (replicas must
// be bit-identical); *bound gets the largest row bound. MPI: reduced over ranks.
CheckResult check_sparse(WorkerPool& pool, const Options& opt, const qc_policy_t& policy,
                         const SparseReference& ref, const Buffers& buf, double* bound);

// ---- MPI transport (perf_mpi.cpp; stubs without QC_HAVE_MPI) ---------------

bool mpi_available();                       // built with QC_HAVE_MPI
void mpi_init(int* argc, char*** argv, int* rank, int* size);
void mpi_finalize();
[[noreturn]] void mpi_abort(int code);
bool mpi_all(bool v);                       // logical and over ranks
uint64_t mpi_sum_u64(uint64_t v);
double mpi_max(double v);
qc_status_t mpi_comm_create(double timeout, qc_comm_t* comm, std::string* err);
// One rank's warmup + iters calls of a qc collective, timed and reduced over ranks.
RunResult run_collective_mpi(Group& group, const Options& opt, const qc_policy_t& policy,
                             Op op, Buffers& buf, size_t count);
// The op's plain MPI call (mpi_baseline_name: fp32, sum, this rank's send
// buffer, the row's count; broadcast from kBroadcastRoot; sparse_allreduce:
// MPI_Allreduce of the dense table holding this rank's rows), warmup + iters
// calls; mean over iterations of the slowest rank, in us. For float32 the
// result is left in the receive buffer (for the check).
double mpi_baseline_time_us(const Options& opt, Op op, Buffers& buf, size_t count);
// After the local check of this rank's output: max error and wrong counts
// reduced over ranks, and replicated outputs compared across ranks.
void mpi_reduce_check(const Options& opt, Op op, const Buffers& buf, size_t count,
                      CheckResult* res);

// ---- --device (perf_device.cpp; stubs without QC_PERF_HAVE_CUDA) -----------

enum class DeviceSupport { kYes, kNoDevice, kNotBuilt };
DeviceSupport device_support();
// One rank's device copies of its buffers for a row, and its stream.
struct DeviceRank {
  void* send = nullptr;
  void* recv = nullptr;
  void* stream = nullptr;  // a cudaStream_t
};
// Copies host.send to the device, fills the device recv with 0xff bytes;
// false with *error on failure (nothing left allocated).
bool device_begin(const RankBuffers& host, DeviceRank* d, std::string* error);
// With host: copies the device recv into host->recv (for the checks). Frees
// everything either way.
bool device_end(DeviceRank* d, RankBuffers* host, std::string* error);

// ---- report (perf_report.cpp) ---------------------------------------------

struct Row {
  Op op = Op::Allreduce;
  uint64_t size = 0;   // input bytes per rank
  uint64_t count = 0;  // the call's count (see Op)
  double density = std::numeric_limits<double>::quiet_NaN();  // sparse_allreduce
  uint64_t nrows = 0, row_len = 0;                            // sparse_allreduce
  std::string type, algo, codec;  // algo: allreduce the -a value, else the
                                  // schedule; codec: the label, e.g. "minmax4/128"
  std::string codec_name;          // "minmax"
  double time_us = std::numeric_limits<double>::quiet_NaN();
  double algbw = 0, busbw = 0;
  double wire = 0, ratio = 0;
  double error = 0, bound = 0;
  double wire_ideal = std::numeric_limits<double>::quiet_NaN();  // wire / SRA ideal
  uint64_t wrong = 0;
  uint64_t replica_diff = 0;
  double mpi_time_us = std::numeric_limits<double>::quiet_NaN();  // the MPI call, same size
  double speedup = std::numeric_limits<double>::quiet_NaN();      // mpi_time_us / time_us
  double codec_us = 0, transport_us = 0, hidden_codec_us = 0;  // --profile
  bool baseline = false;   // the MPI call's companion row (algo "mpi")
  int bits = 0;            // the row's policy bits (0: opt.policy's)
  bool error_feedback = false;
  bool ran = true;         // false: the collective failed
  bool na = false;         // (codec, algo) pair the library rejects as invalid: n/a
  bool wire_ok = true;     // SRA: ideal <= wire <= ideal + allowance on every rank
  std::string wire_note;   // why !wire_ok
  std::string failure;     // status name and message when !ran
  bool passed() const { return ran && !na && wrong == 0 && wire_ok; }
  bool failed() const { return !na && !passed(); }
};

void print_preamble(const Options& opt);
void print_section_header(const Options& opt, Op op);
void print_row(const Row& row);
void print_footer(const std::vector<Row>& rows);
// Returns false (with a message on stderr) when the file cannot be written.
bool write_json(const std::string& path, const Options& opt, const std::vector<Row>& rows);

}  // namespace qcperf

#endif  // QC_PERF_H
