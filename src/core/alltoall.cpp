// The alltoall drivers (paper 000 §3.3): host buffers, device buffers with
// the codec on the device, and the placement dispatch of qc_alltoall.
#include <limits>
#include <string>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/call_stats.h"
#include "core/communicator.h"
#include "core/device_call.h"
#include "core/device_staging.h"
#include "core/dtype.h"
#include "core/host_staging.h"
#include "core/planner.h"
#include "cpu/dtype_convert.h"

namespace qc {
namespace {

// comm_alltoall, told by `staged_why` (nullptr for host buffers) why the
// buffers it runs on are host copies of device buffers, for its debug line.
Status alltoall_on_host(Communicator* comm, const void* sendbuf, void* recvbuf,
                        size_t count_per_rank, qc_dtype_t dtype, const char* layer,
                        const std::string* staged_why) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  AlltoallPlan plan;
  const qc_policy_t resolved = comm->policies.resolve(layer);
  QC_RETURN_IF_ERROR(plan_alltoall(resolved, count_per_rank, dtype, layer, &plan));
  comm->plan_log.layer_used("alltoall", layer, resolved, plan.policy,
                            count_per_rank * dtype_size(dtype));
  const qc_policy_t& policy = plan.policy;
  ExecutorChoice executor = host_alltoall_executor();
  if (staged_why != nullptr) executor.why = *staged_why + "; " + executor.why;
  log_call_plan("alltoall", layer, count_per_rank, dtype, QC_ALGO_AUTO, &policy, executor);
  const uint64_t signature = plan.signature;
  const int n = comm->transport->size();
  const size_t total = count_per_rank * static_cast<size_t>(n);
  std::vector<float>& send = comm->work;
  std::vector<float>& recv = comm->work_out;
  send.resize(total);
  recv.resize(total);
  cpu::to_float32(sendbuf, dtype, send.data(), total);
  const auto layers = one_layer(layer, total, total * dtype_size(dtype),
                                input_norm_for_stats(*comm, send.data(), total));
  bool refresh = true;
  ScaleMemory* scales = scale_memory_for(comm->scale_memory, CollectiveKind::kAlltoall, layer,
                                         signature, policy, &refresh);
  QC_RETURN_IF_ERROR(run_collective(comm, *plan.codec, with_refresh(signature, scales, refresh),
                                    total * dtype_size(dtype), layers,
                                    [&](CollectiveContext& ctx) {
    ctx.set_seed(policy.seed);
    if (scales != nullptr) ctx.set_scale_memory(scales, refresh);
    return alltoall_pairwise(ctx, send.data(), recv.data(), count_per_rank);
  }));
  if (scales != nullptr) scales->calls += 1;
  cpu::from_float32(recv.data(), dtype, recvbuf, total);
  return Status::ok();
}

}  // namespace

Status comm_alltoall(Communicator* comm, const void* sendbuf, void* recvbuf, size_t count_per_rank,
                     qc_dtype_t dtype, const char* layer) {
  return alltoall_on_host(comm, sendbuf, recvbuf, count_per_rank, dtype, layer,
                          /*staged_why=*/nullptr);
}

Status comm_alltoall_on_device(Communicator* comm, const DeviceMemory& mem,
                               const DeviceMessageCodec& device_codec, const void* sendbuf,
                               void* recvbuf, size_t count_per_rank, qc_dtype_t dtype,
                               const char* layer, void* stream, bool* ran,
                               std::string* staged_why) {
  *ran = false;
  QC_RETURN_IF_ERROR(check_healthy(comm));
  AlltoallPlan plan;
  const qc_policy_t resolved = comm->policies.resolve(layer);
  QC_RETURN_IF_ERROR(plan_alltoall(resolved, count_per_rank, dtype, layer, &plan));
  comm->plan_log.layer_used("alltoall", layer, resolved, plan.policy,
                            count_per_rank * dtype_size(dtype));
  const Codec& codec = *plan.codec;
  WireHeader header;
  const ExecutorChoice executor = device_alltoall_executor(
      plan, *comm->transport, count_per_rank, /*device_codec=*/true, &header);
  if (executor.kind == ExecutorKind::kHost) {  // the caller stages the buffers whole
    if (staged_why != nullptr) *staged_why = executor.why;
    return Status::ok();
  }
  *ran = true;
  log_call_plan("alltoall", layer, count_per_rank, dtype, QC_ALGO_AUTO, &plan.policy, executor);
  const int n = comm->transport->size();
  const size_t total = count_per_rank * static_cast<size_t>(n);
  const size_t logical_bytes = total * dtype_size(dtype);
  // 16-bit data runs on float32 copies, as on the host (comm->work).
  const bool widened = dtype != QC_DTYPE_FLOAT32;
  const bool enqueued = executor.kind == ExecutorKind::kStreamOrdered;
  // The same signature as the host path when the same messages travel, so
  // ranks on device and host memory may meet in one call; the enqueued
  // protocol has none. The layer's norm is measured on the device, inside
  // a staged call (run_collective records layers[0] after it returns); an
  // enqueued one has none (it would wait).
  std::vector<LayerShare> layers =
      one_layer(layer, total, logical_bytes, std::numeric_limits<double>::quiet_NaN());
  const uint64_t signature = plan.signature ^ (enqueued ? kEnqueuedOnDevice : 0);
  return run_collective(comm, codec, signature, logical_bytes, layers,
                        [&](CollectiveContext& ctx) -> Status {
    // This rank's own preparation first: on an enqueued call a rank that
    // fails here says so in the agreement, so that none enqueues a group
    // its peers would wait for on the device.
    Status s = comm->staging.pending().order_before(stream);
    const float* send = static_cast<const float*>(sendbuf);
    float* recv = static_cast<float*>(recvbuf);
    float* widened_send = nullptr;  // the float32 copy of 16-bit input
    if (s && widened) {
      s = comm->staging.reserve_device_floats(mem, 2 * total, &widened_send);
      send = widened_send;
      recv = widened_send + total;
    }
    DeviceValues values;
    if (s && enqueued) {
      size_t bytes = 0;
      s = alltoall_enqueued_payload_bytes(header.payload_bytes, n, &bytes);
      if (s) {
        s = reserve_device_payloads(bytes, mem, device_codec, comm->staging, stream, &values);
      }
    }
    if (!s) s = ctx.device_failure("prepare its device memory", s);
    QC_RETURN_IF_ERROR(conclude_preparation(ctx, enqueued, sendbuf, recvbuf, s));
    // From here on work is on the stream: unless the call waits for it at
    // the end, the next user of the memory must.
    bool settled = false;
    const PendingOnExit pending(comm->staging.pending(), mem, stream, comm->timeout_seconds,
                                settled);
    ctx.set_seed(plan.policy.seed);
    if (widened) s = device_codec.widen(sendbuf, dtype, widened_send, total, stream);
    if (!s) return ctx.device_failure("prepare its device values", s);
    if (enqueued) {
      ctx.set_device_values(values);
      QC_RETURN_IF_ERROR(alltoall_enqueued(ctx, send, recv, count_per_rank));
    } else {
      QC_RETURN_IF_ERROR(alltoall_with_device_codec(ctx, codec, header, mem, device_codec,
                                                    comm->staging, send, recv, count_per_rank,
                                                    stream, &layers[0].sq_norm));
      settled = !widened;  // it waited for the stream before returning
    }
    if (widened) s = device_codec.narrow(recv, dtype, recvbuf, total, stream);
    if (s && widened && !enqueued) {
      s = device_codec.synchronize(stream);
      settled = s.is_ok();
    }
    return s ? s : ctx.device_failure("finish its device values", s);
  });
}

Status alltoall_placed(Communicator* comm, const DeviceMemory* mem,
                       const DeviceMessageCodec* device_codec, void* stream, const void* sendbuf,
                       void* recvbuf, size_t count_per_rank, qc_dtype_t dtype, const char* layer) {
  if (!comm->device_codec) device_codec = nullptr;  // QC_DEVICE_CODEC=0
  const size_t bytes =
      count_per_rank * dtype_size(dtype) * static_cast<size_t>(comm->transport->size());
  std::string staged_why;  // set when device buffers are staged whole
  const DeviceCollective on_device = [&](const void* send, void* recv, void* on_stream,
                                         bool* ran) {
    if (mem == nullptr || device_codec == nullptr) {
      *ran = false;
      staged_why = kStagedWithoutDeviceCodec;
      return Status::ok();
    }
    return comm_alltoall_on_device(comm, *mem, *device_codec, send, recv, count_per_rank, dtype,
                                   layer, on_stream, ran, &staged_why);
  };
  return run_on_placed_buffers(
      comm, mem, stream, sendbuf, bytes, recvbuf, bytes,
      [&](const void* send, void* recv) {
        return alltoall_on_host(comm, send, recv, count_per_rank, dtype, layer,
                                staged_why.empty() ? nullptr : &staged_why);
      },
      on_device);
}

}  // namespace qc
