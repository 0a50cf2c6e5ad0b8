// Collectives on CUDA device memory that stage only compressed bytes: the
// codec runs on the device (the CUDA kernels, which write the CPU's bytes),
// and only the encoded messages cross to page-locked host memory, where the
// host transport (local, MPI) moves them. For a 4-bit codec that is about
// an eighth (plus the per-bucket scales) of the bytes host_staging.h copies
// each way, and the encode and decode run on the GPU instead of the CPU.
//
// Today, float32 data with a bucketed or cast codec (minmax, qsgd, onebit,
// fp16, bf16) and no scale reuse:
//  - alltoall (paper 000 §3.3, the DLRM embedding exchange): every block
//    encoded at once, one copy of all payloads each way;
//  - allreduce by ring, recursive doubling, SRA or tree: the algorithms
//    themselves run, on device values (CollectiveContext's DeviceValues),
//    each message's payload crossing as the algorithm sends or receives it;
//    with error feedback (the kernels' compensated encodes) the residuals
//    are device memory too (device_residuals.h).
// On a transport that moves device bytes itself (NCCL), those four
// algorithms go further: nothing is staged and nothing awaited (algorithms/
// their schedules on executors/device_executor.cpp, through the same
// DeviceValues).
// Every other device call goes through host_staging.h. The bytes on the wire
// are the host path's, bit for bit, so ranks on device and on host memory can
// meet in one call (not on NCCL, whose stream-ordered calls agree first and
// carry no envelopes), and the results are the host path's too.
#pragma once

#include <cstddef>

#include "core/codecs/codec.h"
#include "core/codecs/device_message_codec.h"
#include "core/collective_context.h"
#include "core/device_memory.h"
#include "core/staging_memory.h"

namespace qc {

// Whether an alltoall block of `count` values under `policy` (its codec
// made as `codec`) is staged compressed; *header is then the header every
// block's message carries.
bool alltoall_stages_compressed(const qc_policy_t& policy, const Codec& codec, size_t count,
                                WireHeader* header);

// Whether an allreduce of `count` values with `algorithm` under `policy`
// (its codec made as `codec`) is staged compressed, with error feedback or
// without: every codec staged has a compensated kernel.
bool allreduce_stages_compressed(const qc_policy_t& policy, const Codec& codec,
                                 qc_algorithm_t algorithm, size_t count);

// The device memory of such an allreduce on `ranks` ranks (from `staging`),
// as the DeviceValues its CollectiveContext takes. `payload_area`: the bytes
// of payload memory the algorithm lays out itself (0: one payload of the
// call's largest message).
Status reserve_device_values(const Codec& codec, size_t count, int ranks, size_t payload_area,
                             const DeviceMemory& mem, const DeviceMessageCodec& device_codec,
                             HostStaging& staging, void* stream, DeviceValues* values);
// Only payload memory, `payload_bytes` of it (an enqueued alltoall, whose
// values are the caller's buffers and which measures no norm).
Status reserve_device_payloads(size_t payload_bytes, const DeviceMemory& mem,
                               const DeviceMessageCodec& device_codec, HostStaging& staging,
                               void* stream, DeviceValues* values);

// The alltoall of alltoall_pairwise (same blocks, random keys, order and
// messages), with the encode and decode on the device: send and recv are
// device memory, `stream` orders the work after the caller's; returns once
// recv holds the result. `staging` gives the host and device buffers.
// *sq_norm: the squared norm of send, for the layer statistics, measured
// before anything is written (so an in-place call measures its input).
Status alltoall_with_device_codec(CollectiveContext& ctx, const Codec& codec,
                                  const WireHeader& header, const DeviceMemory& mem,
                                  const DeviceMessageCodec& device_codec, HostStaging& staging,
                                  const float* send, float* recv, size_t count_per_rank,
                                  void* stream, double* sq_norm);

}  // namespace qc
