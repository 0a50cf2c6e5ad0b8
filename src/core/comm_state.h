// A communicator's checkpoint (qc_comm_save_state / qc_comm_load_state):
// the call count of every layer, which keys the layer's random bits
// (call_stats.h: layer_stream), so a run resumed in a new communicator
// draws the bits the interrupted one would have.
//
// Image, little-endian:
//    0 magic "QCCS"     4 u32 format version (1)
//    8 u64 layer count
//   16 u64 FNV-1a 64 of bytes [0, 16) and of the entries
//   24 entries, names in strictly increasing byte order:
//      u64 name bytes, the name (no NUL), u64 calls run
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "core/status.h"

namespace qc {

constexpr size_t kCommStateHeaderBytes = 24;

using LayerCalls = std::map<std::string, uint64_t>;

size_t comm_state_image_size(const LayerCalls& calls);
// dst holds comm_state_image_size(calls) bytes.
void save_comm_state(const LayerCalls& calls, uint8_t* dst);
// Checks the whole image before *calls changes: on failure it is as it was.
Status load_comm_state(const uint8_t* src, size_t size, LayerCalls* calls);

}  // namespace qc
