// qc-perf: worker threads, the lockstep barrier, timing and the qc group.
#include "perf.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace qcperf {

// ---- Barrier -----------------------------------------------------------------

void Barrier::wait() {
  std::unique_lock<std::mutex> lock(m_);
  const uint64_t gen = generation_;
  if (++waiting_ == n_) {
    waiting_ = 0;
    ++generation_;
    lock.unlock();
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen; });
}

// ---- WorkerPool --------------------------------------------------------------

WorkerPool::WorkerPool(int n) : n_(n) {
  threads_.reserve(n);
  for (int r = 0; r < n; ++r) threads_.emplace_back([this, r] { loop(r); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::run(const std::function<void(int)>& job) {
  std::unique_lock<std::mutex> lock(m_);
  job_ = &job;
  remaining_ = n_;
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [&] { return remaining_ == 0; });
  job_ = nullptr;
}

void WorkerPool::loop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(m_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(rank);  // jobs do not throw: they only call qc (C) and plain loops
    {
      std::lock_guard<std::mutex> lock(m_);
      if (--remaining_ == 0) done_cv_.notify_one();
    }
  }
}

// ---- Buffers -----------------------------------------------------------------

Buffers::~Buffers() { release(); }

namespace {
// 64-byte aligned, at least one cache line; nullptr on overflow or out of memory.
void* aligned_buffer(size_t bytes) {
  const size_t alloc = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  return alloc < bytes ? nullptr : std::aligned_alloc(64, alloc);
}
}  // namespace

bool Buffers::allocate(int nranks, size_t send_bytes, size_t recv_bytes) {
  release();
  rank.resize(nranks);
  for (RankBuffers& b : rank) {
    b.send = aligned_buffer(send_bytes);
    b.recv = aligned_buffer(recv_bytes);
    b.send_bytes = send_bytes;
    b.recv_bytes = recv_bytes;
    if (!b.send || !b.recv) {
      release();
      return false;
    }
  }
  return true;
}

bool Buffers::allocate_shared_recv(int nranks, size_t send_bytes, size_t recv_bytes,
                                   int own_rank) {
  release();
  if (own_rank < 0 || own_rank >= nranks) return false;
  rank.resize(nranks);
  shared_recv_ = true;
  void* recv = aligned_buffer(recv_bytes);
  bool ok = recv != nullptr;
  for (RankBuffers& b : rank) {
    b.send = aligned_buffer(send_bytes);
    b.recv = recv;
    b.send_bytes = send_bytes;
    b.recv_bytes = recv_bytes;
    ok = ok && b.send;
  }
  if (!ok) release();
  return ok;
}

void Buffers::release() {
  for (RankBuffers& b : rank) std::free(b.send);
  if (shared_recv_) {
    if (!rank.empty()) std::free(rank[0].recv);
  } else {
    for (RankBuffers& b : rank) std::free(b.recv);
  }
  shared_recv_ = false;
  rank.clear();
}

// ---- Group -------------------------------------------------------------------

qc_status_t Group::create(std::string* err) {
  destroy();
  if (mpi_rank_ >= 0) {
    comms.assign(nranks_, nullptr);
    return mpi_comm_create(timeout_, &comms[mpi_rank_], err);
  }
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  qc_status_t st = qc_comm_config_init(&cfg);
  if (st == QC_SUCCESS) {
    cfg.transport = QC_TRANSPORT_LOCAL;
    cfg.timeout_seconds = timeout_;
    comms.assign(nranks_, nullptr);
    st = qc_comm_create_local_with_config(nranks_, &cfg, comms.data());
  }
  if (st != QC_SUCCESS) {
    if (err) *err = std::string(qc_status_string(st)) + ": " + qc_last_error();
    comms.assign(nranks_, nullptr);
  }
  return st;
}

void Group::destroy() {
  for (qc_comm_t& c : comms) {
    if (c) qc_comm_destroy(c);
    c = nullptr;
  }
}

bool Group::intact() const {
  if (static_cast<int>(comms.size()) != nranks_) return false;
  if (mpi_rank_ >= 0) return comms[mpi_rank_] != nullptr;
  for (qc_comm_t c : comms)
    if (!c) return false;
  return true;
}

// ---- one measured run -------------------------------------------------------
//
// Every rank (a worker thread) sets the policy, then runs warmup+iters calls in
// lockstep: barrier, t0, collective, t1. A rank's time for an iteration is
// t1 - t0; the row's time is the mean over iterations of the slowest rank.
// wire(B) = the rank's qc_stats.wire_bytes delta over the timed iterations /
// iters, averaged over ranks (and kept per rank for the SRA wire check).
// With error feedback the error buffers are reset before the last call
// (outside the timed region), the one whose output is checked.
//
// When a call fails, the failing rank records qc_last_error() and destroys its
// communicator at once, so that peers waiting for it fail fast (the local
// transport then gives QC_ERROR_TRANSPORT) instead of waiting for the timeout.
// Failed ranks keep passing the barriers so nobody is left waiting there.
RunResult run_collective(WorkerPool& pool, Group& group, const Options& opt,
                         const qc_policy_t& policy, Op op, Buffers& buf, size_t count) {
  if (opt.mpi) return run_collective_mpi(group, opt, policy, op, buf, count);
  if (opt.emulate) return run_collective_emulated(opt, policy, op, buf, count);
  using clock = std::chrono::steady_clock;
  const int n = opt.nranks;
  const int total = opt.warmup + opt.iters;
  std::vector<double> dt(size_t(opt.iters) * n, 0.0);
  std::vector<double> wire(n, 0.0), codec_s(n, 0.0), xport_s(n, 0.0), hidden_s(n, 0.0);
  struct Failure {
    int order = -1;
    qc_status_t status = QC_SUCCESS;
    std::string message;
    bool policy = false;
  };
  std::vector<Failure> fails(n);
  std::atomic<int> fail_order{0};
  Barrier barrier(n);

  pool.run([&](int r) {
    qc_comm_t& comm = group.comms[r];
    qc_error_buffer_t eb = nullptr;
    bool failed = false;
    auto fail = [&](qc_status_t st, bool in_policy) {
      Failure& f = fails[r];
      f.message = qc_last_error();  // copy before the next qc call
      f.status = st;
      f.policy = in_policy;
      f.order = fail_order.fetch_add(1);
      failed = true;
      qc_error_buffer_destroy(eb);
      eb = nullptr;
      qc_comm_destroy(comm);
      comm = nullptr;
    };
    if (!comm) {
      fails[r] = Failure{fail_order.fetch_add(1), QC_ERROR_INTERNAL,
                         "qc-perf: no communicator for this rank", false};
      failed = true;
    }
    if (!failed) {
      qc_status_t st = qc_comm_set_layer_policy(comm, "*", &policy);
      if (st != QC_SUCCESS) fail(st, true);
    }
    if (!failed && op_takes_error_buffer(op) && policy.error_feedback) {
      qc_status_t st = qc_error_buffer_create(comm, send_elems(op, n, count), &eb);
      if (st != QC_SUCCESS) fail(st, false);
    }
    // Poison the output (0xff.. is NaN in float, half and bfloat16), so an
    // element the library never writes shows up as wrong.
    std::memset(buf.rank[r].recv, 0xff, buf.rank[r].recv_bytes);

    const void* send = buf.rank[r].send;
    void* recv = buf.rank[r].recv;
    const SparseArgs sparse = sparse_args(opt, buf.rank[r]);
    void* stream = nullptr;
    DeviceRank device;
    std::string device_error;
    auto fail_device = [&] {
      fail(QC_ERROR_INTERNAL, false);
      fails[r].message = "qc-perf --device: " + device_error;
    };
    if (opt.device && !failed) {
      if (device_begin(buf.rank[r], &device, &device_error)) {
        send = device.send;
        recv = device.recv;
        stream = device.stream;
      } else {
        fail_device();
      }
    }
    qc_stats_t before{}, after{};
    before.struct_size = after.struct_size = sizeof(qc_stats_t);
    for (int it = 0; it < total; ++it) {
      if (it == opt.warmup && !failed) {
        qc_status_t st = qc_comm_get_stats(comm, &before);
        if (st != QC_SUCCESS) fail(st, false);
      }
      // Error feedback: the last (checked) call starts from zero residuals,
      // so the bounds of error_model() apply to it (see perf_check.cpp).
      if (eb && it == total - 1 && !failed) {
        qc_status_t st = qc_error_buffer_reset(eb);
        if (st != QC_SUCCESS) fail(st, false);
      }
      barrier.wait();
      if (failed) continue;
      const clock::time_point t0 = clock::now();
      const qc_status_t st =
          call_collective(op, comm, r, send, recv, count, opt.dtype, opt.redop, eb, stream,
                          &sparse);
      const clock::time_point t1 = clock::now();
      if (st != QC_SUCCESS) {
        fail(st, false);
        continue;
      }
      if (it >= opt.warmup)
        dt[size_t(it - opt.warmup) * n + r] = std::chrono::duration<double>(t1 - t0).count();
    }
    if (opt.device && device.send != nullptr &&
        !device_end(&device, failed ? nullptr : &buf.rank[r], &device_error) && !failed) {
      fail_device();
    }
    if (!failed) {
      qc_status_t st = qc_comm_get_stats(comm, &after);
      if (st != QC_SUCCESS) fail(st, false);
      else {
        wire[r] = double(after.wire_bytes - before.wire_bytes) / opt.iters;
        codec_s[r] = (after.codec_seconds - before.codec_seconds) / opt.iters;
        xport_s[r] = (after.transport_seconds - before.transport_seconds) / opt.iters;
        hidden_s[r] =
            (after.codec_seconds_in_flight - before.codec_seconds_in_flight) / opt.iters;
      }
    }
    qc_error_buffer_destroy(eb);
  });

  RunResult res;
  const Failure* first = nullptr;
  for (const Failure& f : fails)
    if (f.order >= 0 && (!first || f.order < first->order)) first = &f;
  if (first) {
    res.ok = false;
    res.status = first->status;
    res.message = first->message;
    res.policy_failed = first->policy;
    res.failed_rank = static_cast<int>(first - fails.data());
    return res;
  }
  double sum = 0;
  for (int it = 0; it < opt.iters; ++it) {
    double slowest = 0;
    for (int r = 0; r < n; ++r) slowest = std::max(slowest, dt[size_t(it) * n + r]);
    sum += slowest;
  }
  res.time_us = sum / opt.iters * 1e6;
  double w = 0;
  for (double x : wire) w += x;
  res.wire_bytes = w / n;
  res.wire_per_rank = wire;
  for (int r = 0; r < n; ++r) {
    res.codec_us += codec_s[r] * 1e6 / n;
    res.transport_us += xport_s[r] * 1e6 / n;
    res.hidden_codec_us += hidden_s[r] * 1e6 / n;
  }
  return res;
}

}  // namespace qcperf
