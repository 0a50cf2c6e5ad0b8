// The stream-ordered executor: runs any schedule on device values with
// every step enqueued on the call's stream (the codec's kernels, and the
// transport's device sends and receives, one group per wait) and nothing
// awaited, so the call returns before the GPU has done its work, as an
// NCCL collective does. The same schedule on the host executor gives the
// same bits.
//
// Each slot is a payload in the call's device payload memory, at a size
// fixed by the call's shape: no envelope or wire header travels (the
// agreement before the call fixed the codec and every size), and the
// memory the slots take is known before the call (device_payload_bytes),
// to be reserved. The stream orders a slot's decode before a later step
// overwrites it, so a slot may serve several steps.
#pragma once

#include <cstddef>

#include "core/codecs/codec.h"
#include "core/collective_context.h"
#include "core/schedules/schedule.h"

namespace qc {

// The device payload memory the schedule's slots take under `codec`.
Status device_payload_bytes(const Schedule& schedule, const Codec& codec, size_t* bytes);
// The same, for slots that all hold payloads of `payload` bytes.
size_t device_payload_bytes(const Schedule& schedule, size_t payload);

// Runs the schedule on the call's device values (CollectiveContext's
// DeviceValues, whose payload memory must hold device_payload_bytes);
// `name` says which algorithm in an error.
Status run_enqueued(CollectiveContext& ctx, const Schedule& schedule, const float* input,
                    float* output, const char* name);

}  // namespace qc
