// The local transport: the ranks of a group are threads of this process,
// or the fibers of an emulation (RankScheduler).
//
// Rendezvous, zero intermediate copies: a send only queues a pointer to the
// sender's buffer in the receiver's mailbox; the receiver copies the bytes
// straight into its own buffer and then marks the send consumed. So a send
// completes when its receiver has taken it, and a failed sender withdraws
// what is still queued before its buffer goes away.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "core/transports/transport.h"

namespace qc {

// How the ranks of a local group wait for news (a message for them, or the
// consumption of one of theirs). Without one, each rank is a thread that
// sleeps on its mailbox's condition variable; an emulation's virtual ranks
// are fibers that hand their thread to another rank instead
// (core/fiber_ranks.h), so N ranks need no N threads.
class RankScheduler {
 public:
  virtual ~RankScheduler() = default;
  // Called by `rank` with its mailbox locked (`lock`), after it found
  // nothing to do; returns, locked again, once there may be news or the
  // deadline has passed (the caller checks which).
  virtual void wait(int rank, std::unique_lock<std::mutex>& lock, Deadline deadline) = 0;
  // There may be news for `rank` (called after the news was made, with no
  // mailbox locked).
  virtual void notify(int rank) = 0;
};

class LocalGroup {
 public:
  // `scheduler` (null: threads) must outlive the group's waits.
  explicit LocalGroup(int nranks, RankScheduler* scheduler = nullptr);

  int size() const { return static_cast<int>(mailboxes_.size()); }

  // Lives as long as either side needs it; `consumed` is guarded by the
  // sender's mailbox mutex.
  struct SendState {
    bool consumed = false;
  };
  struct Message {
    int source;
    uint64_t tag;
    const uint8_t* data;
    size_t bytes;
    size_t frame;  // the capacity the sender expects the receive to have
    std::shared_ptr<SendState> state;
  };
  // A rank's mailbox: messages queued for it, and the condition variable it
  // sleeps on for both arrivals and the consumption of its own sends.
  struct Mailbox {
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<Message> queue;
  };

  Mailbox& mailbox(int rank) { return *mailboxes_[rank]; }
  // Tells `rank` there may be news in its mailbox, news written under that
  // mailbox's lock (no mailbox lock held now).
  void notify(int rank);
  // `rank` (its mailbox locked by `lock`) waits for news or the deadline.
  void wait(int rank, std::unique_lock<std::mutex>& lock, Deadline deadline);
  void fail(const Status& reason);
  Status failure() const;
  bool has_failed() const { return failed_.load(std::memory_order_acquire); }
  void depart(int rank);
  bool departed(int rank) const { return departed_[rank].load(std::memory_order_acquire); }

 private:
  void wake_everyone();

  std::vector<std::unique_ptr<Mailbox>> mailboxes_;
  RankScheduler* scheduler_;
  std::unique_ptr<std::atomic<bool>[]> departed_;
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mutex_;
  Status failure_;
};

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<LocalGroup> group, int rank);
  ~LocalTransport() override;

  const char* name() const override { return "local"; }
  // A transfer is the receiver's copy, made while it waits.
  bool transfers_overlap_compute() const override { return false; }
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  Status post_send(int peer, uint64_t tag, const void* data, size_t bytes, size_t frame,
                   Request* req) override;
  Status post_recv(int peer, uint64_t tag, void* buffer, size_t capacity, Request* req) override;
  Status wait_all(Request* reqs, size_t count, Deadline deadline) override;
  void abort(const Status& reason) override;
  Status failure() const override { return group_->failure(); }

 private:
  // Under the own mailbox lock: takes the next message from req.peer if it
  // is there. Sets *consumed_state to the sender's state to be signalled.
  Status try_receive(std::deque<LocalGroup::Message>& queue, Request& req,
                     std::shared_ptr<LocalGroup::SendState>* consumed_state);
  void signal_consumed(int sender, const std::shared_ptr<LocalGroup::SendState>& state);
  void withdraw_sends(Request* reqs, size_t count);
  Status fail_waiting(Request* reqs, size_t count, Status status);

  std::shared_ptr<LocalGroup> group_;
  int rank_;
};

}  // namespace qc
