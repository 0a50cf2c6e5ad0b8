// The allreduce of device buffers (comm_allreduce_on_device): the
// transport's own float sum enqueued on the caller's stream, or the
// algorithm on device values with the codec on the device (staged payloads,
// or stream-ordered on a transport with device groups), as the planner
// chooses; and allreduce_placed, the dispatch of qc_allreduce by placement.
#include <limits>
#include <string>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/allreduce_host.h"
#include "core/call_stats.h"
#include "core/communicator.h"
#include "core/device_call.h"
#include "core/device_staging.h"
#include "core/dtype.h"
#include "core/error_buffer.h"
#include "core/host_staging.h"
#include "core/planner.h"
#include "core/residual_binding.h"

namespace qc {
namespace {

// The uncompressed sum of float32 device buffers enqueued on the caller's
// stream (NCCL): no staging, no wait.
Status enqueue_allreduce_on_device(Communicator* comm, const DeviceMemory* mem,
                                   const AllreducePlan& plan, const void* sendbuf, void* recvbuf,
                                   size_t count, qc_reduce_op_t op, const char* layer,
                                   void* stream) {
  const uint64_t signature = call_signature(CollectiveKind::kAllreduce, count, QC_DTYPE_FLOAT32,
                                            op, layer, plan.policy, plan.algorithm) ^
                             kEnqueuedOnDevice;
  const double unknown_norm = std::numeric_limits<double>::quiet_NaN();
  return run_collective(comm, *plan.codec, signature, count * 4,
                        one_layer(layer, count, count * 4, unknown_norm),
                        [&](CollectiveContext& ctx) {
    // After qc's earlier work, which may be on another stream: the pending
    // event this call records then covers that work too, and the next user
    // of qc's memory (a call, a growth, the destroy) waits for all of it.
    const Status ordered =
        mem != nullptr ? comm->staging.pending().order_before(stream) : Status::ok();
    QC_RETURN_IF_ERROR(ctx.enqueue_device_allreduce_float(
        static_cast<const float*>(sendbuf), static_cast<float*>(recvbuf), count, op == QC_OP_AVG,
        stream, ordered ? ordered : ctx.device_failure("order its call after qc's earlier work",
                                                       ordered)));
    // It uses none of qc's memory, but the destroy must not hang on it if a
    // peer never joins (Communicator's destructor waits with a timeout).
    return mem != nullptr ? comm->staging.pending().enqueued(*mem, stream, comm->timeout_seconds)
                          : Status::ok();
  });
}

// The host path's algorithm on the device values themselves, the codec on
// the device and only payloads staged (device_staging.h); returns once
// recvbuf holds the result. With `error_buffer`, the residuals are device
// memory too, kept there between calls.
//
// `enqueued`: the algorithm stream-ordered instead (allreduce_enqueued, on
// a transport with device groups: NCCL), the whole call enqueued on `stream`
// after the ranks' agreement; it returns without waiting, and the work it
// left behind is recorded where qc's memory is (the staging, the residuals)
// so the next user of that memory waits for it.
Status allreduce_with_device_codec(Communicator* comm, const DeviceMemory& mem,
                                   const DeviceMessageCodec& device_codec,
                                   const AllreducePlan& plan, bool enqueued, const void* sendbuf,
                                   void* recvbuf, size_t count, qc_dtype_t dtype,
                                   qc_reduce_op_t op, const char* layer,
                                   ErrorBuffer* error_buffer, void* stream) {
  const qc_policy_t& policy = plan.policy;
  const int n = comm->transport->size();
  const qc_algorithm_t algorithm = plan.algorithm;
  // 16-bit data runs on a float32 copy, as on the host (comm->work).
  const bool widened = dtype != QC_DTYPE_FLOAT32;
  const size_t logical_bytes = count * dtype_size(dtype);
  // The host path's signature: the same messages travel, so ranks on device
  // and host memory may meet in one call. The layer's norm is measured on
  // the device (the input is never read on the host); its error estimate is
  // not. An enqueued call has another protocol (no envelopes) and no norm
  // (reading it would wait for the stream).
  const uint64_t signature =
      call_signature(CollectiveKind::kAllreduce, count, dtype, op, layer, policy, algorithm) ^
      (enqueued ? kEnqueuedOnDevice : 0);
  float* data = widened ? nullptr : static_cast<float*>(recvbuf);
  const ErrorBufferGrid grid = allreduce_grid(policy, algorithm);
  std::vector<LayerShare> layers =
      one_layer(layer, count, logical_bytes, std::numeric_limits<double>::quiet_NaN());
  // Set once the residuals' device blocks hold this call's working copy.
  bool residuals_bound = false;
  Status status = run_collective(comm, *plan.codec, signature, logical_bytes, layers,
                                 [&](CollectiveContext& ctx) -> Status {
    // This rank's own preparation comes first: on an enqueued call a rank
    // that fails here says so in the agreement, so every rank fails it and
    // none enqueues a group its peers would wait for on the device.
    size_t payload_area = 0;  // the largest message's
    Status s = enqueued ? allreduce_enqueued_payload_bytes(algorithm, *plan.codec, count, n,
                                                           ctx.rank(), policy.group_size,
                                                           &payload_area)
                        : Status::ok();
    // An earlier enqueued call may still use the memory.
    if (s) s = comm->staging.pending().order_before(stream);
    DeviceValues values;
    if (s) {
      s = reserve_device_values(*plan.codec, count, n, payload_area, mem, device_codec,
                                comm->staging, stream, &values);
    }
    if (s && widened) s = comm->staging.reserve_device_floats(mem, count, &data);
    if (!s) s = ctx.device_failure("prepare its device values", s);
    float* residual = nullptr;
    if (s && error_buffer != nullptr) {
      s = device_residuals_for(comm, mem, device_codec, error_buffer, grid, count, layer, stream,
                               &residual);
      residuals_bound = s.is_ok();
    }
    QC_RETURN_IF_ERROR(conclude_preparation(ctx, enqueued, sendbuf, recvbuf, s));
    // From here on work is on the stream: unless the call waits for it at
    // the end, the next user of the memory must (PendingDeviceWork).
    bool settled = false;
    const PendingOnExit pending(comm->staging.pending(), mem, stream, comm->timeout_seconds,
                                settled);
    // The algorithms reduce in place: 16-bit data starts from its float32
    // copy, out-of-place float32 from a copy in recvbuf.
    if (widened) s = device_codec.widen(sendbuf, dtype, data, count, stream);
    // The input's norm, before the algorithm overwrites an in-place input;
    // run_collective records layers[0] after this returns.
    if (s && !enqueued) {
      s = device_codec.squared_norm(widened ? data : static_cast<const float*>(sendbuf), count,
                                    values.norm_scratch, stream, &layers[0].sq_norm);
    }
    if (s && !widened && sendbuf != recvbuf) {
      s = device_codec.copy(data, static_cast<const float*>(sendbuf), count, stream);
    }
    if (!s) return ctx.device_failure("prepare its device values", s);
    ctx.set_seed(policy.seed);
    ctx.set_device_values(values);
    if (residual != nullptr) ctx.set_residual(residual, count);
    if (enqueued) {
      s = allreduce_enqueued(ctx, algorithm, data, count, policy.group_size);
    } else {
      s = run_allreduce(ctx, algorithm, data, count, policy.group_size);
    }
    QC_RETURN_IF_ERROR(s);
    // AVG's one division at the end, as finish_allreduce does on the host.
    if (op == QC_OP_AVG) s = device_codec.scale(data, 1.0f / static_cast<float>(n), count, stream);
    if (s && widened) s = device_codec.narrow(data, dtype, recvbuf, count, stream);
    if (s && !enqueued) {
      s = device_codec.synchronize(stream);
      settled = s.is_ok();
    }
    if (!s) return ctx.device_failure("finish its device values", s);
    return s;
  });
  // The residuals' working block was written by whatever reached the
  // stream, even in a failed call: the next user of the blocks waits too.
  const bool residual_work_pending = residuals_bound && (enqueued || !status);
  if (residual_work_pending) (void)error_buffer->device.enqueued(stream, comm->timeout_seconds);
  QC_RETURN_IF_ERROR(status);
  if (error_buffer != nullptr) {
    error_buffer->device.commit();
    bind_error_buffer(comm, error_buffer, grid);
  }
  return Status::ok();
}

}  // namespace

Status comm_allreduce_on_device(Communicator* comm, const DeviceMemory* mem,
                                const DeviceMessageCodec* device_codec, const void* sendbuf,
                                void* recvbuf, size_t count, qc_dtype_t dtype, qc_reduce_op_t op,
                                const char* layer, ErrorBuffer* error_buffer, void* stream,
                                bool* ran, std::string* staged_why) {
  *ran = false;
  // NCCL's own sum takes float32 only; 16-bit data runs the codec on a
  // float32 copy (the kernels read and write float32).
  const bool enqueue = comm->transport->has_device_float_allreduce() && dtype == QC_DTYPE_FLOAT32;
  const bool codec_at_hand = mem != nullptr && device_codec != nullptr;
  if (!enqueue && !codec_at_hand) {
    if (staged_why != nullptr) *staged_why = kStagedWithoutDeviceCodec;
    return Status::ok();
  }
  QC_RETURN_IF_ERROR(check_healthy(comm));
  AllreducePlan plan;
  const qc_policy_t resolved = comm->policies.resolve(layer);
  QC_RETURN_IF_ERROR(plan_allreduce(resolved, *comm->transport, count, dtype, &plan));
  comm->plan_log.allreduce_planned(layer, resolved, plan, count * dtype_size(dtype),
                                   comm->transport->size());
  const bool feedback = plan.policy.error_feedback != 0 && error_buffer != nullptr;
  const ExecutorChoice executor =
      device_allreduce_executor(plan, *comm->transport, count, dtype, feedback, codec_at_hand);
  if (executor.kind == ExecutorKind::kHost) {  // the caller stages the buffers whole
    if (staged_why != nullptr) *staged_why = executor.why;
    return Status::ok();
  }
  *ran = true;
  log_call_plan("allreduce", layer, count, dtype, plan.algorithm, &plan.policy, executor);
  if (executor.kind == ExecutorKind::kTransportNative) {
    return enqueue_allreduce_on_device(comm, mem, plan, sendbuf, recvbuf, count, op, layer,
                                       stream);
  }
  ErrorBuffer* eb = feedback ? error_buffer : nullptr;
  return allreduce_with_device_codec(
      comm, *mem, *device_codec, plan,
      /*enqueued=*/executor.kind == ExecutorKind::kStreamOrdered, sendbuf, recvbuf, count, dtype,
      op, layer, eb, stream);
}

Status allreduce_placed(Communicator* comm, const DeviceMemory* mem,
                        const DeviceMessageCodec* device_codec, void* stream, const void* sendbuf,
                        void* recvbuf, size_t count, qc_dtype_t dtype, qc_reduce_op_t op,
                        const char* layer, ErrorBuffer* error_buffer) {
  if (!comm->device_codec) device_codec = nullptr;  // QC_DEVICE_CODEC=0
  const size_t bytes = count * dtype_size(dtype);
  std::string staged_why;  // set when device buffers are staged whole
  return run_on_placed_buffers(
      comm, mem, stream, sendbuf, bytes, recvbuf, bytes,
      [&](const void* send, void* recv) {
        return allreduce_on_host(comm, send, recv, count, dtype, op, layer, error_buffer,
                                 staged_why.empty() ? nullptr : &staged_why);
      },
      [&](const void* send, void* recv, void* on_stream, bool* ran) {
        return comm_allreduce_on_device(comm, mem, device_codec, send, recv, count, dtype, op,
                                        layer, error_buffer, on_stream, ran, &staged_why);
      });
}

}  // namespace qc
