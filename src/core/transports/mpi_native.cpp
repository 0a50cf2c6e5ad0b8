// The MPI transport's native collectives (transport.h: the float sum, the
// call agreement): MPI_Iallreduce on transport-owned
// copies, in pieces, under the call's deadline. Apart from the messages
// (mpi_transport.cpp), which they share only the failure state with.
#include <algorithm>
#include <climits>
#include <cstring>

#include "core/transports/backoff.h"
#include "core/transports/mpi_transport.h"

namespace qc {
namespace {
// The native sums' pieces: one MPI_Iallreduce per 4 MiB, all posted at once.
constexpr size_t kNativePieceBytes = size_t{4} << 20;
}  // namespace

Status MpiTransport::run_native(Block* block, size_t count, size_t item, size_t piece,
                                Deadline deadline, const char* what,
                                const std::function<int(void*, int, MPI_Request*)>& start) {
  QC_RETURN_IF_ERROR(failure());
  std::vector<MPI_Request> requests;
  requests.reserve(count / piece + 1);
  for (size_t done = 0; done < count || requests.empty(); done += piece) {
    const size_t n = std::min(piece, count - done);
    requests.push_back(MPI_REQUEST_NULL);
    const int rc = start(block->bytes.get() + done * item, static_cast<int>(n), &requests.back());
    if (rc != MPI_SUCCESS) {
      requests.pop_back();
      Status bad = mpi_error(rc, what);
      abort(bad);
      keep_leftover(std::move(requests), /*collective=*/true, std::move(*block));
      *block = Block();
      return bad;
    }
    if (n == 0) break;
  }
  Backoff backoff;
  for (;;) {
    int flag = 0;
    const int test = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag,
                                 MPI_STATUSES_IGNORE);
    if (test != MPI_SUCCESS) {
      Status bad = mpi_error(test, what);
      abort(bad);
      keep_leftover(std::move(requests), /*collective=*/true, std::move(*block));
      *block = Block();
      return bad;
    }
    // Finished, but a peer may have given up on it meanwhile (it timed out
    // before this rank joined): that rank's notice fails this call too, so
    // that every rank reports the failure.
    if (flag) return poll_abort() ? failure() : Status::ok();
    if (poll_abort() || Clock::now() >= deadline) {
      Status bad = failure() ? timeout_error("rank " + std::to_string(rank_) + " timed out in " +
                                             what + " (a peer is gone, stuck or much slower)")
                             : failure();
      abort(bad);
      // A collective can be neither cancelled nor freed, and may still
      // complete (a late peer joins): its block stays with the transport.
      keep_leftover(std::move(requests), /*collective=*/true, std::move(*block));
      *block = Block();
      return failure();
    }
    backoff.pause();
  }
}

Status MpiTransport::allreduce_float(const float* send, float* recv, size_t count,
                                     Deadline deadline) {
  // Non-blocking and on a copy: a peer that dies or stops inside the sum
  // must not hold this rank past the deadline, and MPI, which may still
  // finish the sum after qc gave up on it, must not write into `recv`.
  // Large sums go as several MPI_Iallreduce at once (kNativePieceBytes):
  // they overlap, which brings OpenMPI's non-blocking schedules close to
  // its blocking, tuned MPI_Allreduce (docs/mpi.md has the measurements).
  const size_t bytes = count * sizeof(float);
  Block block = take_block(bytes);
  if (bytes > 0) std::memcpy(block.bytes.get(), send, bytes);
  QC_RETURN_IF_ERROR(run_native(&block, count, sizeof(float), kNativePieceBytes / sizeof(float),
                                deadline, "the float allreduce",
                                [&](void* piece, int n, MPI_Request* request) {
    return MPI_Iallreduce(MPI_IN_PLACE, piece, n, MPI_FLOAT, MPI_SUM, data_, request);
  }));
  if (bytes > 0) std::memcpy(recv, block.bytes.get(), bytes);
  give_back_block(std::move(block));
  return Status::ok();
}

Status MpiTransport::agree(uint64_t value, Deadline deadline) {
  // min(v) == v and min(~v) == ~v (i.e. max(v) == v) on a rank means every
  // rank passed v; every rank gets the same minima, so all see a difference.
  Block block = take_block(2 * sizeof(uint64_t));
  uint64_t lanes[2] = {value, ~value};
  std::memcpy(block.bytes.get(), lanes, sizeof lanes);
  QC_RETURN_IF_ERROR(run_native(&block, 2, sizeof(uint64_t), 2, deadline, "the call agreement",
                                [&](void* lanes_there, int n, MPI_Request* request) {
    return MPI_Iallreduce(MPI_IN_PLACE, lanes_there, n, MPI_UINT64_T, MPI_MIN, data_, request);
  }));
  std::memcpy(lanes, block.bytes.get(), sizeof lanes);
  give_back_block(std::move(block));
  if (lanes[0] != value || lanes[1] != ~value) {
    return mismatch("the ranks disagree on the count, dtype, op, layer, policy or layer call "
                    "index (qc_comm_load_state) of this call (checked before the transport's "
                    "own allreduce)");
  }
  return Status::ok();
}

}  // namespace qc
