// The drivers of reduce-scatter, allgather and broadcast: one schedule each
// (planner.h: plan_scheduled), run by the host executor on float32 working
// copies, with error feedback where values are encoded. Device buffers are
// staged through host memory (host_staging.h).
#include <string>
#include <vector>

#include "core/allreduce_host.h"
#include "core/call_stats.h"
#include "core/communicator.h"
#include "core/dtype.h"
#include "core/error_buffer.h"
#include "core/executors/host_executor.h"
#include "core/host_staging.h"
#include "core/planner.h"
#include "core/residual_binding.h"
#include "cpu/dtype_convert.h"

namespace qc {
namespace {

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kBroadcast: return "broadcast";
    default: return "collective";
  }
}

// One call's shape: `block` values per message (reduce-scatter's recvcount,
// allgather's sendcount, broadcast's count), `in` values read from sendbuf,
// `out` written to recvbuf.
struct ScheduledCall {
  CollectiveKind kind;
  size_t block = 0;
  size_t in = 0;
  size_t out = 0;
  qc_reduce_op_t op = QC_OP_SUM;  // reduce-scatter
  int root = 0;                   // broadcast
};

ScheduledCall call_shape(CollectiveKind kind, int ranks, int rank, size_t block,
                         qc_reduce_op_t op, int root) {
  const size_t n = static_cast<size_t>(ranks);
  ScheduledCall c{kind, block, block, block, op, root};
  if (kind == CollectiveKind::kReduceScatter) c.in = block * n;
  if (kind == CollectiveKind::kAllgather) c.out = block * n;
  if (kind == CollectiveKind::kBroadcast && rank != root) c.in = 0;
  return c;
}

Status run_scheduled(Communicator* comm, const ScheduledCall& call, const void* sendbuf,
                     void* recvbuf, qc_dtype_t dtype, const char* layer,
                     ErrorBuffer* error_buffer) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  const int n = comm->transport->size();
  const char* name = collective_name(call.kind);
  ScheduledPlan plan;
  const qc_policy_t resolved = comm->policies.resolve(layer);
  const int op_or_root = call.kind == CollectiveKind::kBroadcast ? call.root : call.op;
  QC_RETURN_IF_ERROR(
      plan_scheduled(call.kind, resolved, n, call.block, dtype, op_or_root, layer, &plan));
  comm->plan_log.layer_used(name, layer, resolved, plan.policy, call.block * dtype_size(dtype));
  const qc_policy_t& policy = plan.policy;
  ExecutorChoice executor;
  executor.why = std::string("schedule ") + plan.schedule + " (" + plan.why +
                 "); the codec runs on the CPU";
  log_call_plan(name, layer, call.block, dtype, QC_ALGO_AUTO, &policy, executor);

  // Residuals: one per element this rank may encode (the input's).
  const bool feedback = policy.error_feedback != 0 && error_buffer != nullptr &&
                        call.kind != CollectiveKind::kBroadcast;
  const ErrorBufferGrid grid = scheduled_grid(call.kind, plan);
  std::vector<float>& residual = comm->residual_work;
  if (feedback) {
    QC_RETURN_IF_ERROR(load_residuals(comm, *error_buffer, grid, call.in, layer_label(layer)));
  }

  // float32 input is read where it is; 16-bit is widened into `work`. The
  // result goes to `work_out` and reaches recvbuf only when the call
  // succeeds (a failed call leaves recvbuf as it was).
  std::vector<float>& work = comm->work;
  std::vector<float>& result = comm->work_out;
  const float* input = static_cast<const float*>(sendbuf);
  if (dtype != QC_DTYPE_FLOAT32 && call.in > 0) {
    work.resize(call.in);
    cpu::to_float32(sendbuf, dtype, work.data(), call.in);
    input = work.data();
  }
  result.resize(call.out);
  // A broadcast counts its message on every rank; the others their input.
  const size_t counted = call.kind == CollectiveKind::kBroadcast ? call.block : call.in;
  const size_t logical_bytes = counted * dtype_size(dtype);
  const auto layers = one_layer(layer, counted, logical_bytes,
                                call.in > 0 ? input_norm_for_stats(*comm, input, call.in) : 0.0);
  bool refresh = true;
  ScaleMemory* scales =
      scale_memory_for(comm->scale_memory, call.kind, layer, plan.signature, policy, &refresh);
  const Status status = run_collective(
      comm, *plan.codec, with_refresh(plan.signature, scales, refresh),
      logical_bytes, layers, [&](CollectiveContext& ctx) {
        ctx.set_seed(policy.seed);
        if (feedback) ctx.set_residual(residual.data(), call.in);
        if (scales != nullptr) ctx.set_scale_memory(scales, refresh);
        ScheduleShape shape;
        shape.ranks = n;
        shape.rank = ctx.rank();
        shape.count = call.block;
        shape.root = call.root;
        shape.chunk = plan.pipelined ? ctx.pipeline_chunk(call.block) : 0;
        // Which peers a rank talks to depends on the root and the policy's
        // schedule: ranks that disagree on them would wait for messages
        // that never come, so the call starts by agreeing on its signature
        // (one small round), and a disagreement is MISMATCH on every rank.
        if (n > 1) QC_RETURN_IF_ERROR(ctx.agree_by_messages());
        Schedule schedule;
        plan.build(shape, &schedule);
        return run_on_host(ctx, schedule, input, result.data());
      });
  QC_RETURN_IF_ERROR(status);
  if (scales != nullptr) scales->calls += 1;
  if (feedback) commit_residuals(comm, error_buffer, grid);
  // AVG's scaling and the copy out in one pass (the allreduce's finish).
  finish_allreduce(result.data(), call.out, dtype, call.op, n, recvbuf);
  return Status::ok();
}

// Host buffers run directly; device buffers on host copies (staged whole).
Status run_placed(Communicator* comm, const DeviceMemory* mem, void* stream,
                  const ScheduledCall& call, const void* sendbuf, void* recvbuf,
                  qc_dtype_t dtype, const char* layer, ErrorBuffer* error_buffer) {
  const size_t size = dtype_size(dtype);
  return run_on_placed_buffers(
      comm, mem, stream, sendbuf, call.in * size, recvbuf, call.out * size,
      [&](const void* send, void* recv) {
        return run_scheduled(comm, call, send, recv, dtype, layer, error_buffer);
      });
}

}  // namespace

Status comm_reduce_scatter(Communicator* comm, const DeviceMemory* mem, void* stream,
                           const void* sendbuf, void* recvbuf, size_t recvcount,
                           qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                           ErrorBuffer* error_buffer) {
  const ScheduledCall call =
      call_shape(CollectiveKind::kReduceScatter, comm->transport->size(),
                 comm->transport->rank(), recvcount, op, 0);
  return run_placed(comm, mem, stream, call, sendbuf, recvbuf, dtype, layer, error_buffer);
}

Status comm_allgather(Communicator* comm, const DeviceMemory* mem, void* stream,
                      const void* sendbuf, void* recvbuf, size_t sendcount, qc_dtype_t dtype,
                      const char* layer, ErrorBuffer* error_buffer) {
  const ScheduledCall call =
      call_shape(CollectiveKind::kAllgather, comm->transport->size(), comm->transport->rank(),
                 sendcount, QC_OP_SUM, 0);
  return run_placed(comm, mem, stream, call, sendbuf, recvbuf, dtype, layer, error_buffer);
}

Status comm_broadcast(Communicator* comm, const DeviceMemory* mem, void* stream,
                      const void* sendbuf, void* recvbuf, size_t count, qc_dtype_t dtype,
                      int root, const char* layer) {
  const ScheduledCall call =
      call_shape(CollectiveKind::kBroadcast, comm->transport->size(), comm->transport->rank(),
                 count, QC_OP_SUM, root);
  return run_placed(comm, mem, stream, call, sendbuf, recvbuf, dtype, layer, nullptr);
}

}  // namespace qc
