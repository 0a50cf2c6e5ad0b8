#include "core/communicator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/codecs/segmented_codec.h"
#include "core/collective_context.h"
#include "core/device_staging.h"
#include "core/dtype.h"
#include "core/error_buffer.h"
#include "core/host_staging.h"
#include "core/log.h"
#include "core/params.h"
#include "core/policy.h"
#include "core/transports/local_transport.h"
#include "cpu/dtype_convert.h"
#if QC_HAVE_NCCL
#include "core/transports/nccl_transport.h"
#include "cuda/nccl_backend.h"
#endif
#if QC_HAVE_MPI
#include "core/transports/mpi_transport.h"
#endif

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
Status run_collective(Communicator* comm, const Codec& codec, uint64_t signature,
                      uint64_t logical_bytes, const std::vector<LayerShare>& layers, Run&& run) {
  const uint64_t sequence = comm->next_sequence++;
  const Deadline deadline = deadline_after(comm->timeout_seconds);
  CollectiveContext ctx(*comm->transport, codec, comm->scratch, sequence, signature, deadline);
  const bool single = layers.size() == 1;
  if (single && !codec.is_lossless()) ctx.request_error_estimate();
  Status status = run(ctx);
  if (!status) comm->transport->abort(status);
  const CallCounters& c = ctx.counters();
  std::lock_guard<std::mutex> lock(comm->stats_mutex);
  comm->stats.calls += 1;
  comm->stats.logical_bytes += logical_bytes;
  comm->stats.wire_bytes += c.wire_bytes;
  comm->stats.codec_seconds += c.codec_seconds;
  comm->stats.transport_seconds += c.transport_seconds;
  for (const LayerShare& share : layers) {
    qc_layer_stats_t& ls = comm->layer_stats[share.name];
    ls.struct_size = sizeof(qc_layer_stats_t);
    ls.calls += 1;
    ls.count = share.count;
    ls.logical_bytes += share.logical_bytes;
    ls.wire_bytes += static_cast<uint64_t>(std::llround(double(c.wire_bytes) * share.weight));
    ls.codec_seconds += c.codec_seconds * share.weight;
    ls.transport_seconds += c.transport_seconds * share.weight;
    ls.last_rel_error = !single ? -1.0 : codec.is_lossless() ? 0.0 : ctx.error_estimate();
    // A call that did not read its input on the host (a device allreduce
    // enqueued on the caller's stream) has no norm: NaN, left out of the mean.
    if (!std::isnan(share.sq_norm)) {
      const uint64_t samples = ++comm->layer_norm_samples[share.name];
      ls.mean_sq_norm += (share.sq_norm - ls.mean_sq_norm) / double(samples);
    }
  }
  return status;
}

// The scale memory of this call (paper 001 §3.2), or null when the policy
// computes scales every call. *refresh tells whether this call computes
// them (the period's first call) or reuses the kept ones. The period
// restarts when the layer's call shape (its signature: count, dtype,
// policy, algorithm) changes, so a policy change never reuses stale scales.
ScaleMemory* scale_memory_for(Communicator* comm, CollectiveKind kind, const char* layer,
                              uint64_t signature, const qc_policy_t& policy, bool* refresh) {
  *refresh = true;
  if (policy.scale_update_period <= 1 || policy.codec == QC_CODEC_NONE) return nullptr;
  const std::string key = std::to_string(static_cast<int>(kind)) + ":" +
                          (layer != nullptr ? layer : "*");
  ScaleMemory& m = comm->scale_memory[key];
  if (m.shape != signature) {
    m = ScaleMemory{};
    m.shape = signature;
  }
  *refresh = m.calls % static_cast<uint64_t>(policy.scale_update_period) == 0;
  return &m;
}

// A reusing call is told apart on the wire from a refreshing one, so ranks
// that disagree (which takes different call histories) get MISMATCH.
uint64_t with_refresh(uint64_t signature, const ScaleMemory* m, bool refresh) {
  return m != nullptr && !refresh ? signature ^ 0x9e3779b97f4a7c15ull : signature;
}

std::vector<LayerShare> one_layer(const char* layer, size_t count, size_t logical_bytes,
                                  double sq_norm) {
  LayerShare share;
  share.name = layer != nullptr ? layer : "*";
  share.count = count;
  share.logical_bytes = logical_bytes;
  share.sq_norm = sq_norm;
  return {share};
}

std::string describe_grid(const ErrorBufferGrid& g) {
  if (g.codec == kFusedGridCodec) {
    return std::string("algorithm ") + algorithm_name(g.algorithm) +
           ", a fused layout (qc_allreduce_segments) with layout hash " +
           std::to_string(g.bits) + "/" + std::to_string(g.bucket_size);
  }
  return std::string("algorithm ") + algorithm_name(g.algorithm) + ", codec " +
         codec_name(g.codec) + " (bits " + std::to_string(g.bits) + ", bucket " +
         std::to_string(g.bucket_size) + ", group size " + std::to_string(g.group_size) + ")";
}

// An error buffer fits a call when it has the call's count and belongs to
// this rank of a group of this size (or has not met a group yet).
Status check_error_buffer_binding(const ErrorBuffer& eb, int rank, int size, size_t count) {
  if (eb.residual.size() != count) {
    return mismatch("argument 'error_buffer' holds " + std::to_string(eb.residual.size()) +
                    " residuals but the call reduces " + std::to_string(count) + " elements");
  }
  if (eb.rank >= 0 && (eb.rank != rank || eb.size != size)) {
    return mismatch("argument 'error_buffer' belongs to rank " + std::to_string(eb.rank) +
                    " of a group of " + std::to_string(eb.size) + " but is used by rank " +
                    std::to_string(rank) + " of a group of " + std::to_string(size));
  }
  return Status::ok();
}

// How warnings name a single-layer call.
std::string layer_label(const char* layer) {
  return "layer '" + std::string(layer != nullptr ? layer : "*") + "'";
}

// Whether a call on `grid` starts `eb` from zero: its residuals were
// computed on another grid (they would be noise), said in a warning naming
// `what`.
bool residuals_reset(const ErrorBuffer& eb, const ErrorBufferGrid& grid,
                     const std::string& what) {
  if (!eb.bound || eb.grid == grid) return false;
  log_warning(what + ": the error buffer's residuals were computed with " +
              describe_grid(eb.grid) + " and this call uses " + describe_grid(grid) +
              "; they are reset to zero");
  return true;
}

// The grid an allreduce's residuals belong to (error_buffer.h); only
// recursive doubling's slots depend on the group size.
ErrorBufferGrid allreduce_grid(const qc_policy_t& policy, qc_algorithm_t algorithm) {
  return ErrorBufferGrid{algorithm, policy.codec, policy.bits, policy.bucket_size,
                         algorithm == QC_ALGO_RECURSIVE_DOUBLING ? policy.group_size : 0};
}

// Copies the error buffer's residuals into comm->residual_work for a call
// on `grid`, after checking that the buffer fits; a buffer computed on
// another grid starts from zero, with a warning naming `what`.
Status load_residuals(Communicator* comm, ErrorBuffer& eb, const ErrorBufferGrid& grid,
                      size_t count, const std::string& what) {
  Status fits = check_error_buffer_binding(eb, comm->transport->rank(), comm->transport->size(),
                                          count);
  // A device call left the newest residuals on the device.
  if (fits) fits = residuals_to_host(&eb);
  if (!fits) {
    // The peers are already in (or about to enter) this call: break the
    // group so that they fail at once instead of waiting for this rank
    // until the timeout (qc.h: after a MISMATCH the communicator is broken).
    comm->transport->abort(fits);
    return fits;
  }
  std::vector<float>& residual = comm->residual_work;
  if (residuals_reset(eb, grid, what)) {
    residual.assign(count, 0.0f);
  } else {
    residual = eb.residual;
  }
  return Status::ok();
}

// The buffer now holds residuals of this rank's encodes on `grid`.
void bind_error_buffer(const Communicator* comm, ErrorBuffer* eb, const ErrorBufferGrid& grid) {
  eb->rank = comm->transport->rank();
  eb->size = comm->transport->size();
  eb->bound = true;
  eb->grid = grid;
}

// After a successful call: the working residuals become the buffer's.
void commit_residuals(Communicator* comm, ErrorBuffer* eb, const ErrorBufferGrid& grid) {
  eb->residual.swap(comm->residual_work);
  bind_error_buffer(comm, eb, grid);
}

// AVG's one division, at the end, in float32 (residuals and partial sums
// stay in units of the sum), then the conversion to the caller's dtype.
void finish_allreduce(float* work, size_t count, qc_dtype_t dtype, qc_reduce_op_t op, int n,
                      void* recvbuf) {
  if (op == QC_OP_AVG) {
    const float scale = 1.0f / static_cast<float>(n);
    for (size_t i = 0; i < count; ++i) work[i] *= scale;
  }
  cpu::from_float32(work, dtype, recvbuf, count);
}

}  // namespace

Status check_healthy(const Communicator* comm) {
  Status failure = comm->transport->failure();
  return failure ? Status::ok() : broken_status(failure);
}

double squared_norm(const float* x, size_t count) {
  // Four partial sums: independent chains the compiler can overlap.
  double a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    a += double(x[i]) * x[i];
    b += double(x[i + 1]) * x[i + 1];
    c += double(x[i + 2]) * x[i + 2];
    d += double(x[i + 3]) * x[i + 3];
  }
  for (; i < count; ++i) a += double(x[i]) * x[i];
  return (a + b) + (c + d);
}

namespace {

// What an allreduce of this shape does under its layer's policy (after the
// check that the group is healthy, which every call starts with).
struct AllreducePlan {
  qc_policy_t policy;
  std::unique_ptr<Codec> codec;
  qc_algorithm_t algorithm = QC_ALGO_AUTO;
  bool native_float = false;  // native with codec none: the transport's own float sum
};

Status plan_allreduce(const Communicator* comm, size_t count, qc_dtype_t dtype, const char* layer,
                      AllreducePlan* plan) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  plan->policy = effective_policy(comm->policies.resolve(layer), count * dtype_size(dtype));
  QC_RETURN_IF_ERROR(make_codec(plan->policy, dtype, &plan->codec));
  const bool float_sum = comm->transport->has_native_float_allreduce();
  plan->algorithm = select_allreduce_algorithm(plan->policy.algorithm, plan->policy,
                                               comm->transport->size(),
                                               count * dtype_size(dtype), float_sum);
  plan->native_float = plan->algorithm == QC_ALGO_NATIVE && plan->policy.codec == QC_CODEC_NONE;
  if (plan->native_float && !float_sum) {
    return unsupported(std::string("algorithm 'native' with codec none hands the sum to the "
                                   "transport's own float allreduce, and the ") +
                       comm->transport->name() + " transport has none; use auto or ring");
  }
  return Status::ok();
}

// Device calls enqueued on the caller's stream run another protocol than the
// host ones (NCCL's average instead of a sum scaled on the host): ranks that
// mix the two in one call fail the agreement with MISMATCH.
constexpr uint64_t kEnqueuedOnDevice = 0x6a09e667f3bcc909ull;

}  // namespace

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

// The device twin of load_residuals: the working residuals of a device
// call on `grid`, on the device (device_residuals.h), after the same checks.
Status device_residuals_for(const Communicator* comm, const DeviceMemory& mem,
                            const DeviceMessageCodec& device_codec, ErrorBuffer* eb,
                            const ErrorBufferGrid& grid, size_t count, const char* layer,
                            void* stream, float** work) {
  QC_RETURN_IF_ERROR(check_error_buffer_binding(*eb, comm->transport->rank(),
                                                comm->transport->size(), count));
  const bool reset = residuals_reset(*eb, grid, layer_label(layer));
  Status s = eb->device.begin(mem, device_codec, eb->residual, reset, stream, work);
  if (!s) {
    return Status(s.code(), "rank " + std::to_string(comm->transport->rank()) +
                                " could not load its residuals on the device: " + s.message());
  }
  return s;
}

// The end of a device call's preparation, `local` its status: an enqueued
// call's agreement comes here, after everything that can fail on this rank
// alone, and a rank whose preparation failed fails it for every rank.
Status conclude_preparation(CollectiveContext& ctx, bool enqueued, const void* sendbuf,
                            const void* recvbuf, const Status& local) {
  if (enqueued) {
    // Only where the buffers are is checked here, whatever their type.
    QC_RETURN_IF_ERROR(ctx.agree_on_device_buffers(static_cast<const float*>(sendbuf),
                                                   static_cast<const float*>(recvbuf), local));
  }
  return local;
}

// Records, when a call's scope ends, that the work it left on `stream` may
// still use qc's device memory, unless `settled` says the call waited for
// it. A failure to record leaves nothing better to do than what a failed
// call does anyway: the group is broken, and destruction waits for the
// memory with a timeout (PendingDeviceWork::wait).
class PendingOnExit {
 public:
  PendingOnExit(PendingDeviceWork& pending, const DeviceMemory& mem, void* stream,
                double timeout_seconds, const bool& settled)
      : pending_(pending), mem_(mem), stream_(stream), timeout_(timeout_seconds),
        settled_(settled) {}
  ~PendingOnExit() {
    if (!settled_) (void)pending_.enqueued(mem_, stream_, timeout_);
  }
  PendingOnExit(const PendingOnExit&) = delete;
  PendingOnExit& operator=(const PendingOnExit&) = delete;

 private:
  PendingDeviceWork& pending_;
  const DeviceMemory& mem_;
  void* stream_;
  double timeout_;
  const bool& settled_;
};

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
                                bool* ran) {
  *ran = false;
  // NCCL's own sum takes float32 only; 16-bit data runs the codec on a
  // float32 copy (the kernels read and write float32).
  const bool enqueue = comm->transport->has_device_float_allreduce() && dtype == QC_DTYPE_FLOAT32;
  if (!enqueue && (mem == nullptr || device_codec == nullptr)) return Status::ok();
  AllreducePlan plan;
  QC_RETURN_IF_ERROR(plan_allreduce(comm, count, dtype, layer, &plan));
  const bool feedback = plan.policy.error_feedback != 0 && error_buffer != nullptr;
  if (enqueue && plan.native_float && !feedback) {
    *ran = true;
    return enqueue_allreduce_on_device(comm, mem, plan, sendbuf, recvbuf, count, op, layer,
                                       stream);
  }
  if (mem == nullptr || device_codec == nullptr) return Status::ok();
  ErrorBuffer* eb = feedback ? error_buffer : nullptr;
  // On a transport that moves device bytes itself (NCCL), every algorithm
  // the codec runs on the device for runs stream-ordered: each of their
  // messages has a size fixed by the call's shape, and none needs a host step.
  if (allreduce_stages_compressed(plan.policy, *plan.codec, plan.algorithm, count)) {
    *ran = true;
    return allreduce_with_device_codec(comm, *mem, *device_codec, plan,
                                       /*enqueued=*/comm->transport->has_device_groups(), sendbuf,
                                       recvbuf, count, dtype, op, layer, eb, stream);
  }
  return Status::ok();
}

Status allreduce_placed(Communicator* comm, const DeviceMemory* mem,
                        const DeviceMessageCodec* device_codec, void* stream, const void* sendbuf,
                        void* recvbuf, size_t count, qc_dtype_t dtype, qc_reduce_op_t op,
                        const char* layer, ErrorBuffer* error_buffer) {
  if (!comm->device_codec) device_codec = nullptr;  // QC_DEVICE_CODEC=0
  const size_t bytes = count * dtype_size(dtype);
  return run_on_placed_buffers(
      comm, mem, stream, sendbuf, bytes, recvbuf, bytes,
      [&](const void* send, void* recv) {
        return comm_allreduce(comm, send, recv, count, dtype, op, layer, error_buffer);
      },
      [&](const void* send, void* recv, void* on_stream, bool* ran) {
        return comm_allreduce_on_device(comm, mem, device_codec, send, recv, count, dtype, op,
                                        layer, error_buffer, on_stream, ran);
      });
}

Status comm_allreduce(Communicator* comm, const void* sendbuf, void* recvbuf, size_t count,
                      qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                      ErrorBuffer* error_buffer) {
  AllreducePlan plan;
  QC_RETURN_IF_ERROR(plan_allreduce(comm, count, dtype, layer, &plan));
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
  std::vector<float>& residual = comm->residual_work;
  const ErrorBufferGrid grid = allreduce_grid(policy, algorithm);
  if (feedback) {
    QC_RETURN_IF_ERROR(load_residuals(comm, *error_buffer, grid, count, layer_label(layer)));
  }

  const uint64_t signature = call_signature(CollectiveKind::kAllreduce, count, dtype, op, layer,
                                            policy, algorithm);
  if (native_float && dtype == QC_DTYPE_FLOAT32 && !feedback) {
    // No staging: the transport sums the caller's buffers directly.
    float* out = static_cast<float*>(recvbuf);
    const auto layers =
        one_layer(layer, count, count * 4, squared_norm(static_cast<const float*>(sendbuf), count));
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

  std::vector<float>& work = comm->work;
  work.resize(count);
  cpu::to_float32(sendbuf, dtype, work.data(), count);
  const auto layers = one_layer(layer, count, count * dtype_size(dtype),
                                squared_norm(work.data(), count));
  bool refresh = true;
  ScaleMemory* scales = scale_memory_for(comm, CollectiveKind::kAllreduce, layer, signature,
                                         policy, &refresh);
  Status status = run_collective(comm, *codec, with_refresh(signature, scales, refresh),
                                 count * dtype_size(dtype), layers,
                                 [&](CollectiveContext& ctx) -> Status {
    ctx.set_seed(policy.seed);
    if (feedback) ctx.set_residual(residual.data(), count);
    if (scales != nullptr) ctx.set_scale_memory(scales, refresh);
    if (is_step_algorithm(algorithm)) {
      return run_allreduce(ctx, algorithm, work.data(), count, policy.group_size);
    }
    if (algorithm != QC_ALGO_NATIVE) return internal_error("no algorithm selected");
    if (native_float) {
      // Codec none has no error; a residual left by an earlier grid was
      // reset above, so only a loaded image can bring one here.
      if (feedback) {
        for (size_t i = 0; i < count; ++i) work[i] += residual[i];
        std::fill(residual.begin(), residual.end(), 0.0f);
      }
      return ctx.native_allreduce_float(work.data(), work.data(), count);
    }
    return allreduce_native(ctx, *global, work.data(), feedback ? residual.data() : nullptr,
                            count, policy.bits, scales, refresh);
  });
  QC_RETURN_IF_ERROR(status);
  if (scales != nullptr) scales->calls += 1;
  if (feedback) commit_residuals(comm, error_buffer, grid);
  finish_allreduce(work.data(), count, dtype, op, n, recvbuf);
  return Status::ok();
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
    policies[i] = effective_policy(comm->policies.resolve(name), counts[i] * item);
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
  // One algorithm for the whole buffer: the segments' own when they all name
  // the same one (native aside: it needs one codec grid), else AUTO's rule
  // on the total size.
  qc_algorithm_t algorithm = QC_ALGO_AUTO;
  for (size_t i = 0; i < nsegments; ++i) {
    const qc_algorithm_t a = policies[i].algorithm;
    if (i == 0) algorithm = a;
    else if (a != algorithm) algorithm = QC_ALGO_AUTO;
  }
  if (algorithm == QC_ALGO_AUTO || algorithm == QC_ALGO_NATIVE) {
    algorithm = n == 1 ? QC_ALGO_RING
                : total * item < kAutoSmallMessageBytes ? QC_ALGO_RECURSIVE_DOUBLING
                                                        : QC_ALGO_SRA;
  }
  const int group_size = nsegments > 0 ? policies[0].group_size : 8;
  layout = fnv1a64(&algorithm, sizeof algorithm, layout);
  layout = fnv1a64(&group_size, sizeof group_size, layout);
  const uint64_t signature = fnv1a64("segments", 8, layout);

  const bool feedback = any_feedback;
  std::vector<float>& residual = comm->residual_work;
  // The layout hash stands in for the codec grid (error_buffer.h).
  const ErrorBufferGrid grid{algorithm, kFusedGridCodec, static_cast<int>(layout & 0x7fffffff),
                            static_cast<int>((layout >> 32) & 0x7fffffff),
                            algorithm == QC_ALGO_RECURSIVE_DOUBLING ? group_size : 0};
  if (feedback) {
    QC_RETURN_IF_ERROR(load_residuals(comm, *error_buffer, grid, total,
                                      "fused call of " + std::to_string(nsegments) + " layers"));
  }

  std::vector<float>& work = comm->work;
  work.resize(total);
  cpu::to_float32(sendbuf, dtype, work.data(), total);
  double weights = 0;
  for (size_t i = 0; i < nsegments; ++i) {
    shares[i].sq_norm = squared_norm(work.data() + segments[i].begin, counts[i]);
    shares[i].weight =
        counts[i] == 0 ? 0.0 : double(segments[i].codec->max_encoded_size(counts[i]));
    weights += shares[i].weight;
  }
  for (LayerShare& share : shares) share.weight = weights > 0 ? share.weight / weights : 0.0;
  const SegmentedCodec codec(std::move(segments));
  Status status = run_collective(comm, codec, signature, total * item, shares,
                                 [&](CollectiveContext& ctx) -> Status {
    if (feedback) ctx.set_residual(residual.data(), total);
    return run_allreduce(ctx, algorithm, work.data(), total, group_size);
  });
  QC_RETURN_IF_ERROR(status);
  if (feedback) commit_residuals(comm, error_buffer, grid);
  finish_allreduce(work.data(), total, dtype, op, n, recvbuf);
  return Status::ok();
}

namespace {

// The policy, codec and signature of an alltoall of this shape (after the
// health check, as plan_allreduce). The algorithm field does not apply to alltoall, so it is left out of the
// signature: ranks may differ there without harm.
struct AlltoallPlan {
  qc_policy_t policy;
  std::unique_ptr<Codec> codec;
  uint64_t signature = 0;
};

Status plan_alltoall(const Communicator* comm, size_t count_per_rank, qc_dtype_t dtype,
                     const char* layer, AlltoallPlan* plan) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  plan->policy =
      effective_policy(comm->policies.resolve(layer), count_per_rank * dtype_size(dtype));
  QC_RETURN_IF_ERROR(make_codec(plan->policy, dtype, &plan->codec));
  plan->signature = call_signature(CollectiveKind::kAlltoall, count_per_rank, dtype, 0, layer,
                                   plan->policy, QC_ALGO_AUTO);
  return Status::ok();
}

}  // namespace

Status comm_alltoall(Communicator* comm, const void* sendbuf, void* recvbuf, size_t count_per_rank,
                     qc_dtype_t dtype, const char* layer) {
  AlltoallPlan plan;
  QC_RETURN_IF_ERROR(plan_alltoall(comm, count_per_rank, dtype, layer, &plan));
  const qc_policy_t& policy = plan.policy;
  const uint64_t signature = plan.signature;
  const int n = comm->transport->size();
  const size_t total = count_per_rank * static_cast<size_t>(n);
  std::vector<float>& send = comm->work;
  std::vector<float>& recv = comm->work_out;
  send.resize(total);
  recv.resize(total);
  cpu::to_float32(sendbuf, dtype, send.data(), total);
  const auto layers = one_layer(layer, total, total * dtype_size(dtype),
                                squared_norm(send.data(), total));
  bool refresh = true;
  ScaleMemory* scales = scale_memory_for(comm, CollectiveKind::kAlltoall, layer, signature,
                                         policy, &refresh);
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

Status comm_alltoall_on_device(Communicator* comm, const DeviceMemory& mem,
                               const DeviceMessageCodec& device_codec, const void* sendbuf,
                               void* recvbuf, size_t count_per_rank, qc_dtype_t dtype,
                               const char* layer, void* stream, bool* ran) {
  *ran = false;
  AlltoallPlan plan;
  QC_RETURN_IF_ERROR(plan_alltoall(comm, count_per_rank, dtype, layer, &plan));
  const Codec& codec = *plan.codec;
  WireHeader header;
  if (!alltoall_stages_compressed(plan.policy, codec, count_per_rank, &header)) {
    return Status::ok();
  }
  *ran = true;
  const int n = comm->transport->size();
  const size_t total = count_per_rank * static_cast<size_t>(n);
  const size_t logical_bytes = total * dtype_size(dtype);
  // 16-bit data runs on float32 copies, as on the host (comm->work).
  const bool widened = dtype != QC_DTYPE_FLOAT32;
  const bool enqueued = comm->transport->has_device_groups();
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
  DeviceCollective on_device;
  if (mem != nullptr && device_codec != nullptr) {
    on_device = [&](const void* send, void* recv, void* on_stream, bool* ran) {
      return comm_alltoall_on_device(comm, *mem, *device_codec, send, recv, count_per_rank, dtype,
                                     layer, on_stream, ran);
    };
  }
  return run_on_placed_buffers(
      comm, mem, stream, sendbuf, bytes, recvbuf, bytes,
      [&](const void* send, void* recv) {
        return comm_alltoall(comm, send, recv, count_per_rank, dtype, layer);
      },
      on_device);
}

namespace {

// What the QC_* environment (params.h) gives a new communicator.
struct CommDefaults {
  double timeout_seconds = 300.0;
  qc_policy_t star{};
  bool device_codec = true;
  bool progress_thread = true;
};

// Reads the QC_* environment over the configured timeout. A bad value fails
// the creation, before anything is made, so a typo never runs silently with
// defaults.
Status environment_defaults(double configured_timeout, CommDefaults* out) {
  EnvParams env;
  QC_RETURN_IF_ERROR(read_env_params(&env));
  out->star = default_policy();
  apply_env_to_policy(env, &out->star);
  Status valid = validate_policy(out->star, "*");
  if (!valid) {
    return invalid_argument("the QC_* environment variables make an invalid default policy: " +
                            valid.message());
  }
  warn_if_error_feedback_diverges(out->star, "the QC_* environment's default policy");
  out->timeout_seconds = env_timeout(env, configured_timeout);
  out->device_codec = env_device_codec(env);
  out->progress_thread = env_progress_thread(env);
  return Status::ok();
}

// A communicator around `transport` with the settings every transport starts
// from.
std::unique_ptr<Communicator> make_comm(std::unique_ptr<Transport> transport,
                                     const CommDefaults& defaults) {
  auto comm = std::make_unique<Communicator>();
  comm->transport = std::move(transport);
  comm->timeout_seconds = defaults.timeout_seconds;
  comm->device_codec = defaults.device_codec;
  comm->progress_inline =
      !defaults.progress_thread || !comm->transport->supports_progress_thread();
  comm->policies.set("*", defaults.star);
  comm->stats.struct_size = sizeof(qc_stats_t);
  return comm;
}

}  // namespace

Status create_local_group(int nranks, double timeout_seconds,
                          std::vector<std::unique_ptr<Communicator>>* group) {
  CommDefaults defaults;
  QC_RETURN_IF_ERROR(environment_defaults(timeout_seconds, &defaults));
  auto local = std::make_shared<LocalGroup>(nranks);
  group->clear();
  group->reserve(nranks);
  for (int r = 0; r < nranks; ++r) {
    group->push_back(make_comm(std::make_unique<LocalTransport>(local, r), defaults));
  }
  return Status::ok();
}

Status create_mpi_comm(int64_t fortran_handle, double timeout_seconds,
                       std::unique_ptr<Communicator>* comm) {
#if QC_HAVE_MPI
  if (fortran_handle < INT32_MIN || fortran_handle > INT32_MAX) {
    return invalid_argument("argument 'config': field 'mpi_comm' is " +
                            std::to_string(fortran_handle) +
                            ", not a Fortran MPI handle (MPI_Comm_c2f gives an int)");
  }
  CommDefaults defaults;
  QC_RETURN_IF_ERROR(environment_defaults(timeout_seconds, &defaults));
  std::unique_ptr<Transport> transport;
  QC_RETURN_IF_ERROR(MpiTransport::create(static_cast<MPI_Fint>(fortran_handle), &transport));
  *comm = make_comm(std::move(transport), defaults);
  return Status::ok();
#else
  (void)fortran_handle;
  (void)timeout_seconds;
  (void)comm;
  return unsupported("argument 'config': this build of qc has no MPI transport (configure with "
                     "an MPI library installed, or -DQC_WITH_MPI=ON to require one)");
#endif
}

Status create_nccl_comm(void* nccl_comm, double timeout_seconds,
                        std::unique_ptr<Communicator>* comm) {
#if QC_HAVE_NCCL
  CommDefaults defaults;
  QC_RETURN_IF_ERROR(environment_defaults(timeout_seconds, &defaults));
  std::unique_ptr<NcclBackend> backend;
  QC_RETURN_IF_ERROR(cuda::make_nccl_backend(nccl_comm, &backend));
  *comm = make_comm(std::make_unique<NcclTransport>(std::move(backend)), defaults);
  return Status::ok();
#else
  (void)nccl_comm;
  (void)timeout_seconds;
  (void)comm;
  return unsupported("argument 'config': this build of qc has no NCCL transport (it needs a "
                     "CUDA build with NCCL's header: -DQC_WITH_CUDA=ON, NCCL_ROOT)");
#endif
}

}  // namespace qc
