// The real NcclBackend: NCCL found at run time (dlopen of libnccl.so.2, the
// copy the caller's process already loaded when there is one), so a CUDA
// build of libqc loads and runs on machines without NCCL. Only in builds
// with CUDA and NCCL's header (QC_HAVE_NCCL).
#pragma once

#include <cstdint>
#include <memory>

#include "core/transports/nccl_transport.h"

namespace qc {
namespace cuda {

// Splits qc's own communicator off `user_comm` (an ncclComm_t, with
// ncclCommSplit: collective over every rank of it), so qc's traffic, its
// aborts and its destruction never touch the caller's communicator. The
// groups run on a stream of the communicator's device that qc creates.
Status make_nccl_backend(void* user_comm, std::unique_ptr<NcclBackend>* out);

// A new ncclUniqueId (QC_NCCL_UNIQUE_ID_BYTES bytes) written to `id`.
Status make_nccl_unique_id(uint8_t* id);

// qc's own communicator, rank `rank` of `nranks`, made from a unique id
// (ncclCommInitRankConfig, blocking) on the calling thread's current
// device: collective over every rank.
Status make_nccl_backend_from_id(const uint8_t* id, int rank, int nranks,
                                 std::unique_ptr<NcclBackend>* out);

}  // namespace cuda
}  // namespace qc
