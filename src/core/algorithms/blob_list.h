// The encoded final blocks of an allreduce, and how allgather phases carry
// several of them in one message. Allgathers forward these bytes unchanged
// (never re-encode), which is what keeps every replica bit-identical.
//
// Payload layout of a blob-list message, repeated: u32 block index,
// u32 reserved (0), u64 blob size, blob bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "core/collective_context.h"

namespace qc {

class BlockBlobs {
 public:
  // `storage` outlives calls so blob buffers keep their capacity.
  BlockBlobs(std::vector<std::vector<uint8_t>>& storage, size_t nblocks)
      : blobs_(storage), present_(nblocks, false) {
    if (blobs_.size() < nblocks) blobs_.resize(nblocks);
  }

  size_t size() const { return present_.size(); }
  bool has(size_t block) const { return present_[block]; }
  void set(size_t block, const uint8_t* data, size_t size);

  // Writes blocks [first, last) (all must be present) into msg's payload.
  void pack(size_t first, size_t last, Message* msg) const;
  // Payload capacity needed to receive `nblocks` blobs of at most max_blob bytes.
  static size_t pack_capacity(size_t nblocks, size_t max_blob);
  // Stores every blob of msg; checks indices and sizes (QC_ERROR_CORRUPT_DATA).
  Status unpack(const Message& msg);

  // Decodes block b into data[range of b] for every block; all must be present.
  Status decode_all(CollectiveContext& ctx, float* data, size_t count) const;

 private:
  std::vector<std::vector<uint8_t>>& blobs_;
  std::vector<bool> present_;
};

}  // namespace qc
