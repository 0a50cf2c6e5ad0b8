// qc::Communicator (what a qc_comm_t names): one rank's view of a group. It owns the transport, the layer
// policies, the call counter that keeps calls apart on the wire, and the
// statistics. The collective drivers declared here turn a validated API call
// into an algorithm run: resolve the policy, ask the planner (planner.h) what
// runs it, build the call context, convert to float32, run, convert back.
// They live in allreduce_host.cpp, allreduce_device.cpp, alltoall.cpp,
// scheduled_host.cpp, segments.cpp and comm_create.cpp.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/codecs/device_message_codec.h"
#include "core/collective_context.h"
#include "core/handle_table.h"
#include "core/device_memory.h"
#include "core/plan_log.h"
#include "core/policy_table.h"
#include "core/request_queue.h"
#include "core/staging_memory.h"
#include "core/transports/transport.h"

namespace qc {

class RankScheduler;
struct ErrorBuffer;
struct SparseRows;

// Owned by live_communicators() (core/handle_table.h) from qc_comm_create*
// to qc_comm_destroy; the entry points reach it through a lease.
struct Communicator {
  Communicator() = default;
  ~Communicator() {
    // Requests still queued here (qc_comm_destroy has normally run them
    // out already) end before the members they use go.
    requests.shut_down(0.0, [this] { if (transport != nullptr) transport->abort(destroyed()); },
                       destroyed());
    // Work a stream-ordered call left on the device may wait for a peer
    // that failed before its part and never finish: after the timeout the
    // transport is aborted (which ends NCCL's waiting operations) rather
    // than the destroy hanging, and the staging's device memory is left
    // allocated (core/pending_device_work.h).
    qc::Status idle = staging.pending().wait();
    if (!idle && transport != nullptr) transport->abort(idle);
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Why a request or call ends when its communicator is destroyed.
  static Status destroyed() {
    return transport_error("the communicator was destroyed (qc_comm_destroy) while the call "
                           "was outstanding");
  }

  std::unique_ptr<qc::Transport> transport;
  qc::PolicyTable policies;
  // What QC_DEBUG=info says of the calls (core/plan_log.h).
  qc::PlanLog plan_log;
  double timeout_seconds = 300.0;
  // QC_DEVICE_CODEC at creation: false makes device calls stage whole
  // buffers instead of running the codec on the device.
  bool device_codec = true;
  uint64_t next_sequence = 1;
  // Per layer name: the calls run so far, i.e. the index of its next call,
  // which keys the layer's random bits (call_stats.h: layer_stream). Saved
  // and restored by qc_comm_save_state / qc_comm_load_state.
  std::map<std::string, uint64_t> layer_calls;
  // The non-blocking calls (request_queue.h), run by a progress thread, or
  // inline (QC_PROGRESS_THREAD=0, or a transport that may not be called
  // from another thread).
  qc::RequestQueue requests;
  bool progress_inline = false;
  // QC_PIPELINE_CHUNK at creation, in float32 values: the pieces pipelined
  // schedules cut blocks into on the host (0: whole blocks).
  size_t pipeline_chunk_values = 0;
  // QC_SPARSE_SCHEDULE at creation (a SparseSchedule; -1: auto).
  int sparse_schedule = -1;

  // Reused by every call (the communicator serves one thread at a time).
  qc::Scratch scratch;
  std::vector<float> work;     // the float32 working copy of the input
  std::vector<float> work_out; // alltoall's output before conversion
  // An emulation's virtual rank (emulate.cpp), whose communicator ends
  // with its one call. A float32 allreduce works in the caller's recvbuf
  // instead of `work` (whose pages every fresh emulated group would touch
  // anew), so a failed emulation leaves its recvbufs unspecified (qc.h,
  // qc_emulate_allreduce). Its statistics are never read, so neither the
  // input's norm nor the codec error estimate is measured (two passes over
  // the data per rank). Same bits either way.
  bool emulated = false;
  // The residuals a call works on; swapped with the error buffer's only when
  // the call succeeds, so a failed call leaves the buffer as it was.
  std::vector<float> residual_work;
  // Page-locked host copies of device buffers (core/staging_memory.h).
  qc::HostStaging staging;
  // policy.scale_update_period's kept scales, per collective kind and layer
  // (one entry per layer, restarted when the layer's call shape changes).
  std::map<std::string, qc::ScaleMemory> scale_memory;

  mutable std::mutex stats_mutex;  // get_stats may run on another thread
  qc_stats_t stats{};
  // Per layer name; std::map keeps the names in byte order for
  // qc_comm_layer_name's indices.
  std::map<std::string, qc_layer_stats_t> layer_stats;
  // Per layer name: the calls whose input norm was measured (mean_sq_norm
  // averages over these; a device call enqueued on a stream has none).
  std::map<std::string, uint64_t> layer_norm_samples;
};

// QC_SUCCESS while the group is healthy, else the status that broke it, in
// the words every later call gives ("the communicator is broken by ...").
Status check_healthy(const Communicator* comm);

// Arguments are validated by the API layer before these run.
Status comm_allreduce(Communicator* comm, const void* sendbuf, void* recvbuf, size_t count,
                      qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                      ErrorBuffer* error_buffer);
// An allreduce of float32 device buffers that runs on the device values:
//  - enqueued on `stream` without a copy or a wait when the transport sums
//    device buffers itself (NCCL) and the policy gives the transport's own
//    float sum (codec none under auto or native, without error feedback);
//  - else, given `mem` and `device_codec`, with the codec on the device and
//    only compressed payloads staged (device_staging.h), when the policy
//    allows (allreduce_stages_compressed).
// *ran is false, and nothing done, for every other call: the caller then
// stages it whole (host_staging.h), and *staged_why (when given) says why.
Status comm_allreduce_on_device(Communicator* comm, const DeviceMemory* mem,
                                const DeviceMessageCodec* device_codec, const void* sendbuf,
                                void* recvbuf, size_t count, qc_dtype_t dtype, qc_reduce_op_t op,
                                const char* layer, ErrorBuffer* error_buffer, void* stream,
                                bool* ran, std::string* staged_why = nullptr);
// qc_allreduce after its argument checks: host buffers run comm_allreduce;
// device buffers (as `mem` tells them, nullptr in a build without CUDA) run
// comm_allreduce_on_device when it takes the call, else comm_allreduce on
// staged host copies (host_staging.h).
Status allreduce_placed(Communicator* comm, const DeviceMemory* mem,
                        const DeviceMessageCodec* device_codec, void* stream, const void* sendbuf,
                        void* recvbuf, size_t count, qc_dtype_t dtype, qc_reduce_op_t op,
                        const char* layer, ErrorBuffer* error_buffer);
// One allreduce over a flat buffer of nsegments layers (counts[i] elements
// each, layers[i] the name whose policy applies; layers or an entry may be
// NULL for "*").
Status comm_allreduce_segments(Communicator* comm, const void* sendbuf, void* recvbuf,
                               size_t nsegments, const size_t* counts, const char* const* layers,
                               qc_dtype_t dtype, qc_reduce_op_t op,
                               ErrorBuffer* error_buffer);
// Library-internal: an uncompressed ring sum of `values` over the group
// (identical on every rank); `signature` names what is summed, so ranks
// summing different things get QC_ERROR_MISMATCH.
Status comm_allreduce_exact(Communicator* comm, float* values, size_t count, uint64_t signature);
Status comm_alltoall(Communicator* comm, const void* sendbuf, void* recvbuf, size_t count_per_rank,
                     qc_dtype_t dtype, const char* layer);
// An alltoall of device buffers with the codec on the device (16-bit data
// on float32 copies there), when its policy allows
// (alltoall_stages_compressed): only compressed bytes staged
// (device_staging.h), or, on a transport with device groups (NCCL),
// stream-ordered (the pairwise schedule on executors/device_executor.cpp). *ran is false, and
// nothing done, otherwise (*staged_why, when given, says why).
Status comm_alltoall_on_device(Communicator* comm, const DeviceMemory& mem,
                               const DeviceMessageCodec& device_codec, const void* sendbuf,
                               void* recvbuf, size_t count_per_rank, qc_dtype_t dtype,
                               const char* layer, void* stream, bool* ran,
                               std::string* staged_why = nullptr);
// qc_alltoall after its argument checks: host buffers run comm_alltoall;
// device buffers comm_alltoall_on_device when `device_codec` is given and
// takes the call, else comm_alltoall on staged host copies.
Status alltoall_placed(Communicator* comm, const DeviceMemory* mem,
                       const DeviceMessageCodec* device_codec, void* stream, const void* sendbuf,
                       void* recvbuf, size_t count_per_rank, qc_dtype_t dtype, const char* layer);

// Reduce-scatter, allgather and broadcast (scheduled_host.cpp), on host
// buffers, or device buffers (`mem` tells them; nullptr in a build without
// CUDA) staged whole through host memory. Shapes as qc.h says; broadcast's
// sendbuf is read on the root only.
Status comm_reduce_scatter(Communicator* comm, const DeviceMemory* mem, void* stream,
                           const void* sendbuf, void* recvbuf, size_t recvcount,
                           qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                           ErrorBuffer* error_buffer);
Status comm_allgather(Communicator* comm, const DeviceMemory* mem, void* stream,
                      const void* sendbuf, void* recvbuf, size_t sendcount, qc_dtype_t dtype,
                      const char* layer, ErrorBuffer* error_buffer);
Status comm_broadcast(Communicator* comm, const DeviceMemory* mem, void* stream,
                      const void* sendbuf, void* recvbuf, size_t count, qc_dtype_t dtype,
                      int root, const char* layer);

// A sparse allreduce (sparse_host.cpp): this rank's nnz rows (indices in
// any order, duplicates summed) of row_len values; *result gets the union
// of every rank's indices, ascending, with the summed rows (float32), the
// same bits on every rank.
Status comm_sparse_allreduce(Communicator* comm, const int64_t* indices, const void* values,
                             size_t nnz, size_t row_len, qc_dtype_t dtype, qc_reduce_op_t op,
                             const char* layer, SparseRows* result);
// The same into `dense` (nrows x row_len of dtype; every index < nrows):
// the summed rows at their indices, zeros elsewhere.
Status comm_sparse_allreduce_dense(Communicator* comm, const int64_t* indices, const void* values,
                                   size_t nnz, size_t row_len, size_t nrows, void* dense,
                                   qc_dtype_t dtype, qc_reduce_op_t op, const char* layer);

// The squared L2 norm of a call's input, accumulated in double, for its
// layer statistics; 0 on an emulated rank, whose statistics nobody reads.
double input_norm_for_stats(const Communicator& comm, const float* x, size_t count);

// Creates the n communicators of a local group (all or none) in *group.
// The entry points publish them as handles (handle_table.h). `scheduler`:
// how its ranks wait (null: each rank a thread; an emulation's fibers).
Status create_local_group(int nranks, double timeout_seconds,
                          std::vector<std::unique_ptr<Communicator>>* group,
                          RankScheduler* scheduler = nullptr);

// Creates this rank's communicator over the MPI communicator whose Fortran
// handle is `fortran_handle` (collective over its ranks). QC_ERROR_UNSUPPORTED
// in a build without MPI.
Status create_mpi_comm(int64_t fortran_handle, double timeout_seconds,
                       std::unique_ptr<Communicator>* comm);
// Over qc's own communicator split from `nccl_comm` (an ncclComm_t):
// collective over its ranks. UNSUPPORTED in builds without NCCL.
Status create_nccl_comm(void* nccl_comm, double timeout_seconds,
                        std::unique_ptr<Communicator>* comm);
// Over qc's own NCCL communicator made from a unique id (validated by the
// entry point): collective over its ranks. UNSUPPORTED without NCCL.
Status create_nccl_id_comm(const uint8_t* id, int rank, int nranks, double timeout_seconds,
                           std::unique_ptr<Communicator>* comm);
// A new NCCL unique id (QC_NCCL_UNIQUE_ID_BYTES). UNSUPPORTED without NCCL.
Status create_nccl_unique_id(uint8_t* id);
// Over the caller's callbacks (validated by the entry point): local, no
// message is sent.
Status create_callback_comm(const qc_transport_callbacks_t& callbacks, double timeout_seconds,
                            std::unique_ptr<Communicator>* comm);

}  // namespace qc
