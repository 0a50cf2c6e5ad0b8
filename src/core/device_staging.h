// Collectives on CUDA device memory that stage only compressed bytes: the
// codec runs on the device (the CUDA kernels, which write the CPU's bytes),
// and only the encoded messages cross to page-locked host memory, where the
// host transport (local, MPI) moves them. For a 4-bit codec that is about
// an eighth (plus the per-bucket scales) of the bytes host_staging.h copies
// each way, and the encode and decode run on the GPU instead of the CPU.
//
// Today: alltoall (paper 000 §3.3, the DLRM embedding exchange) with a
// bucketed or cast codec (minmax, qsgd, onebit, fp16, bf16) on float32
// data without scale reuse. Every other device call goes through
// host_staging.h. The bytes on the wire are the host path's, bit for bit,
// so ranks on device and on host memory can meet in one call.
#pragma once

#include <cstddef>

#include "core/codecs/codec.h"
#include "core/codecs/device_message_codec.h"
#include "core/collective_context.h"
#include "core/host_staging.h"

namespace qc {

// Whether an alltoall block of `count` values under `policy` (its codec
// made as `codec`) is staged compressed; *header is then the header every
// block's message carries.
bool alltoall_stages_compressed(const qc_policy_t& policy, const Codec& codec, size_t count,
                                WireHeader* header);

// The alltoall of alltoall_pairwise (same blocks, random keys, order and
// messages), with the encode and decode on the device: send and recv are
// device memory, `stream` orders the work after the caller's; returns once
// recv holds the result. `staging` gives the host and device buffers.
Status alltoall_with_device_codec(CollectiveContext& ctx, const Codec& codec,
                                  const WireHeader& header, const DeviceMemory& mem,
                                  const DeviceMessageCodec& device_codec, HostStaging& staging,
                                  const float* send, float* recv, size_t count_per_rank,
                                  void* stream);

}  // namespace qc
