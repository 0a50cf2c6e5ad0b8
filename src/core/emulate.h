// Emulation (paper 000 3.2): N virtual ranks of a local group running
// exactly the code a real run runs, each on a fiber (core/fiber_ranks.h),
// all of them on one thread per core.
#pragma once

#include <functional>

#include "core/status.h"

namespace qc {

struct EmulationArgs {
  int nranks = 0;
  const void* const* sendbufs = nullptr;
  void* const* recvbufs = nullptr;
  const char* layer = nullptr;  // NULL: "*"
  uint64_t call_index = 0;      // which call of the layer is emulated
  qc_policy_t policy{};
};

Status check_emulation_args(int nranks, const void* const* sendbufs, void* const* recvbufs,
                            const char* layer, uint64_t call_index, const qc_policy_t* policy,
                            EmulationArgs* args);
// The same without the buffers (args->sendbufs and recvbufs stay NULL).
Status check_emulation_group(int nranks, const char* layer, uint64_t call_index,
                             const qc_policy_t* policy, EmulationArgs* args);
// A rank's argument error, naming the rank.
Status for_rank(int r, const Status& s);

struct Communicator;
// Creates the group, gives every rank the policy, runs body(rank, comm) for
// every rank (each on a fiber), and returns the first failure by rank order.
Status emulate_ranks(const EmulationArgs& args,
                     const std::function<Status(int, Communicator*)>& body);
struct ErrorBuffer;

// error_buffers: NULL, or one per rank (entries may be NULL).
Status emulate_allreduce(const EmulationArgs& args, size_t count, qc_dtype_t dtype,
                         qc_reduce_op_t op, ErrorBuffer* const* error_buffers);
Status emulate_alltoall(const EmulationArgs& args, size_t count_per_rank, qc_dtype_t dtype);

Status emulate_reduce_scatter(const EmulationArgs& args, size_t recvcount, qc_dtype_t dtype,
                              qc_reduce_op_t op, ErrorBuffer* const* error_buffers);
Status emulate_allgather(const EmulationArgs& args, size_t sendcount, qc_dtype_t dtype,
                         ErrorBuffer* const* error_buffers);
Status emulate_broadcast(const EmulationArgs& args, size_t count, qc_dtype_t dtype, int root);

// The argument checks of the collectives (api_collectives.cpp), shared by
// their blocking, non-blocking and emulated entry points.
Status validate_allreduce(const void* sendbuf, void* recvbuf, size_t count, qc_dtype_t dtype,
                          qc_reduce_op_t op);
Status validate_alltoall(int nranks, const void* sendbuf, void* recvbuf, size_t count_per_rank,
                         qc_dtype_t dtype);
Status validate_reduce_scatter(int nranks, int rank, const void* sendbuf, void* recvbuf,
                               size_t recvcount, qc_dtype_t dtype, qc_reduce_op_t op);
Status validate_allgather(int nranks, int rank, const void* sendbuf, void* recvbuf,
                          size_t sendcount, qc_dtype_t dtype);
Status validate_broadcast(int nranks, int rank, const void* sendbuf, void* recvbuf, size_t count,
                          qc_dtype_t dtype, int root);

}  // namespace qc
