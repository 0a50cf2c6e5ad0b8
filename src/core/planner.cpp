#include "core/planner.h"

#include <string>

#include "core/algorithms/algorithm.h"
#include "core/device_staging.h"
#include "core/dtype.h"
#include "core/fnv1a.h"
#include "core/log.h"
#include "core/policy.h"
#include "core/schedules/registry.h"

namespace qc {

uint64_t call_signature(CollectiveKind kind, size_t count, qc_dtype_t dtype, int op,
                        const char* layer, const qc_policy_t& p, qc_algorithm_t algorithm) {
  struct {
    uint64_t count;
    int32_t kind, dtype, op, codec, bits, bucket, rounding, algorithm, ef, group, period, scale;
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
  fields.scale = p.scale;
  fields.topk = p.topk_ratio;
  fields.seed = p.seed;
  uint64_t h = fnv1a64(&fields, sizeof fields);
  const std::string name = layer != nullptr ? layer : "*";
  return fnv1a64(name.data(), name.size(), h);
}

Status plan_allreduce(const qc_policy_t& layer_policy, const Transport& transport, size_t count,
                      qc_dtype_t dtype, AllreducePlan* plan) {
  plan->policy = effective_policy(layer_policy, count * dtype_size(dtype));
  QC_RETURN_IF_ERROR(make_codec(plan->policy, dtype, &plan->codec));
  const bool float_sum = transport.has_native_float_allreduce();
  plan->algorithm = select_allreduce_algorithm(plan->policy.algorithm, plan->policy,
                                               transport.size(), count * dtype_size(dtype),
                                               float_sum, &plan->why);
  plan->native_float = plan->algorithm == QC_ALGO_NATIVE && plan->policy.codec == QC_CODEC_NONE;
  if (plan->native_float && !float_sum) {
    return unsupported(std::string("algorithm 'native' with codec none hands the sum to the "
                                   "transport's own float allreduce, and the ") +
                       transport.name() + " transport has none; use auto or ring");
  }
  return Status::ok();
}

Status plan_alltoall(const qc_policy_t& layer_policy, size_t count_per_rank, qc_dtype_t dtype,
                     const char* layer, AlltoallPlan* plan) {
  plan->policy = effective_policy(layer_policy, count_per_rank * dtype_size(dtype));
  QC_RETURN_IF_ERROR(make_codec(plan->policy, dtype, &plan->codec));
  plan->signature = call_signature(CollectiveKind::kAlltoall, count_per_rank, dtype, 0, layer,
                                   plan->policy, QC_ALGO_AUTO);
  return Status::ok();
}

namespace {

// The schedule a reduce-scatter, allgather or broadcast runs for the
// policy's algorithm (docs/algorithms.md, "Reduce-scatter, allgather,
// broadcast").
void select_schedule(CollectiveKind kind, qc_algorithm_t requested, int ranks,
                     size_t message_bytes, ScheduledPlan* plan) {
  const std::string asked = std::string("algorithm ") + algorithm_name(requested);
  auto pick = [&](qc_algorithm_t a, const char* name,
                  void (*build)(const ScheduleShape&, Schedule*), std::string why) {
    plan->algorithm = a;
    plan->schedule = name;
    plan->build = build;
    plan->why = std::move(why);
  };
  switch (kind) {
    case CollectiveKind::kReduceScatter:
      if (requested == QC_ALGO_RING) {
        pick(QC_ALGO_RING, "ring", build_reduce_scatter_ring,
             "algorithm ring: n-1 hops, each requantizing a partial sum");
      } else {
        pick(QC_ALGO_SRA, "direct", build_reduce_scatter_direct,
             asked + " (reduce-scatter: anything but ring): direct, SRA's scatter, each "
                     "value quantized once");
      }
      return;
    case CollectiveKind::kAllgather:
      if (requested == QC_ALGO_RING) {
        pick(QC_ALGO_RING, "ring", build_allgather_ring, "algorithm ring: n-1 hops of one block");
      } else if (requested == QC_ALGO_RECURSIVE_DOUBLING && allgather_recursive_doubling_fits(ranks)) {
        pick(QC_ALGO_RECURSIVE_DOUBLING, "recursive_doubling", build_allgather_recursive_doubling,
             "algorithm recursive_doubling: log2(n) rounds");
      } else {
        plan->pipelined = true;
        pick(QC_ALGO_SRA, "direct", build_allgather_direct,
             requested == QC_ALGO_RECURSIVE_DOUBLING
                 ? asked + " needs a power-of-two rank count, not " + std::to_string(ranks) +
                       ": direct, the owner sends its block to every rank"
                 : asked + " (allgather: anything but ring and recursive_doubling): direct, "
                           "the owner sends its block to every rank");
      }
      return;
    case CollectiveKind::kBroadcast: {
      const bool small = message_bytes < kAutoSmallMessageBytes;
      if (requested == QC_ALGO_TREE || (requested == QC_ALGO_AUTO && small)) {
        pick(QC_ALGO_TREE, "tree", build_broadcast_tree,
             requested == QC_ALGO_TREE
                 ? "algorithm tree: a binomial tree, ceil(log2 n) rounds"
                 : "auto, a message under 64 KiB: a binomial tree, ceil(log2 n) rounds");
      } else {
        pick(QC_ALGO_RING, "chain", build_broadcast_chain,
             requested == QC_ALGO_AUTO
                 ? "auto, a message of 64 KiB or more: a chain pipelined in pieces"
                 : asked + " (broadcast: anything but tree): a chain pipelined in pieces");
        plan->pipelined = true;
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace

Status plan_scheduled(CollectiveKind kind, const qc_policy_t& layer_policy, int ranks,
                      size_t block_count, qc_dtype_t dtype, int op_or_root, const char* layer,
                      ScheduledPlan* plan) {
  const size_t message_bytes = block_count * dtype_size(dtype);
  plan->policy = effective_policy(layer_policy, message_bytes);
  QC_RETURN_IF_ERROR(make_codec(plan->policy, dtype, &plan->codec));
  select_schedule(kind, plan->policy.algorithm, ranks, message_bytes, plan);
  if (plan->build == nullptr) return internal_error("a collective without a schedule");
  plan->signature = call_signature(kind, block_count, dtype, op_or_root, layer, plan->policy,
                                   plan->algorithm);
  return Status::ok();
}

ErrorBufferGrid scheduled_grid(CollectiveKind kind, const ScheduledPlan& plan) {
  return ErrorBufferGrid{plan.algorithm, plan.policy.codec, plan.policy.bits,
                         plan.policy.bucket_size,
                         kind == CollectiveKind::kReduceScatter ? kGridReduceScatter
                                                                : kGridAllgather};
}

ErrorBufferGrid allreduce_grid(const qc_policy_t& policy, qc_algorithm_t algorithm) {
  return ErrorBufferGrid{algorithm, policy.codec, policy.bits, policy.bucket_size,
                         algorithm == QC_ALGO_RECURSIVE_DOUBLING ? policy.group_size : 0};
}

qc_algorithm_t fused_allreduce_algorithm(const std::vector<qc_policy_t>& policies, int ranks,
                                         size_t total_bytes) {
  qc_algorithm_t algorithm = QC_ALGO_AUTO;
  for (size_t i = 0; i < policies.size(); ++i) {
    const qc_algorithm_t a = policies[i].algorithm;
    if (i == 0) algorithm = a;
    else if (a != algorithm) algorithm = QC_ALGO_AUTO;
  }
  if (algorithm == QC_ALGO_AUTO || algorithm == QC_ALGO_NATIVE) {
    algorithm = ranks == 1 ? QC_ALGO_RING
                : total_bytes < kAutoSmallMessageBytes ? QC_ALGO_RECURSIVE_DOUBLING
                                                       : QC_ALGO_SRA;
  }
  return algorithm;
}

ScaleMemory* scale_memory_for(ScaleMemories& memories, CollectiveKind kind, const char* layer,
                              uint64_t signature, const qc_policy_t& policy, bool* refresh) {
  *refresh = true;
  if (policy.scale_update_period <= 1 || policy.codec == QC_CODEC_NONE) return nullptr;
  const std::string key = std::to_string(static_cast<int>(kind)) + ":" +
                          (layer != nullptr ? layer : "*");
  ScaleMemory& m = memories[key];
  if (m.shape != signature) {
    m = ScaleMemory{};
    m.shape = signature;
  }
  *refresh = m.calls % static_cast<uint64_t>(policy.scale_update_period) == 0;
  return &m;
}

uint64_t with_refresh(uint64_t signature, const ScaleMemory* m, bool refresh) {
  return m != nullptr && !refresh ? signature ^ 0x9e3779b97f4a7c15ull : signature;
}

const char* executor_name(ExecutorKind kind) {
  switch (kind) {
    case ExecutorKind::kHost: return "host";
    case ExecutorKind::kHostDeviceCodec: return "host with device codec";
    case ExecutorKind::kStreamOrdered: return "stream-ordered device";
    case ExecutorKind::kTransportNative: return "transport-native";
  }
  return "unknown";
}

namespace {

ExecutorChoice choice(ExecutorKind kind, std::string why) {
  ExecutorChoice c;
  c.kind = kind;
  c.why = std::move(why);
  return c;
}

// A device call the codec runs on the device for: stream-ordered where the
// transport moves device bytes itself (NCCL), else with only payloads staged.
ExecutorChoice codec_on_device(const qc_policy_t& policy, const Transport& transport) {
  if (transport.has_device_groups()) {
    return choice(ExecutorKind::kStreamOrdered,
                  std::string("codec ") + codec_name(policy.codec) + " on the device; the " +
                      transport.name() +
                      " transport moves device bytes itself, so the whole call is enqueued on "
                      "the caller's stream");
  }
  return choice(ExecutorKind::kHostDeviceCodec,
                std::string("codec ") + codec_name(policy.codec) +
                    " on the device; only its compressed payloads cross to host memory for the " +
                    transport.name() + " transport");
}

}  // namespace

ExecutorChoice host_allreduce_executor(const AllreducePlan& plan, qc_dtype_t dtype,
                                       bool feedback) {
  if (plan.native_float) {
    return choice(ExecutorKind::kTransportNative,
                  dtype == QC_DTYPE_FLOAT32 && !feedback
                      ? "native with codec none: the transport's own float sum of the "
                        "caller's buffers, without a copy"
                      : "native with codec none: the transport's own float sum of a float32 "
                        "working copy (16-bit data, or error feedback)");
  }
  if (plan.algorithm == QC_ALGO_NATIVE) {
    return choice(ExecutorKind::kHost,
                  "native: integer codes on one grid shared by all ranks, encoded and decoded "
                  "on the CPU, summed exactly");
  }
  return choice(ExecutorKind::kHost, "the algorithm and the codec run on the CPU");
}

ExecutorChoice device_allreduce_executor(const AllreducePlan& plan, const Transport& transport,
                                         size_t count, qc_dtype_t dtype, bool feedback,
                                         bool device_codec) {
  // NCCL's own sum takes float32 only; 16-bit data runs the codec on a
  // float32 copy (the kernels read and write float32).
  if (transport.has_device_float_allreduce() && dtype == QC_DTYPE_FLOAT32 && plan.native_float &&
      !feedback) {
    return choice(ExecutorKind::kTransportNative,
                  std::string("native with codec none on float32 device buffers: the ") +
                      transport.name() +
                      " transport's own float sum, enqueued on the caller's stream");
  }
  if (!device_codec) return choice(ExecutorKind::kHost, kStagedWithoutDeviceCodec);
  // On a transport that moves device bytes itself (NCCL), every algorithm
  // the codec runs on the device for runs stream-ordered: each of their
  // messages has a size fixed by the call's shape, and none needs a host step.
  if (allreduce_stages_compressed(plan.policy, *plan.codec, plan.algorithm, count)) {
    return codec_on_device(plan.policy, transport);
  }
  return choice(ExecutorKind::kHost,
                std::string("device buffers staged whole: the device codec does not run codec ") +
                    codec_name(plan.policy.codec) + " with algorithm " +
                    algorithm_name(plan.algorithm) +
                    " under this policy (docs/cuda.md lists what it runs)");
}

ExecutorChoice device_alltoall_executor(const AlltoallPlan& plan, const Transport& transport,
                                        size_t count_per_rank, bool device_codec,
                                        WireHeader* header) {
  if (!device_codec) return choice(ExecutorKind::kHost, kStagedWithoutDeviceCodec);
  if (alltoall_stages_compressed(plan.policy, *plan.codec, count_per_rank, header)) {
    return codec_on_device(plan.policy, transport);
  }
  return choice(ExecutorKind::kHost,
                std::string("device buffers staged whole: the device codec does not run codec ") +
                    codec_name(plan.policy.codec) +
                    " under this policy (docs/cuda.md lists what it runs)");
}

ExecutorChoice host_alltoall_executor() {
  return choice(ExecutorKind::kHost, "the codec runs on the CPU");
}

void log_call_plan(const char* collective, const char* layer, size_t count, qc_dtype_t dtype,
                   qc_algorithm_t algorithm, const qc_policy_t* policy,
                   const ExecutorChoice& choice) {
  if (!log_enabled(LogLevel::kDebug)) return;
  std::string line = std::string(collective) + " of " + std::to_string(count) + " " +
                     dtype_name(dtype) + ", layer '" + (layer != nullptr ? layer : "*") + "': ";
  if (algorithm != QC_ALGO_AUTO) {
    line += std::string("algorithm ") + algorithm_name(algorithm) + ", ";
  }
  if (policy == nullptr) {
    line += "each segment's codec";
  } else {
    const qc_codec_t c = policy->codec;
    line += std::string("codec ") + codec_name(c);
    if (c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_ONEBIT) {
      line += " (bits " + std::to_string(policy->bits) + ", bucket " +
              std::to_string(policy->bucket_size) + ")";
    } else if (c == QC_CODEC_GLOBAL_LINEAR || c == QC_CODEC_GLOBAL_EXP) {
      line += " (bits " + std::to_string(policy->bits) + ")";
    }
  }
  line += std::string(", executor ") + executor_name(choice.kind) + ": " + choice.why;
  log_debug(line);
}

}  // namespace qc
