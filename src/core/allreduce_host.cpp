#include "core/allreduce_host.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/call_stats.h"
#include "core/dtype.h"
#include "core/error_buffer.h"
#include "core/executors/input_norm.h"
#include "core/planner.h"
#include "core/policy.h"
#include "core/residual_binding.h"
#include "cpu/cache_size.h"
#include "cpu/dtype_convert.h"

namespace qc {

void finish_allreduce(float* work, size_t count, qc_dtype_t dtype, qc_reduce_op_t op, int n,
                      void* recvbuf) {
  if (op == QC_OP_AVG) {
    const float scale = 1.0f / static_cast<float>(n);
    if (dtype == QC_DTYPE_FLOAT32) {
      // The division and the copy out in one pass.
      float* out = static_cast<float*>(recvbuf);
      for (size_t i = 0; i < count; ++i) out[i] = work[i] * scale;
      return;
    }
    for (size_t i = 0; i < count; ++i) work[i] *= scale;
  }
  cpu::from_float32(work, dtype, recvbuf, count);
}

Status allreduce_on_host(Communicator* comm, const void* sendbuf, void* recvbuf, size_t count,
                         qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                         ErrorBuffer* error_buffer, const std::string* staged_why) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  AllreducePlan plan;
  const qc_policy_t resolved = comm->policies.resolve(layer);
  QC_RETURN_IF_ERROR(plan_allreduce(resolved, *comm->transport, count, dtype, &plan));
  comm->plan_log.allreduce_planned(layer, resolved, plan, count * dtype_size(dtype),
                                   comm->transport->size());
  const qc_policy_t& policy = plan.policy;
  std::unique_ptr<Codec>& codec = plan.codec;
  const qc_algorithm_t algorithm = plan.algorithm;
  const bool native_float = plan.native_float;
  const int n = comm->transport->size();
  GlobalCodec* global = nullptr;
  if (algorithm == QC_ALGO_NATIVE && !native_float) {
    global = dynamic_cast<GlobalCodec*>(codec.get());
    if (global == nullptr) {
      return unsupported(std::string("algorithm 'native' sums integer codes on one grid shared "
                                     "by all ranks; it needs codec none, global_linear or "
                                     "global_exp, not '") + codec_name(policy.codec) + "'");
    }
  }
  const bool feedback = policy.error_feedback != 0 && error_buffer != nullptr;
  ExecutorChoice executor = host_allreduce_executor(plan, dtype, feedback);
  if (staged_why != nullptr) executor.why = *staged_why + "; " + executor.why;
  log_call_plan("allreduce", layer, count, dtype, algorithm, &policy, executor);
  std::vector<float>& residual = comm->residual_work;
  const ErrorBufferGrid grid = allreduce_grid(policy, algorithm);
  // The step algorithms' encodes load the residuals as they go (every slot
  // through CollectiveContext::residual_slots); native reads them at once.
  const float* committed = nullptr;
  if (feedback) {
    QC_RETURN_IF_ERROR(load_residuals(comm, *error_buffer, grid, count, layer_label(layer),
                                      is_step_algorithm(algorithm) ? &committed : nullptr));
  }

  const uint64_t signature = call_signature(CollectiveKind::kAllreduce, count, dtype, op, layer,
                                            policy, algorithm);
  if (native_float && dtype == QC_DTYPE_FLOAT32 && !feedback) {
    // No staging: the transport sums the caller's buffers directly.
    float* out = static_cast<float*>(recvbuf);
    const auto layers = one_layer(
        layer, count, count * 4,
        input_norm_for_stats(*comm, static_cast<const float*>(sendbuf), count));
    QC_RETURN_IF_ERROR(run_collective(comm, *codec, signature, count * 4, layers,
                                      [&](CollectiveContext& ctx) {
      return ctx.native_allreduce_float(static_cast<const float*>(sendbuf), out, count);
    }));
    if (op == QC_OP_AVG) {
      const float scale = 1.0f / static_cast<float>(n);
      for (size_t i = 0; i < count; ++i) out[i] *= scale;
    }
    return Status::ok();
  }

  // The float32 values the algorithm reduces in: comm->work, or the
  // caller's recvbuf for an emulation (when it does not overlap the input).
  const char* send_bytes = static_cast<const char*>(sendbuf);
  const char* recv_bytes = static_cast<const char*>(recvbuf);
  const bool in_recvbuf = comm->emulated && dtype == QC_DTYPE_FLOAT32 &&
                          (recv_bytes + count * 4 <= send_bytes ||
                           send_bytes + count * 4 <= recv_bytes);
  std::vector<float>& work_storage = comm->work;
  if (!in_recvbuf) work_storage.resize(count);
  float* const work = in_recvbuf ? static_cast<float*>(recvbuf) : work_storage.data();
  // SRA, the ring and the global codecs' native algorithm read their input
  // without writing it anywhere but their own result, so float32 input is
  // read where it is (one copy pass fewer). The others reduce in place, on a
  // float32 copy made here. The result goes to `work`
  // either way and reaches recvbuf only when the call succeeds: a failed
  // call leaves recvbuf as it was (docs/reliability.md), which a result
  // decoded piece by piece straight into recvbuf would not.
  const bool read_in_place =
      dtype == QC_DTYPE_FLOAT32 &&
      (reads_input_in_place(algorithm) || (algorithm == QC_ALGO_NATIVE && !native_float));
  const float* input = read_in_place ? static_cast<const float*>(sendbuf) : work;
  if (!read_in_place) cpu::to_float32(sendbuf, dtype, work, count);
  // Such float32 input is the caller's, which nothing writes during the
  // call: its norm is summed while the call waits for transfers
  // (input_norm.h). The others reduce in `input` itself: measured first.
  // An emulated rank's statistics are never read: no norm (0).
  InputNorm input_norm(input, comm->emulated ? 0 : count);
  const bool norm_while_waiting = read_in_place;
  auto layers = one_layer(layer, count, count * dtype_size(dtype),
                          norm_while_waiting ? 0.0 : input_norm.finish());
  bool refresh = true;
  ScaleMemory* scales = scale_memory_for(comm->scale_memory, CollectiveKind::kAllreduce, layer,
                                         signature, policy, &refresh);
  auto run_algorithm = [&](CollectiveContext& ctx) -> Status {
    ctx.set_seed(policy.seed);
    // An emulation writes all its ranks' results in this process.
    const size_t ranks_here = comm->emulated ? static_cast<size_t>(n) : 1;
    ctx.set_output_outgrows_cache(cpu::outgrows_cache(count * sizeof(float) * ranks_here));
    if (feedback) ctx.set_residual(residual.data(), count);
    if (committed != nullptr) ctx.set_residual_source(committed);
    if (scales != nullptr) ctx.set_scale_memory(scales, refresh);
    if (is_step_algorithm(algorithm)) {
      QC_RETURN_IF_ERROR(
          run_allreduce(ctx, algorithm, input, work, count, policy.group_size));
      ctx.load_untouched_residuals();
      return Status::ok();
    }
    if (algorithm != QC_ALGO_NATIVE) return internal_error("no algorithm selected");
    if (native_float) {
      // Codec none has no error; a residual left by an earlier grid was
      // reset above, so only a loaded image can bring one here.
      if (feedback) {
        for (size_t i = 0; i < count; ++i) work[i] += residual[i];
        std::fill(residual.begin(), residual.end(), 0.0f);
      }
      return ctx.native_allreduce_float(work, work, count);
    }
    return allreduce_native(ctx, *global, input, work,
                            feedback ? residual.data() : nullptr, count, policy.bits, scales,
                            refresh);
  };
  Status status = run_collective(comm, *codec, with_refresh(signature, scales, refresh),
                                 count * dtype_size(dtype), layers,
                                 [&](CollectiveContext& ctx) -> Status {
    if (norm_while_waiting) ctx.set_input_norm(&input_norm);
    Status s = run_algorithm(ctx);
    // Booked after this returns, failed or not.
    if (norm_while_waiting) layers[0].sq_norm = input_norm.finish();
    return s;
  });
  QC_RETURN_IF_ERROR(status);
  if (scales != nullptr) scales->calls += 1;
  if (feedback) commit_residuals(comm, error_buffer, grid);
  finish_allreduce(work, count, dtype, op, n, recvbuf);
  return Status::ok();
}

Status comm_allreduce(Communicator* comm, const void* sendbuf, void* recvbuf, size_t count,
                      qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                      ErrorBuffer* error_buffer) {
  return allreduce_on_host(comm, sendbuf, recvbuf, count, dtype, op, layer, error_buffer,
                           /*staged_why=*/nullptr);
}

Status comm_allreduce_exact(Communicator* comm, float* values, size_t count, uint64_t signature) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  qc_policy_t none = default_policy();
  none.min_compress_bytes = 0;
  std::unique_ptr<Codec> codec;
  QC_RETURN_IF_ERROR(make_codec(none, QC_DTYPE_FLOAT32, &codec));
  return run_collective(comm, *codec, signature, count * 4, {}, [&](CollectiveContext& ctx) {
    return run_allreduce(ctx, QC_ALGO_RING, values, count, /*group_size=*/1);
  });
}

}  // namespace qc
