#include "core/communicator.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/collective_context.h"
#include "core/dtype.h"
#include "core/error_buffer.h"
#include "core/policy.h"
#include "core/transports/local_transport.h"
#include "cpu/dtype_convert.h"

namespace qc {
namespace {

enum class CollectiveKind : uint8_t { kAllreduce = 1, kAlltoall = 2 };

// What every rank must agree on for one call, hashed into the envelope.
uint64_t call_signature(CollectiveKind kind, size_t count, qc_dtype_t dtype, int op,
                        const char* layer, const qc_policy_t& p, qc_algorithm_t algorithm) {
  struct {
    uint64_t count;
    int32_t kind, dtype, op, codec, bits, bucket, rounding, algorithm, ef, group, period;
    float topk;
    uint64_t seed;
  } fields{};
  fields.count = count;
  fields.kind = static_cast<int32_t>(kind);
  fields.dtype = dtype;
  fields.op = op;
  fields.codec = p.codec;
  fields.bits = p.bits;
  fields.bucket = p.bucket_size;
  fields.rounding = p.rounding;
  fields.algorithm = algorithm;
  fields.ef = p.error_feedback;
  fields.group = p.group_size;
  fields.period = p.scale_update_period;
  fields.topk = p.topk_ratio;
  fields.seed = p.seed;
  uint64_t h = fnv1a64(&fields, sizeof fields);
  const std::string name = layer != nullptr ? layer : "*";
  return fnv1a64(name.data(), name.size(), h);
}

Status broken_status(const Status& cause) {
  return Status(cause.code(), "the communicator is broken by an earlier failure (" +
                                  cause.message() +
                                  "); destroy it and create a new one");
}

// Runs one call's algorithm, then books the counters and, on failure, breaks
// the group so that no peer waits for this rank until its timeout.
template <typename Run>
Status run_collective(qc_comm_s* comm, const Codec& codec, uint64_t signature,
                      uint64_t logical_bytes, Run&& run) {
  const uint64_t sequence = comm->next_sequence++;
  const Deadline deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(comm->timeout_seconds));
  CollectiveContext ctx(*comm->transport, codec, comm->scratch, sequence, signature, deadline);
  Status status = run(ctx);
  if (!status) comm->transport->abort(status);
  std::lock_guard<std::mutex> lock(comm->stats_mutex);
  comm->stats.calls += 1;
  comm->stats.logical_bytes += logical_bytes;
  comm->stats.wire_bytes += ctx.counters().wire_bytes;
  comm->stats.codec_seconds += ctx.counters().codec_seconds;
  comm->stats.transport_seconds += ctx.counters().transport_seconds;
  return status;
}

Status check_healthy(const qc_comm_s* comm) {
  Status failure = comm->transport->failure();
  return failure ? Status::ok() : broken_status(failure);
}

}  // namespace

Status comm_allreduce(qc_comm_s* comm, const void* sendbuf, void* recvbuf, size_t count,
                      qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                      qc_error_buffer_s* error_buffer) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  const qc_policy_t policy = comm->policies.resolve(layer);
  std::unique_ptr<Codec> codec;
  QC_RETURN_IF_ERROR(make_codec(policy, dtype, &codec));
  const int n = comm->transport->size();
  const qc_algorithm_t algorithm =
      select_allreduce_algorithm(policy.algorithm, n, count * dtype_size(dtype));
  if (algorithm == QC_ALGO_NATIVE) {
    return unsupported("algorithm 'native' sums integer codes and needs a global codec "
                       "(global_linear or global_exp), which this build does not have");
  }
  const bool feedback = policy.error_feedback != 0 && error_buffer != nullptr;
  if (feedback && !codec->is_lossless()) {
    return unsupported(std::string("error feedback with codec '") + codec_name(policy.codec) +
                       "' is not implemented in this build of qc");
  }

  std::vector<float>& work = comm->work;
  work.resize(count);
  cpu::to_float32(sendbuf, dtype, work.data(), count);
  if (feedback) {
    // With a lossless codec the compensated input z = t + e goes out
    // exactly, so the whole residual is sent now and e becomes 0 (below,
    // once the call has succeeded: a failed call keeps the residual).
    for (size_t i = 0; i < count; ++i) work[i] += error_buffer->residual[i];
  }

  const uint64_t signature = call_signature(CollectiveKind::kAllreduce, count, dtype, op, layer,
                                            policy, algorithm);
  Status status = run_collective(comm, *codec, signature, count * dtype_size(dtype),
                                 [&](CollectiveContext& ctx) -> Status {
    switch (algorithm) {
      case QC_ALGO_RING: return allreduce_ring(ctx, work.data(), count);
      case QC_ALGO_RECURSIVE_DOUBLING:
        return allreduce_recursive_doubling(ctx, work.data(), count, policy.group_size);
      case QC_ALGO_SRA: return allreduce_sra(ctx, work.data(), count);
      case QC_ALGO_TREE: return allreduce_tree(ctx, work.data(), count);
      default: return internal_error("no algorithm selected");
    }
  });
  QC_RETURN_IF_ERROR(status);
  if (feedback) std::fill(error_buffer->residual.begin(), error_buffer->residual.end(), 0.0f);

  if (op == QC_OP_AVG) {
    const float scale = 1.0f / static_cast<float>(n);
    for (size_t i = 0; i < count; ++i) work[i] *= scale;
  }
  cpu::from_float32(work.data(), dtype, recvbuf, count);
  return Status::ok();
}

Status comm_alltoall(qc_comm_s* comm, const void* sendbuf, void* recvbuf, size_t count_per_rank,
                     qc_dtype_t dtype, const char* layer) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  const qc_policy_t policy = comm->policies.resolve(layer);
  std::unique_ptr<Codec> codec;
  QC_RETURN_IF_ERROR(make_codec(policy, dtype, &codec));
  const int n = comm->transport->size();
  const size_t total = count_per_rank * static_cast<size_t>(n);
  std::vector<float>& send = comm->work;
  std::vector<float>& recv = comm->work_out;
  send.resize(total);
  recv.resize(total);
  cpu::to_float32(sendbuf, dtype, send.data(), total);
  // The algorithm field does not apply to alltoall, so it is left out of
  // the signature: ranks may differ there without harm.
  const uint64_t signature = call_signature(CollectiveKind::kAlltoall, count_per_rank, dtype, 0,
                                            layer, policy, QC_ALGO_AUTO);
  QC_RETURN_IF_ERROR(run_collective(comm, *codec, signature, total * dtype_size(dtype),
                                    [&](CollectiveContext& ctx) {
    return alltoall_pairwise(ctx, send.data(), recv.data(), count_per_rank);
  }));
  cpu::from_float32(recv.data(), dtype, recvbuf, total);
  return Status::ok();
}

Status create_local_group(int nranks, double timeout_seconds, qc_comm_t* comms) {
  auto group = std::make_shared<LocalGroup>(nranks);
  std::vector<std::unique_ptr<qc_comm_s>> made;
  made.reserve(nranks);
  for (int r = 0; r < nranks; ++r) {
    auto comm = std::make_unique<qc_comm_s>();
    comm->transport = std::make_unique<LocalTransport>(group, r);
    comm->timeout_seconds = timeout_seconds;
    comm->stats.struct_size = sizeof(qc_stats_t);
    made.push_back(std::move(comm));
  }
  for (int r = 0; r < nranks; ++r) comms[r] = made[r].release();
  return Status::ok();
}

}  // namespace qc
