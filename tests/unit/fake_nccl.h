// A stand-in for NCCL in the unit tests (qc::NcclBackend): the ranks of one
// "communicator" are threads, and the "device buffer" of a group is the
// transport's host image itself, so the NCCL transport's framing, grouping,
// timeouts and aborts run in CI without a GPU.
//
// It is stricter than NCCL where NCCL would hang or corrupt memory instead of
// reporting: a send matched with a receive of another size, or allreduces of
// another count or type on different ranks, are recorded (size_mismatch())
// and fail the ranks' groups. An allreduce completes once every rank has
// started its own, and sums in rank order. Sends complete only when
// their receive is posted (rendezvous), the most deadlock-prone behaviour
// real NCCL can show, so a schedule that passes here cannot deadlock there
// for want of buffering.
#ifndef QC_TESTS_UNIT_FAKE_NCCL_H
#define QC_TESTS_UNIT_FAKE_NCCL_H

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/transports/nccl_transport.h"

namespace qcfake {

class FakeNcclWorld : public std::enable_shared_from_this<FakeNcclWorld> {
 public:
  static std::shared_ptr<FakeNcclWorld> create(int nranks);

  std::unique_ptr<qc::NcclBackend> backend(int rank);
  int size() const { return nranks_; }
  // "" unless a send met a receive of another size (the first such pair).
  std::string size_mismatch() const;
  // Groups started by `rank` so far (one per transport wait with messages).
  long groups(int rank) const;
  // Allreduces started by `rank` so far, of each reduction.
  long allreduces(int rank, qc::NcclReduction reduction) const;
  // Allreduces of device buffers enqueued by `rank` so far, and the stream
  // of its last one (or group's). "Device" buffers are host memory here; an
  // enqueued allreduce completes when the last rank enqueues its own.
  long enqueued(int rank) const;
  // Groups of sends and receives on device buffers enqueued by `rank` so far.
  long device_groups(int rank) const;
  void* last_stream(int rank) const;
  // What check_device_buffers says of `p`: on another device.
  void set_foreign_buffer(const void* p);
  // What async_error reports on `rank` from now on.
  void set_async_error(int rank, const qc::Status& error);
  bool aborted(int rank) const;

  // One rank's started allreduce, until every rank has started its own.
  struct Allreduce {
    int rank;
    const void* send;
    void* recv;  // the same as send for the backend's in-place allreduces
    size_t count;
    qc::NcclReduction reduction;
    bool average = false;
    bool done = false;
  };

 private:
  explicit FakeNcclWorld(int nranks);
  friend class FakeNcclBackend;

  struct Op {
    int rank;
    qc::NcclOp op;
    uint8_t* image;
    bool done = false;
  };
  // Under mutex_: pairs the oldest pending send and receive of each channel,
  // and completes the oldest allreduce once every rank has started it.
  void match_locked();
  void reduce_locked();

  int nranks_;
  mutable std::mutex mutex_;
  // Channel (from, to): sends posted by `from`, receives posted by `to`.
  std::vector<std::deque<std::shared_ptr<Op>>> sends_, recvs_;
  std::vector<std::deque<std::shared_ptr<Allreduce>>> allreduces_;  // per rank, in order
  std::vector<long> groups_;
  std::vector<std::vector<long>> allreduce_counts_;  // [rank][reduction]
  std::vector<long> enqueued_;
  std::vector<long> device_groups_;
  std::vector<void*> last_stream_;
  const void* foreign_ = nullptr;
  std::vector<qc::Status> async_errors_;
  std::vector<bool> aborted_;
  std::string size_mismatch_;
};

}  // namespace qcfake

#endif  // QC_TESTS_UNIT_FAKE_NCCL_H
