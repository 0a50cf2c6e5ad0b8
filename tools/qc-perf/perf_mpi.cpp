// qc-perf: the MPI transport (--transport mpi). One process per rank, started
// by mpirun. Each process generates every rank's inputs (they are
// deterministic), so it can compute the exact reference for its own output;
// it runs and checks only its own rank, and the results are reduced over
// MPI_COMM_WORLD. Without QC_HAVE_MPI only stubs are built, and
// --transport mpi is refused by the command line.
#include "perf.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef QC_HAVE_MPI
#include <mpi.h>
#endif

namespace qcperf {

#ifdef QC_HAVE_MPI

bool mpi_available() { return true; }

// Set by mpi_init: with the local transport the helpers below are no-ops.
static bool g_active = false;

void mpi_init(int* argc, char*** argv, int* rank, int* size) {
  g_active = true;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}

void mpi_finalize() {
  if (!g_active) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

void mpi_abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_active) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

bool mpi_all(bool v) {
  if (!g_active) return v;
  int in = v ? 1 : 0, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return out != 0;
}

uint64_t mpi_sum_u64(uint64_t v) {
  if (!g_active) return v;
  uint64_t out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

double mpi_max(double v) {
  if (!g_active) return v;
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

qc_status_t mpi_comm_create(double timeout, qc_comm_t* comm, std::string* err) {
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  qc_status_t st = qc_comm_config_init(&cfg);
  if (st == QC_SUCCESS) {
    cfg.transport = QC_TRANSPORT_MPI;
    cfg.mpi_comm = static_cast<int64_t>(MPI_Comm_c2f(MPI_COMM_WORLD));
    cfg.timeout_seconds = timeout;
    st = qc_comm_create(&cfg, comm);
  }
  if (st != QC_SUCCESS) {
    if (err) *err = std::string(qc_status_string(st)) + ": " + qc_last_error();
    *comm = nullptr;
  }
  return st;
}

namespace {
// The mean over iterations of the slowest rank's time, in us.
double slowest_mean_us(std::vector<double>& dt) {
  std::vector<double> mx(dt.size(), 0.0);
  MPI_Allreduce(dt.data(), mx.data(), static_cast<int>(dt.size()), MPI_DOUBLE, MPI_MAX,
                MPI_COMM_WORLD);
  double sum = 0;
  for (double x : mx) sum += x;
  return mx.empty() ? 0 : sum / double(mx.size()) * 1e6;
}
}  // namespace

// As run_collective (perf_runner.cpp), for one rank per process: MPI_Barrier,
// t0, the collective, t1. A failing rank keeps its communicator (peers may
// still be inside a call on it); the caller recreates the group on every
// rank after a failed row.
RunResult run_collective_mpi(Group& group, const Options& opt, const qc_policy_t& policy,
                             Op op, Buffers& buf, size_t count) {
  using clock = std::chrono::steady_clock;
  const int n = opt.nranks, me = opt.mpi_rank;
  const int total = opt.warmup + opt.iters;
  std::vector<double> dt(size_t(opt.iters), 0.0);
  qc_comm_t comm = group.comms[me];
  qc_error_buffer_t eb = nullptr;
  qc_status_t fail_st = QC_SUCCESS;
  bool in_policy = false;
  std::string message;
  auto fail = [&](qc_status_t st, bool pol) {
    if (fail_st != QC_SUCCESS) return;
    message = qc_last_error();
    fail_st = st;
    in_policy = pol;
  };
  if (!comm) fail(QC_ERROR_INTERNAL, false), message = "qc-perf: no communicator for this rank";
  if (fail_st == QC_SUCCESS) {
    qc_status_t st = qc_comm_set_layer_policy(comm, "*", &policy);
    if (st != QC_SUCCESS) fail(st, true);
  }
  if (fail_st == QC_SUCCESS && op_takes_error_buffer(op) && policy.error_feedback) {
    qc_status_t st = qc_error_buffer_create(comm, send_elems(op, n, count), &eb);
    if (st != QC_SUCCESS) fail(st, false);
  }
  // A rank that cannot even start must not leave its peers in a call.
  const bool started = mpi_all(fail_st == QC_SUCCESS);
  std::memset(buf.rank[me].recv, 0xff, buf.rank[me].recv_bytes);
  const void* send = buf.rank[me].send;
  void* recv = buf.rank[me].recv;
  const SparseArgs sparse = sparse_args(opt, buf.rank[me]);
  qc_stats_t before{}, after{};
  before.struct_size = after.struct_size = sizeof(qc_stats_t);
  for (int it = 0; started && it < total && fail_st == QC_SUCCESS; ++it) {
    if (it == opt.warmup) {
      qc_status_t st = qc_comm_get_stats(comm, &before);
      if (st != QC_SUCCESS) fail(st, false);
    }
    if (eb && it == total - 1) {
      qc_status_t st = qc_error_buffer_reset(eb);
      if (st != QC_SUCCESS) fail(st, false);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const clock::time_point t0 = clock::now();
    const qc_status_t st =
        call_collective(op, comm, me, send, recv, count, opt.dtype, opt.redop, eb, nullptr,
                        &sparse);
    const clock::time_point t1 = clock::now();
    if (st != QC_SUCCESS) {
      fail(st, false);
      break;
    }
    if (it >= opt.warmup) dt[size_t(it - opt.warmup)] = std::chrono::duration<double>(t1 - t0).count();
  }
  double stat[4] = {0, 0, 0, 0};
  if (fail_st == QC_SUCCESS && started) {
    qc_status_t st = qc_comm_get_stats(comm, &after);
    if (st != QC_SUCCESS) {
      fail(st, false);
    } else {
      stat[0] = double(after.wire_bytes - before.wire_bytes) / opt.iters;
      stat[1] = (after.codec_seconds - before.codec_seconds) / opt.iters;
      stat[2] = (after.transport_seconds - before.transport_seconds) / opt.iters;
      stat[3] = (after.codec_seconds_in_flight - before.codec_seconds_in_flight) / opt.iters;
    }
  }
  qc_error_buffer_destroy(eb);

  // Which ranks failed (the lowest one's status and message are reported).
  int mine = fail_st == QC_SUCCESS ? -1 : static_cast<int>(fail_st);
  std::vector<int> sts(n, -1);
  MPI_Allgather(&mine, 1, MPI_INT, sts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int pol = in_policy ? 1 : 0, any_pol = 0;
  MPI_Allreduce(&pol, &any_pol, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  RunResult res;
  int first = -1;
  for (int r = 0; r < n && first < 0; ++r)
    if (sts[r] >= 0) first = r;
  if (first >= 0) {
    char msg[1024] = {0};
    if (me == first) std::snprintf(msg, sizeof msg, "%s", message.c_str());
    MPI_Bcast(msg, sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD);
    res.ok = false;
    res.status = static_cast<qc_status_t>(sts[first]);
    res.message = msg;
    res.policy_failed = any_pol != 0;
    res.failed_rank = first;
    // The communicator may be broken on some ranks: recreate on all.
    if (group.comms[me]) qc_comm_destroy(group.comms[me]);
    group.comms[me] = nullptr;
    return res;
  }
  res.time_us = slowest_mean_us(dt);
  std::vector<double> all(size_t(4) * n, 0.0);
  MPI_Allgather(stat, 4, MPI_DOUBLE, all.data(), 4, MPI_DOUBLE, MPI_COMM_WORLD);
  res.wire_per_rank.assign(n, 0.0);
  double w = 0;
  for (int r = 0; r < n; ++r) {
    res.wire_per_rank[r] = all[size_t(r) * 4];
    w += all[size_t(r) * 4];
    res.codec_us += all[size_t(r) * 4 + 1] * 1e6 / n;
    res.transport_us += all[size_t(r) * 4 + 2] * 1e6 / n;
    res.hidden_codec_us += all[size_t(r) * 4 + 3] * 1e6 / n;
  }
  res.wire_bytes = w / n;
  return res;
}

namespace {
// One call of the op's plain MPI counterpart on float buffers (send: the
// op's send elements, recv: its receive elements; broadcast works in recv).
void mpi_baseline_call(Op op, const float* send, float* recv, size_t count) {
  const int c = static_cast<int>(count);
  switch (op) {
    case Op::Allreduce:
    case Op::SparseAllreduce:  // count: the dense table's values
      MPI_Allreduce(send, recv, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Op::Alltoall:
      MPI_Alltoall(send, c, MPI_FLOAT, recv, c, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case Op::ReduceScatter:
      MPI_Reduce_scatter_block(send, recv, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Op::Allgather:
      MPI_Allgather(send, c, MPI_FLOAT, recv, c, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case Op::Broadcast:
      MPI_Bcast(recv, c, MPI_FLOAT, kBroadcastRoot, MPI_COMM_WORLD);
      break;
  }
}
}  // namespace

double mpi_baseline_time_us(const Options& opt, Op op, Buffers& buf, size_t count) {
  using clock = std::chrono::steady_clock;
  const int me = opt.mpi_rank;
  const bool sparse = op == Op::SparseAllreduce;
  const size_t out = sparse ? buf.rank[me].recv_bytes / dtype_size(opt.dtype)
                            : recv_elems(op, opt.nranks, count);
  const size_t in = sparse ? out : send_elems(op, opt.nranks, count);
  std::vector<double> dt(size_t(opt.iters), 0.0);
  std::memset(buf.rank[me].recv, 0xff, buf.rank[me].recv_bytes);
  // The baseline is fp32. For half/bfloat16 runs the buffers hold 2-byte
  // values, so the inputs are widened into scratch buffers of floats.
  std::vector<float> scratch_in, scratch_out;
  const float* send = static_cast<const float*>(buf.rank[me].send);
  float* recv = static_cast<float*>(buf.rank[me].recv);
  if (sparse) {
    // What a code without sparse support does: its rows added into a dense
    // table (repeated indices in input order), then the whole table reduced.
    scratch_in.assign(in, 0.0f);
    for (size_t k = 0; k < count; ++k) {
      float* row = scratch_in.data() + size_t(buf.rank[me].indices[k]) * opt.row_len;
      for (size_t j = 0; j < opt.row_len; ++j)
        row[j] += float(load_elem(buf.rank[me].send, opt.dtype, k * opt.row_len + j));
    }
    send = scratch_in.data();
    if (opt.dtype != QC_DTYPE_FLOAT32) {
      scratch_out.resize(out);
      recv = scratch_out.data();
    }
    count = in;
  } else if (opt.dtype != QC_DTYPE_FLOAT32) {
    scratch_in.resize(in);
    scratch_out.resize(out);
    for (size_t i = 0; i < in; ++i) scratch_in[i] = float(load_elem(buf.rank[me].send, opt.dtype, i));
    send = scratch_in.data();
    recv = scratch_out.data();
  }
  // MPI_Bcast is in place: the root's message starts in its receive buffer
  // (which the calls leave as it is), the others' is overwritten each call.
  if (op == Op::Broadcast && me == kBroadcastRoot) std::memcpy(recv, send, in * sizeof(float));
  for (int it = 0; it < opt.warmup + opt.iters; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    const clock::time_point t0 = clock::now();
    mpi_baseline_call(op, send, recv, count);
    const clock::time_point t1 = clock::now();
    if (it >= opt.warmup) dt[size_t(it - opt.warmup)] = std::chrono::duration<double>(t1 - t0).count();
  }
  return slowest_mean_us(dt);
}

namespace {
uint64_t fnv1a(const void* p, size_t bytes) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ c[i]) * 0x100000001b3ull;
  return h;
}
}  // namespace

void mpi_reduce_check(const Options& opt, Op op, const Buffers& buf, size_t count,
                      CheckResult* res) {
  const int me = opt.mpi_rank;
  const size_t ds = dtype_size(opt.dtype);
  // NaN max error: reduce a flag separately (MPI_MAX and NaN do not mix).
  const bool nan = std::isnan(res->max_err);
  double v[2] = {nan ? 0.0 : res->max_err, nan ? 1.0 : 0.0}, mx[2];
  MPI_Allreduce(v, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  res->max_err = mx[1] > 0 ? std::numeric_limits<double>::quiet_NaN() : mx[0];
  if (!op_replicated(op)) {
    // Each rank checked its own output (alltoall's received blocks,
    // reduce_scatter's block): the counts add up.
    res->wrong = mpi_sum_u64(res->wrong);
    res->replica_diff = 0;
    return;
  }
  // Replicated outputs (allreduce, allgather, broadcast): every rank checked
  // its own copy of the result, so the count of elements beyond the bound is
  // the largest over ranks (equal when the replicas agree). Replica
  // consistency: a hash compare first; only when the hashes differ is rank
  // 0's output broadcast and compared element-wise.
  uint64_t wrong = 0;
  MPI_Allreduce(&res->wrong, &wrong, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  (void)count;
  const size_t bytes = buf.rank[me].recv_bytes;
  const size_t elems = bytes / ds;
  const uint64_t h = fnv1a(buf.rank[me].recv, bytes);
  uint64_t hmin = 0, hmax = 0;
  MPI_Allreduce(&h, &hmin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hmax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  uint64_t diff = 0;
  if (hmin != hmax) {
    std::vector<unsigned char> ref(bytes);
    if (me == 0) std::memcpy(ref.data(), buf.rank[me].recv, bytes);
    for (size_t off = 0; off < bytes; off += size_t(1) << 30) {
      const size_t len = std::min(bytes - off, size_t(1) << 30);
      MPI_Bcast(ref.data() + off, static_cast<int>(len), MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    const unsigned char* mine = static_cast<const unsigned char*>(buf.rank[me].recv);
    uint64_t local = 0;
    for (size_t i = 0; i < elems; ++i)
      if (std::memcmp(mine + i * ds, ref.data() + i * ds, ds) != 0) ++local;
    // An element counts once if any rank differs from rank 0: an upper
    // bound by the max, the local counts of different ranks may overlap.
    MPI_Allreduce(&local, &diff, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (diff == 0) diff = 1;  // hashes differ, so something does
  }
  res->replica_diff = diff;
  res->wrong = wrong + diff;
}

#else  // !QC_HAVE_MPI

bool mpi_available() { return false; }
void mpi_init(int*, char***, int* rank, int* size) {
  *rank = 0;
  *size = 1;
}
void mpi_finalize() {}
void mpi_abort(int code) { std::exit(code); }
bool mpi_all(bool v) { return v; }
uint64_t mpi_sum_u64(uint64_t v) { return v; }
double mpi_max(double v) { return v; }
qc_status_t mpi_comm_create(double, qc_comm_t* comm, std::string* err) {
  *comm = nullptr;
  if (err) *err = "qc-perf was built without MPI";
  return QC_ERROR_UNSUPPORTED;
}
RunResult run_collective_mpi(Group&, const Options&, const qc_policy_t&, Op, Buffers&, size_t) {
  RunResult r;
  r.ok = false;
  r.status = QC_ERROR_UNSUPPORTED;
  r.message = "qc-perf was built without MPI";
  return r;
}
double mpi_baseline_time_us(const Options&, Op, Buffers&, size_t) {
  return std::numeric_limits<double>::quiet_NaN();
}
void mpi_reduce_check(const Options&, Op, const Buffers&, size_t, CheckResult*) {}

#endif

}  // namespace qcperf
