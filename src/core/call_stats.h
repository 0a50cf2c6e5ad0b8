// One call's run and its bookkeeping: the call context over the
// communicator's transport, the abort that breaks the group when the call
// fails, and the counters qc_comm_get_stats and qc_comm_get_layer_stats
// report (qc_stats_t, qc_layer_stats_t).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/codecs/codec.h"
#include "core/collective_context.h"
#include "core/communicator.h"
#include "core/fnv1a.h"

namespace qc {

// What one call contributes to a layer's counters (see qc_layer_stats_t).
// Its layer's call index (Communicator::layer_calls) keys its random bits.
struct LayerShare {
  std::string name;
  uint64_t count = 0;
  uint64_t logical_bytes = 0;
  double sq_norm = 0;  // of this rank's input
  double weight = 1;   // share of the call's wire bytes and times
};

// The share of a call on one layer: all of it.
std::vector<LayerShare> one_layer(const char* layer, size_t count, size_t logical_bytes,
                                  double sq_norm);

// The random stream (RandomKey::stream) of call `call_index` of `layer`:
// a stable hash of the name, not a table position, so it does not depend on
// which layers were called before.
uint64_t layer_stream(const std::string& layer, uint64_t call_index);

// The streams the next call on `layers` gets, one per share: each share
// takes its layer's next call index, a layer named twice in one call (the
// segments of a fused call) one index per share, in order.
std::vector<uint64_t> next_layer_streams(const Communicator& comm,
                                         const std::vector<LayerShare>& layers);

// Adds a finished call (`ctx` its context) to the communicator's counters
// and to each layer's.
void book_call(Communicator* comm, const Codec& codec, const CollectiveContext& ctx,
               uint64_t logical_bytes, const std::vector<LayerShare>& layers);

// Runs one call's algorithm, then books the counters and, on failure, breaks
// the group so that no peer waits for this rank until its timeout.
template <typename Run>
Status run_collective(Communicator* comm, const Codec& codec, uint64_t signature,
                      uint64_t logical_bytes, const std::vector<LayerShare>& layers, Run&& run) {
  const uint64_t sequence = comm->next_sequence++;
  // Every call counts for its layers once it runs, as it does for the
  // sequence, so all ranks count alike; the indices join the signature, so
  // ranks whose counts differ (a state loaded on one rank only) MISMATCH.
  const std::vector<uint64_t> streams = next_layer_streams(*comm, layers);
  for (const LayerShare& share : layers) comm->layer_calls[share.name] += 1;
  const uint64_t agreed = fnv1a64(streams.data(), streams.size() * sizeof(uint64_t), signature);
  const Deadline deadline = deadline_after(comm->timeout_seconds);
  CollectiveContext ctx(*comm->transport, codec, comm->scratch, sequence, agreed, deadline);
  ctx.set_pipeline_chunk(comm->pipeline_chunk_values);
  if (streams.size() == 1) ctx.set_stream(streams[0]);
  const bool single = layers.size() == 1;
  if (single && !codec.is_lossless() && !comm->emulated) ctx.request_error_estimate();
  Status status = run(ctx);
  if (!status) comm->transport->abort(status);
  book_call(comm, codec, ctx, logical_bytes, layers);
  return status;
}

}  // namespace qc
