// The MPI transport: ranks are the processes of an MPI communicator the
// application already has (given as its Fortran handle, MPI_Comm_c2f).
//
// qc duplicates that communicator twice, so its traffic never meets the
// application's: `data` carries the collectives' messages, `control` the
// abort notices that break the group on every rank at once.
//
// Point to point never lets a peer decide how many bytes land in qc's
// memory. A receive is not posted to MPI up front: when its turn comes (MPI
// keeps one sender's messages in order, and so do qc's receives from one
// peer), MPI_Improbe on `data` (MPI_ANY_TAG) matches the peer's next message
// and tells its size; one longer than the receive's capacity, or with
// another MPI tag (a 15-bit hash of qc's 64-bit tag, MPI guaranteeing only
// tags up to 32767), is QC_ERROR_MISMATCH and is never received. Otherwise
// MPI_Imrecv takes exactly that many bytes. (Posting a receive of the
// expected size and relying on MPI to truncate a longer message is not
// safe: OpenMPI's shared-memory single-copy path, CMA, writes it whole.)
//
// Every byte MPI reads or writes after post_* returns is memory the
// transport owns: sends are copied into a staging block, receives land in
// one and are copied out once complete, native collectives work on a copy.
// An operation still pending when a call fails (timeout, abort notice,
// mismatch) keeps its block: it moves to `leftovers_` and stays there until
// the transport is destroyed, so a late completion never writes into the
// caller's buffers or into memory qc has freed. The destructor frees the
// blocks of operations that finished by then and leaks the rest (MPI may
// still touch them), as it leaks a failed group's two communicators.
//
// Waiting tests the requests, looks for abort notices and checks the
// deadline; between rounds it yields, then sleeps with a growing pause
// (up to 1 ms), so a rank waiting for a slow peer does not burn a core.
//
// Uncompressed allreduces (codec none under QC_ALGO_AUTO or NATIVE) skip
// qc's messages: agree() checks, with a 16-byte MPI_Iallreduce, that every
// rank is in the same call (the signature), then allreduce_float() is an
// MPI_Iallreduce on a staging copy. Both are
// polled against the call's deadline, so a peer that dies or stops inside
// them gives QC_ERROR_TIMEOUT like any other step. Ranks that disagree on
// whether a call is compressed at all (one on qc's messages, one in
// MPI_Iallreduce) cannot compare signatures: they fail with
// QC_ERROR_TIMEOUT at the deadline.
//
// A rank that fails (timeout, mismatch, damaged data) sends every peer an
// abort notice with its status; a peer that sees one fails its current and
// every later call with that status; the communicator is broken.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/transports/transport.h"

namespace qc {

struct MpiRequestState;

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
  bool has_native_float_allreduce() const override { return true; }
  // MPI_Query_thread at creation: only MPI_THREAD_MULTIPLE lets qc's thread
  // call MPI beside the program's own calls.
  bool supports_progress_thread() const override { return thread_multiple_; }
  // Matches arrived messages to posted receives, which drives MPI's
  // progress engine for the sends too.
  Status progress() override;
  Status allreduce_float(const float* send, float* recv, size_t count, Deadline deadline) override;
  Status agree(uint64_t value, Deadline deadline) override;
  void abort(const Status& reason) override;
  void interrupt(const Status& reason) override;
  Status failure() const override;
  uint64_t instance_id() const override { return instance_id_; }

 private:
  friend struct MpiRequestState;

  // Memory the transport owns for one MPI operation (see the file comment).
  struct Block {
    std::unique_ptr<uint8_t[]> bytes;
    size_t capacity = 0;
  };
  // An operation abandoned while MPI may still use its block.
  struct Leftover {
    std::vector<MPI_Request> requests;
    bool collective = false;  // MPI forbids freeing a collective's request
    Block block;
  };

  MpiTransport(MPI_Comm data, MPI_Comm control, int rank, int size, uint64_t instance_id);
  Status mpi_error(int code, const char* what) const;
  // Receives any abort notice that has arrived; true if the group is broken.
  bool poll_abort();
  void set_failure(const Status& s);
  // A block of at least `bytes` (from the free list when one fits).
  Block take_block(size_t bytes);
  void give_back_block(Block block);
  // Keeps an unfinished operation's block alive until destruction.
  void keep_leftover(std::vector<MPI_Request> requests, bool collective, Block block);
  // Matches, in post order per peer, the next message of every peer whose
  // oldest unmatched receive is waiting, and starts its MPI_Imrecv.
  Status match_receives();
  Status match_receive(MpiRequestState& state);
  // Tests one request; sets req.done and copies a receive out when it is.
  Status progress(Request& req);
  // Runs an MPI collective on the `count` items (of `item` bytes) in
  // `block`, in place, as pieces of at most `piece` items all started at
  // once by `start(piece's first byte, its items, request)`, until they
  // finish or the deadline passes; `what` names it in errors.
  Status run_native(Block* block, size_t count, size_t item, size_t piece, Deadline deadline,
                    const char* what,
                    const std::function<int(void*, int, MPI_Request*)>& start);

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
  // Per peer, the receives not yet matched to a message, oldest first.
  std::vector<std::deque<std::weak_ptr<MpiRequestState>>> unmatched_;
  std::vector<Block> free_blocks_;
  std::vector<Leftover> leftovers_;
  bool thread_multiple_ = false;
};

}  // namespace qc
