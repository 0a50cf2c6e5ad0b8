// The local transport: the ranks of a group are threads of this process.
// Sends are eager (the bytes are copied into the receiver's mailbox at once),
// so no send ever waits for its receiver and no step can deadlock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "core/transports/transport.h"

namespace qc {

class LocalGroup {
 public:
  explicit LocalGroup(int nranks);

  int size() const { return static_cast<int>(mailboxes_.size()); }

  struct Message {
    int source;
    uint64_t tag;
    std::vector<uint8_t> bytes;
  };
  struct Mailbox {
    std::mutex mutex;
    std::condition_variable arrived;
    std::deque<Message> queue;
  };

  Mailbox& mailbox(int rank) { return *mailboxes_[rank]; }
  void fail(const Status& reason);
  Status failure() const;
  bool has_failed() const { return failed_.load(std::memory_order_acquire); }
  void depart(int rank);
  bool departed(int rank) const { return departed_[rank].load(std::memory_order_acquire); }

 private:
  void wake_everyone();

  std::vector<std::unique_ptr<Mailbox>> mailboxes_;
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
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  Status post_send(int peer, uint64_t tag, const void* data, size_t bytes, Request* req) override;
  Status post_recv(int peer, uint64_t tag, void* buffer, size_t capacity, Request* req) override;
  Status wait_all(Request* reqs, size_t count, Deadline deadline) override;
  void abort(const Status& reason) override;
  Status failure() const override { return group_->failure(); }

 private:
  Status wait_recv(Request& req, Deadline deadline);

  std::shared_ptr<LocalGroup> group_;
  int rank_;
};

}  // namespace qc
