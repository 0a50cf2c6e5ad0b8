// The collectives as the communicator runs them: an algorithm's schedule
// from the registry (core/schedules/registry.h), run by the host executor
// (messages over the transport) or the stream-ordered one (device values,
// enqueued on the call's stream), and the native allreduce of the global
// codecs. Each algorithm is written once, as its schedule; the executors
// give the same bits.
//
// Allreduce contract: `data` holds this rank's contribution (count float32
// values) and receives the reduced result. Every rank decodes the same final
// bytes, so all ranks end with bit-identical data. A rank never encodes data
// it keeps: only what crosses to another rank is encoded, and each reduced
// block is encoded exactly once by its owner.
#pragma once

#include <cstddef>

#include "core/codecs/codec_global.h"
#include "core/collective_context.h"

namespace qc {

// Whether `algorithm` has a schedule (ring, recursive doubling, SRA, tree):
// those run on any executor, host or stream-ordered.
bool is_step_algorithm(qc_algorithm_t algorithm);
// Whether `algorithm`'s schedule only reads its input: SRA, and the ring
// (which copies each block into the output just before it first adds to
// it). Float32 input is then read where it is, with no pass copying the
// whole input first; the others reduce in a copy.
bool reads_input_in_place(qc_algorithm_t algorithm);
// Runs step algorithm `algorithm` on the host executor: `input` (read
// only; it may be `output`) holds this rank's values, `output` gets the
// sum. An internal error for any other algorithm.
Status run_allreduce(CollectiveContext& ctx, qc_algorithm_t algorithm, const float* input,
                     float* output, size_t count, int group_size);
inline Status run_allreduce(CollectiveContext& ctx, qc_algorithm_t algorithm, float* data,
                            size_t count, int group_size) {
  return run_allreduce(ctx, algorithm, data, data, count, group_size);
}

// Stream-ordered allreduce on device values (CollectiveContext's payload
// calls): the same schedule on the device executor, so the same result bit
// for bit, every step enqueued on the call's stream and nothing awaited.
// Every rank must have agreed on the call first. Its payloads take
// allreduce_enqueued_payload_bytes of the call's device payload memory
// (rank `rank` of `ranks`: the layout is rank's own).
Status allreduce_enqueued(CollectiveContext& ctx, qc_algorithm_t algorithm, float* data,
                          size_t count, int group_size);
Status allreduce_enqueued_payload_bytes(qc_algorithm_t algorithm, const Codec& codec,
                                        size_t count, int ranks, int rank, int group_size,
                                        size_t* bytes);
// `codec` is the call's codec (global_linear or global_exp, `bits` wide);
// `input` is only read (it may be the caller's buffer), the sums go to
// `data` (which may be `input`); `residual` is the call's error buffer (or
// null), as given to ctx.
// `scales` (policy.scale_update_period, or null): with `refresh` the agreed
// norm is computed and kept there; without, the kept norm is used and the
// norm round is skipped (every rank decides alike: same call history).
Status allreduce_native(CollectiveContext& ctx, GlobalCodec& codec, const float* input,
                        float* data, const float* residual, size_t count, int bits,
                        ScaleMemory* scales = nullptr, bool refresh = true);

// send: size() blocks of count_per_rank values, block j for rank j.
// recv: block i from rank i. Every block, a rank's own included, is encoded
// by its sender and decoded by its receiver (the pairwise schedule, host
// executor).
Status alltoall_pairwise(CollectiveContext& ctx, const float* send, float* recv,
                         size_t count_per_rank);
// alltoall_pairwise stream-ordered on device values: the same result bit
// for bit, nothing awaited. Every rank must have agreed on the call first.
// Its payloads take alltoall_enqueued_payload_bytes (for blocks of
// `payload` bytes) of the call's device payload memory.
Status alltoall_enqueued(CollectiveContext& ctx, const float* send, float* recv,
                         size_t count_per_rank);
Status alltoall_enqueued_payload_bytes(size_t payload, int ranks, size_t* bytes);
// The pairwise schedule's transfers alone, for blocks encoded elsewhere (on
// the device: core/device_staging.h): out[j] goes to rank j, in[i] arrives
// from rank i, each a message of count_per_rank values under the call's
// codec; out[rank] stays where it is.
Status alltoall_exchange(CollectiveContext& ctx, Message* out, Message* in,
                         size_t count_per_rank);

// QC_ALGO_AUTO's rule (docs/algorithms.md, qc.h):
//  1 rank                              -> ring (no steps, one encode/decode)
//  codec none (also: a message below min_compress_bytes) on a transport
//  with its own float sum (MPI)        -> native (the transport's allreduce)
//  global_linear, or global_exp with bits <= 5 (one fixed-point limb)
//                                      -> native (exact integer sum, no
//                                         requantization)
//  message < 64 KiB per rank           -> recursive doubling (fewest steps)
//  otherwise                           -> SRA (fewest bytes, each value
//                                         requantized at most twice)
constexpr size_t kAutoSmallMessageBytes = 64 * 1024;
constexpr int kAutoNativeExpMaxBits = 5;
// `policy` is the call's effective policy (effective_policy()).
// *why (when not null): the rule that chose, for the log.
qc_algorithm_t select_allreduce_algorithm(qc_algorithm_t requested, const qc_policy_t& policy,
                                          int nranks, size_t message_bytes,
                                          bool transport_float_sum, const char** why = nullptr);

}  // namespace qc
