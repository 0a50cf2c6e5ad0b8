// The planner: (policy, call shape, buffer placement, transport
// capabilities) -> (algorithm, executor, codec). The communicator's drivers
// (allreduce_host.cpp, allreduce_device.cpp, alltoall.cpp, segments.cpp) ask
// it what to run, then run it; it runs nothing and holds no communicator,
// only what a call's decision depends on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/codecs/codec.h"
#include "core/codecs/wire_format.h"
#include "core/collective_context.h"
#include "core/error_buffer_grid.h"
#include "core/schedules/schedule.h"
#include "core/transports/transport.h"

namespace qc {

enum class CollectiveKind : uint8_t {
  kAllreduce = 1,
  kAlltoall = 2,
  kReduceScatter = 3,
  kAllgather = 4,
  kBroadcast = 5,
  kSparseAllreduce = 6,
};

// What every rank must agree on for one call, hashed into the envelope.
uint64_t call_signature(CollectiveKind kind, size_t count, qc_dtype_t dtype, int op,
                        const char* layer, const qc_policy_t& p, qc_algorithm_t algorithm);

// Device calls enqueued on the caller's stream run another protocol than the
// host ones (NCCL's average instead of a sum scaled on the host): ranks that
// mix the two in one call fail the agreement with MISMATCH.
constexpr uint64_t kEnqueuedOnDevice = 0x6a09e667f3bcc909ull;

// What an allreduce of this shape does under its layer's policy.
struct AllreducePlan {
  qc_policy_t policy;
  std::unique_ptr<Codec> codec;
  qc_algorithm_t algorithm = QC_ALGO_AUTO;
  bool native_float = false;  // native with codec none: the transport's own float sum
  const char* why = "";       // the rule that chose the algorithm (for the log)
};

// `layer_policy`: the policy the layer resolves to. The caller checks first
// that the group is healthy (every call starts with that).
Status plan_allreduce(const qc_policy_t& layer_policy, const Transport& transport, size_t count,
                      qc_dtype_t dtype, AllreducePlan* plan);

// The policy, codec and signature of an alltoall of this shape (after the
// health check, as plan_allreduce). The algorithm field does not apply to alltoall, so it is left out of the
// signature: ranks may differ there without harm.
struct AlltoallPlan {
  qc_policy_t policy;
  std::unique_ptr<Codec> codec;
  uint64_t signature = 0;
};

Status plan_alltoall(const qc_policy_t& layer_policy, size_t count_per_rank, qc_dtype_t dtype,
                     const char* layer, AlltoallPlan* plan);

// A reduce-scatter, allgather or broadcast: one schedule of the registry
// (core/schedules/registry.h), run by the host executor.
struct ScheduledPlan {
  qc_policy_t policy;
  std::unique_ptr<Codec> codec;
  // The schedule, as the policy's algorithm value that names it (for the
  // signature and the error buffer's grid): reduce-scatter ring or SRA
  // (direct); allgather ring, recursive doubling or SRA (direct); broadcast
  // ring (the chain) or tree.
  qc_algorithm_t algorithm = QC_ALGO_AUTO;
  const char* schedule = "";  // its name in the logs: "direct", "ring", "chain", ...
  void (*build)(const ScheduleShape& shape, Schedule* schedule) = nullptr;
  bool pipelined = false;  // cut into pieces of the pipeline chunk
  std::string why;         // the rule that chose it (for the log)
  uint64_t signature = 0;
};

// `block_count`: reduce-scatter's recvcount, allgather's sendcount,
// broadcast's count (one message's values: what min_compress_bytes
// judges). `op_or_root`: reduce-scatter's op, broadcast's root (both must
// be every rank's).
Status plan_scheduled(CollectiveKind kind, const qc_policy_t& layer_policy, int ranks,
                      size_t block_count, qc_dtype_t dtype, int op_or_root, const char* layer,
                      ScheduledPlan* plan);

// The grid of a reduce-scatter's or allgather's residuals: its schedule's
// encodes, told apart from an allreduce's (ErrorBufferGrid::group_size).
ErrorBufferGrid scheduled_grid(CollectiveKind kind, const ScheduledPlan& plan);

// The grid an allreduce's residuals belong to (error_buffer.h); only
// recursive doubling's slots depend on the group size.
ErrorBufferGrid allreduce_grid(const qc_policy_t& policy, qc_algorithm_t algorithm);

// One algorithm for a fused buffer (qc_allreduce_segments) of segments under
// `policies`, `total_bytes` in all, on `ranks` ranks: the segments' own when
// they all name the same one (native aside: it needs one codec grid), else
// AUTO's rule on the total size.
qc_algorithm_t fused_allreduce_algorithm(const std::vector<qc_policy_t>& policies, int ranks,
                                         size_t total_bytes);

// policy.scale_update_period's kept scales, per collective kind and layer.
using ScaleMemories = std::map<std::string, ScaleMemory>;

// The scale memory of this call (paper 001 §3.2), or null when the policy
// computes scales every call. *refresh tells whether this call computes
// them (the period's first call) or reuses the kept ones. The period
// restarts when the layer's call shape (its signature: count, dtype,
// policy, algorithm) changes, so a policy change never reuses stale scales.
ScaleMemory* scale_memory_for(ScaleMemories& memories, CollectiveKind kind, const char* layer,
                              uint64_t signature, const qc_policy_t& policy, bool* refresh);

// A reusing call is told apart on the wire from a refreshing one, so ranks
// that disagree (which takes different call histories) get MISMATCH.
uint64_t with_refresh(uint64_t signature, const ScaleMemory* m, bool refresh);

// Who runs a call's algorithm, and where its values are.
enum class ExecutorKind : uint8_t {
  // The algorithm and the codec on the CPU over host memory: the caller's
  // buffers, or host copies of device buffers staged whole (host_staging.h).
  kHost,
  // The algorithm driven from the host over device values, the codec on the
  // device, only compressed payloads staged (device_staging.h).
  kHostDeviceCodec,
  // The whole call enqueued on the caller's stream, device groups moving
  // the payloads (executors/device_executor.cpp): nothing staged, nothing awaited.
  kStreamOrdered,
  // No qc algorithm: the transport's own float sum.
  kTransportNative,
};

const char* executor_name(ExecutorKind kind);

struct ExecutorChoice {
  ExecutorKind kind = ExecutorKind::kHost;
  std::string why;
};

// Why device buffers are staged whole when no device codec is at hand.
constexpr const char* kStagedWithoutDeviceCodec =
    "device buffers staged whole: no device codec (QC_DEVICE_CODEC=0, or a build without the "
    "CUDA kernels)";

// An allreduce run by the host driver (comm_allreduce): on host buffers, or
// on host copies of device buffers. `feedback`: with an error buffer.
ExecutorChoice host_allreduce_executor(const AllreducePlan& plan, qc_dtype_t dtype,
                                       bool feedback);

// An allreduce of device buffers: kHost means that the device driver does
// not take the call and the buffers are staged whole. `device_codec`: a
// device codec is at hand (QC_DEVICE_CODEC=1 in a build with the kernels).
ExecutorChoice device_allreduce_executor(const AllreducePlan& plan, const Transport& transport,
                                         size_t count, qc_dtype_t dtype, bool feedback,
                                         bool device_codec);

// An alltoall of device buffers, as device_allreduce_executor; *header is
// every block's message header when the codec runs on the device.
ExecutorChoice device_alltoall_executor(const AlltoallPlan& plan, const Transport& transport,
                                        size_t count_per_rank, bool device_codec,
                                        WireHeader* header);

// An alltoall run by the host driver (comm_alltoall).
ExecutorChoice host_alltoall_executor();

// One debug line (QC_DEBUG=debug) per call: what runs it and why, as
// NCCL_DEBUG=INFO prints a call's algorithm and protocol. `algorithm`
// AUTO: none to name (alltoall); `policy` nullptr: one per segment.
void log_call_plan(const char* collective, const char* layer, size_t count, qc_dtype_t dtype,
                   qc_algorithm_t algorithm, const qc_policy_t* policy,
                   const ExecutorChoice& choice);

}  // namespace qc
