// The host executor: runs any schedule (core/schedules/) one step after
// another on this thread, each slot a message of the call's scratch, the
// transfers over the call's transport (CollectiveContext). Sends and
// receives are posted as the schedule reaches them and awaited at its
// waits; a received message's envelope is checked before any byte of it is
// read. The call's values may be host memory or, with DeviceValues set on
// the context, device memory (the codec then runs on the device and only
// payloads cross).
#pragma once

#include "core/collective_context.h"
#include "core/schedules/schedule.h"

namespace qc {

// `input` is read by Values::kInput spans, `output` written by kOutput ones
// (an allreduce passes its working values as both).
Status run_on_host(CollectiveContext& ctx, const Schedule& schedule, const float* input,
                   float* output);

// Only the schedule's transfers, on payloads encoded elsewhere: slot i is
// *slots[i], already holding what is sent; received slots are filled.
Status run_transfers_on_host(CollectiveContext& ctx, const Schedule& schedule,
                             Message* const* slots);

}  // namespace qc
