// The MPI transport: ranks are the processes of an MPI communicator the
// application already has (given as its Fortran handle, MPI_Comm_c2f).
//
// qc duplicates that communicator twice, so its traffic never meets the
// application's: `data` carries the collectives' messages, `control` the
// abort notices that break the group on every rank at once.
//
// Point to point is MPI_Isend / MPI_Irecv with MPI_ANY_TAG on `data`. MPI
// keeps the messages of one sender in order, so the next message from a peer
// is the one a receive expects; its MPI tag (a 15-bit hash of qc's 64-bit
// tag, MPI guaranteeing only tags up to 32767) is checked and a different one
// is QC_ERROR_MISMATCH, as the transport contract asks.
//
// Waiting tests the requests, looks for abort notices and checks the
// deadline; between rounds it yields, then sleeps with a growing pause
// (up to 1 ms), so a rank waiting for a slow peer does not burn a core.
//
// Uncompressed allreduces (codec none under QC_ALGO_AUTO or NATIVE) skip
// qc's messages: agree() checks, with a 16-byte MPI_Iallreduce under the
// deadline, that every rank is in the same call (the signature), then
// allreduce_float() is one blocking MPI_Allreduce. Blocking, because after
// the agreement only a crash or a stopped process could keep it from
// returning, and MPI's tuned blocking algorithms are much faster than its
// non-blocking schedules. Ranks that disagree on whether a call is
// compressed at all (one on qc's messages, one on MPI_Allreduce) cannot
// compare signatures: they fail with QC_ERROR_TIMEOUT at the deadline.
//
// A rank that fails (timeout, mismatch, damaged data) sends every peer an
// abort notice with its status; a peer that sees one fails its current and
// every later call with that status. Requests still pending then are
// cancelled (receives) or released (sends); the communicator is broken.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/transports/transport.h"

namespace qc {

class MpiTransport final : public Transport {
 public:
  // Duplicates the communicator with this Fortran handle (MPI_Comm_c2f),
  // collectively over its ranks. MPI must be initialized by the caller.
  static Status create(MPI_Fint fortran_handle, std::unique_ptr<Transport>* out);
  ~MpiTransport() override;

  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status post_send(int peer, uint64_t tag, const void* data, size_t bytes, size_t frame,
                   Request* req) override;
  Status post_recv(int peer, uint64_t tag, void* buffer, size_t capacity, Request* req) override;
  Status wait_all(Request* reqs, size_t count, Deadline deadline) override;
  bool has_native_integer_allreduce() const override { return true; }
  Status allreduce_int64(int64_t* values, size_t count, int width, Deadline deadline) override;
  bool has_native_float_allreduce() const override { return true; }
  Status allreduce_float(const float* send, float* recv, size_t count, Deadline deadline) override;
  Status agree(uint64_t value, Deadline deadline) override;
  void abort(const Status& reason) override;
  Status failure() const override;
  uint64_t instance_id() const override { return instance_id_; }

 private:
  MpiTransport(MPI_Comm data, MPI_Comm control, int rank, int size, uint64_t instance_id);
  Status mpi_error(int code, const char* what) const;
  // Receives any abort notice that has arrived; true if the group is broken.
  bool poll_abort();
  void set_failure(const Status& s);
  void release_pending(Request* reqs, size_t count);
  // Waits for one MPI collective request; `what` names it in errors.
  Status wait_collective(MPI_Request* request, Deadline deadline, const char* what);
  // Waits for the MPI requests in `pending` (null entries are done).
  Status wait_requests(std::vector<MPI_Request*>& pending, Deadline deadline);

  MPI_Comm data_;
  MPI_Comm control_;
  int rank_;
  int size_;
  // Agreed by the ranks at creation. OpenMPI reuses a freed communicator's
  // context id, so messages of an earlier, failed qc communicator can
  // arrive on this one: its notices and envelopes carry the id they belong to.
  uint64_t instance_id_;
  mutable std::mutex failure_mutex_;
  Status failure_;
  bool notified_ = false;              // abort notices sent
  std::vector<MPI_Request> notices_;   // their send requests
  std::vector<std::string> notice_text_;
  std::vector<MPI_Request> orphans_;   // collectives abandoned at a failure
};

}  // namespace qc
