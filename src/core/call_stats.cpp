#include "core/call_stats.h"

#include <cmath>
#include <mutex>

#include "core/fnv1a.h"
#include "cpu/random.h"

namespace qc {

std::vector<LayerShare> one_layer(const char* layer, size_t count, size_t logical_bytes,
                                  double sq_norm) {
  LayerShare share;
  share.name = layer != nullptr ? layer : "*";
  share.count = count;
  share.logical_bytes = logical_bytes;
  share.sq_norm = sq_norm;
  return {share};
}

uint64_t layer_stream(const std::string& layer, uint64_t call_index) {
  const uint64_t name = fnv1a64(layer.data(), layer.size());
  return cpu::splitmix64(name ^ cpu::splitmix64(call_index));
}

std::vector<uint64_t> next_layer_streams(const Communicator& comm,
                                         const std::vector<LayerShare>& layers) {
  std::vector<uint64_t> streams;
  streams.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string& name = layers[i].name;
    const auto it = comm.layer_calls.find(name);
    uint64_t index = it != comm.layer_calls.end() ? it->second : 0;
    // Earlier shares of this call on the same layer took the indices before
    // this one (segments are few: a scan, no map per call).
    for (size_t j = 0; j < i; ++j) index += layers[j].name == name ? 1 : 0;
    streams.push_back(layer_stream(name, index));
  }
  return streams;
}

void book_call(Communicator* comm, const Codec& codec, const CollectiveContext& ctx,
               uint64_t logical_bytes, const std::vector<LayerShare>& layers) {
  const bool single = layers.size() == 1;
  const CallCounters& c = ctx.counters();
  std::lock_guard<std::mutex> lock(comm->stats_mutex);
  comm->stats.calls += 1;
  comm->stats.logical_bytes += logical_bytes;
  comm->stats.wire_bytes += c.wire_bytes;
  comm->stats.codec_seconds += c.codec_seconds;
  comm->stats.transport_seconds += c.transport_seconds;
  comm->stats.codec_seconds_in_flight += c.codec_seconds_in_flight;
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
}

}  // namespace qc
