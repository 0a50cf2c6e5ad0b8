// How an allgather phase carries several encoded blocks in one message: the
// host executor's Framing::kBlocks. Payload layout, repeated: u32 slot
// index, u32 reserved (0), u64 blob size, blob bytes. The blobs are the
// owners' encoded blocks, forwarded unchanged (never re-encoded), which is
// what keeps every replica bit-identical.
#pragma once

#include <cstddef>

#include "core/collective_context.h"

namespace qc {

// The receive capacity of a block list of `count` blobs of at most
// `max_blob` bytes each (SIZE_MAX when it does not fit in a size_t).
size_t block_list_capacity(size_t count, size_t max_blob);

// Writes the payloads of slots[first, last) into msg's payload.
void pack_block_list(Message* const* slots, size_t first, size_t last, Message* msg);

// Copies every blob of msg into its slot's payload. The list must name each
// of slots [first, last) exactly once and nothing else: QC_ERROR_CORRUPT_DATA
// otherwise (a damaged or misrouted message).
Status unpack_block_list(const Message& msg, Message* const* slots, size_t first, size_t last);

}  // namespace qc
