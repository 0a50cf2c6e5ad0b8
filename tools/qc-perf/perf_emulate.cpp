// qc-perf --transport emulate: each row's calls as qc_emulate_* over all the
// ranks at once, in this one process (virtual ranks on fibers, issue 36):
// the time a training script spends emulating N nodes per collective. An
// emulation keeps no statistics, so its rows have no wire bytes (and no
// wire check); the outputs are checked as any row's.
#include "perf.h"

#include <chrono>
#include <cstring>
#include <limits>

namespace qcperf {

namespace {

qc_status_t call_emulated(Op op, int n, const std::vector<const void*>& send,
                          const std::vector<void*>& recv, size_t count, const Options& opt,
                          uint64_t call_index, const qc_policy_t& policy,
                          qc_error_buffer_t* ebs, const std::vector<const int64_t*>& indices,
                          const std::vector<size_t>& nnz, size_t nrows) {
  switch (op) {
    case Op::Allreduce:
      return qc_emulate_allreduce(n, send.data(), recv.data(), count, opt.dtype, opt.redop,
                                  nullptr, call_index, &policy, ebs);
    case Op::Alltoall:
      return qc_emulate_alltoall(n, send.data(), recv.data(), count, opt.dtype, nullptr,
                                 call_index, &policy);
    case Op::ReduceScatter:
      return qc_emulate_reduce_scatter(n, send.data(), recv.data(), count, opt.dtype,
                                       opt.redop, nullptr, call_index, &policy, ebs);
    case Op::Allgather:
      return qc_emulate_allgather(n, send.data(), recv.data(), count, opt.dtype, nullptr,
                                  call_index, &policy, ebs);
    case Op::Broadcast:
      return qc_emulate_broadcast(n, send.data(), recv.data(), count, opt.dtype,
                                  kBroadcastRoot, nullptr, call_index, &policy);
    case Op::SparseAllreduce:
      return qc_emulate_sparse_allreduce_dense(n, indices.data(), send.data(), nnz.data(),
                                               opt.row_len, nrows, recv.data(), opt.dtype,
                                               opt.redop, nullptr, call_index, &policy);
  }
  return QC_ERROR_INVALID_ARGUMENT;
}

}  // namespace

RunResult run_collective_emulated(const Options& opt, const qc_policy_t& policy, Op op,
                                  Buffers& buf, size_t count) {
  using clock = std::chrono::steady_clock;
  const int n = opt.nranks;
  const int total = opt.warmup + opt.iters;
  RunResult res;
  std::vector<const void*> send(n);
  std::vector<void*> recv(n);
  std::vector<const int64_t*> indices(n);
  std::vector<size_t> nnz(n, count);
  size_t nrows = 0;
  for (int r = 0; r < n; ++r) {
    send[r] = buf.rank[r].send;
    recv[r] = buf.rank[r].recv;
    const SparseArgs sparse = sparse_args(opt, buf.rank[r]);
    indices[r] = sparse.indices;
    nrows = sparse.nrows;
    // Poisoned (NaN in every dtype): an element never written shows up as wrong.
    std::memset(buf.rank[r].recv, 0xff, buf.rank[r].recv_bytes);
  }
  std::vector<qc_error_buffer_t> ebs;
  auto fail = [&](qc_status_t st) {
    res.ok = false;
    res.status = st;
    res.message = qc_last_error();  // names the failing virtual rank
  };
  if (op_takes_error_buffer(op) && policy.error_feedback) {
    ebs.assign(n, nullptr);
    for (int r = 0; r < n && res.ok; ++r) {
      const qc_status_t st = qc_error_buffer_create(nullptr, send_elems(op, n, count), &ebs[r]);
      if (st != QC_SUCCESS) fail(st);
    }
  }
  double sum = 0;
  for (int it = 0; it < total && res.ok; ++it) {
    // As run_collective: the last (checked) call starts from zero residuals.
    if (!ebs.empty() && it == total - 1) {
      for (qc_error_buffer_t eb : ebs) {
        const qc_status_t st = qc_error_buffer_reset(eb);
        if (st != QC_SUCCESS && res.ok) fail(st);
      }
      if (!res.ok) break;
    }
    const clock::time_point t0 = clock::now();
    const qc_status_t st = call_emulated(op, n, send, recv, count, opt, uint64_t(it), policy,
                                         ebs.empty() ? nullptr : ebs.data(), indices, nnz, nrows);
    const clock::time_point t1 = clock::now();
    if (st != QC_SUCCESS) {
      fail(st);
      break;
    }
    if (it >= opt.warmup) sum += std::chrono::duration<double>(t1 - t0).count();
  }
  for (qc_error_buffer_t eb : ebs) qc_error_buffer_destroy(eb);
  if (!res.ok) return res;
  res.time_us = sum / opt.iters * 1e6;
  res.wire_bytes = std::numeric_limits<double>::quiet_NaN();
  return res;
}

}  // namespace qcperf
