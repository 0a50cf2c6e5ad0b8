// qc_allreduce_segments: one allreduce over a flat buffer of many layers,
// each segment under its own layer's policy (paper 004 §4.2-4.3).
#include <string>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/allreduce_host.h"
#include "core/call_stats.h"
#include "core/codecs/segmented_codec.h"
#include "core/communicator.h"
#include "core/dtype.h"
#include "core/error_buffer.h"
#include "core/log.h"
#include "core/planner.h"
#include "core/policy.h"
#include "core/residual_binding.h"
#include "cpu/dtype_convert.h"

namespace qc {

Status comm_allreduce_segments(Communicator* comm, const void* sendbuf, void* recvbuf,
                               size_t nsegments, const size_t* counts, const char* const* layers,
                               qc_dtype_t dtype, qc_reduce_op_t op,
                               ErrorBuffer* error_buffer) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  const int n = comm->transport->size();
  const size_t item = dtype_size(dtype);
  std::vector<CodecSegment> segments(nsegments);
  std::vector<LayerShare> shares(nsegments);
  std::vector<qc_policy_t> policies(nsegments);
  size_t total = 0;
  bool any_feedback = false;
  // What every rank must agree on: each segment's count, layer and policy.
  uint64_t layout = fnv1a64(&nsegments, sizeof nsegments);
  for (size_t i = 0; i < nsegments; ++i) {
    const char* name = layers != nullptr && layers[i] != nullptr ? layers[i] : "*";
    const qc_policy_t resolved = comm->policies.resolve(name);
    policies[i] = effective_policy(resolved, counts[i] * item);
    comm->plan_log.layer_used("allreduce_segments", name, resolved, policies[i], counts[i] * item);
    const qc_policy_t& p = policies[i];
    CodecSegment& seg = segments[i];
    QC_RETURN_IF_ERROR(make_codec(p, dtype, &seg.codec));
    seg.begin = total;
    seg.count = counts[i];
    seg.seed = p.seed;
    seg.feedback = p.error_feedback != 0 && error_buffer != nullptr;
    any_feedback = any_feedback || seg.feedback;
    const uint64_t sig =
        call_signature(CollectiveKind::kAllreduce, counts[i], dtype, op, name, p, QC_ALGO_AUTO);
    layout = fnv1a64(&sig, sizeof sig, layout);
    shares[i].name = name;
    shares[i].count = counts[i];
    shares[i].logical_bytes = counts[i] * item;
    total += counts[i];
  }
  // The streams run_collective gives this call's layers (it counts the
  // calls): each segment rounds with its own layer's.
  const std::vector<uint64_t> streams = next_layer_streams(*comm, shares);
  for (size_t i = 0; i < nsegments; ++i) segments[i].stream = streams[i];
  // One algorithm for the whole buffer (the planner's rule for fused calls).
  const qc_algorithm_t algorithm = fused_allreduce_algorithm(policies, n, total * item);
  const int group_size = nsegments > 0 ? policies[0].group_size : 8;
  if (log_enabled(LogLevel::kDebug)) {
    ExecutorChoice executor;
    executor.why = "a fused buffer of " + std::to_string(nsegments) +
                   " layers, the algorithm and the codecs on the CPU";
    log_call_plan("allreduce_segments", "(fused)", total, dtype, algorithm, nullptr, executor);
  }
  layout = fnv1a64(&algorithm, sizeof algorithm, layout);
  layout = fnv1a64(&group_size, sizeof group_size, layout);
  const uint64_t signature = fnv1a64("segments", 8, layout);

  const bool feedback = any_feedback;
  std::vector<float>& residual = comm->residual_work;
  // The layout hash stands in for the codec grid (error_buffer.h).
  const ErrorBufferGrid grid{algorithm, kFusedGridCodec, static_cast<int>(layout & 0x7fffffff),
                            static_cast<int>((layout >> 32) & 0x7fffffff),
                            algorithm == QC_ALGO_RECURSIVE_DOUBLING ? group_size : 0};
  // Loaded as the encodes touch them (allreduce_host.cpp does the same).
  const float* committed = nullptr;
  if (feedback) {
    QC_RETURN_IF_ERROR(load_residuals(comm, *error_buffer, grid, total,
                                      "fused call of " + std::to_string(nsegments) + " layers",
                                      &committed));
  }

  std::vector<float>& work = comm->work;
  work.resize(total);
  // SRA and the ring read float32 input where it is; the others reduce in a copy.
  const bool read_in_place = dtype == QC_DTYPE_FLOAT32 && reads_input_in_place(algorithm);
  const float* input = read_in_place ? static_cast<const float*>(sendbuf) : work.data();
  if (!read_in_place) cpu::to_float32(sendbuf, dtype, work.data(), total);
  double weights = 0;
  for (size_t i = 0; i < nsegments; ++i) {
    shares[i].sq_norm = input_norm_for_stats(*comm, input + segments[i].begin, counts[i]);
    shares[i].weight =
        counts[i] == 0 ? 0.0 : double(segments[i].codec->max_encoded_size(counts[i]));
    weights += shares[i].weight;
  }
  for (LayerShare& share : shares) share.weight = weights > 0 ? share.weight / weights : 0.0;
  const SegmentedCodec codec(std::move(segments));
  Status status = run_collective(comm, codec, signature, total * item, shares,
                                 [&](CollectiveContext& ctx) -> Status {
    if (feedback) ctx.set_residual(residual.data(), total);
    if (committed != nullptr) ctx.set_residual_source(committed);
    QC_RETURN_IF_ERROR(run_allreduce(ctx, algorithm, input, work.data(), total, group_size));
    ctx.load_untouched_residuals();
    return Status::ok();
  });
  QC_RETURN_IF_ERROR(status);
  if (feedback) commit_residuals(comm, error_buffer, grid);
  finish_allreduce(work.data(), total, dtype, op, n, recvbuf);
  return Status::ok();
}

}  // namespace qc
