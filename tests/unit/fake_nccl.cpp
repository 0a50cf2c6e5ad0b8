#include "fake_nccl.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace qcfake {

class FakeNcclBackend final : public qc::NcclBackend {
 public:
  FakeNcclBackend(std::shared_ptr<FakeNcclWorld> world, int rank)
      : world_(std::move(world)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->nranks_; }

  qc::Status start(uint8_t* image, size_t image_bytes,
                   const std::vector<qc::NcclOp>& ops) override {
    std::lock_guard<std::mutex> lock(world_->mutex_);
    if (world_->aborted_[rank_]) return qc::transport_error("fake NCCL: communicator aborted");
    group_.clear();
    allreduce_.reset();
    ++world_->groups_[rank_];
    for (const qc::NcclOp& op : ops) {
      if (op.offset + op.bytes > image_bytes || op.peer < 0 || op.peer >= size() ||
          op.peer == rank_) {
        return qc::internal_error("fake NCCL: an op outside the image or to a bad peer");
      }
      auto o = std::make_shared<FakeNcclWorld::Op>(FakeNcclWorld::Op{rank_, op, image});
      const int n = size();
      if (op.send) {
        world_->sends_[static_cast<size_t>(rank_ * n + op.peer)].push_back(o);
      } else {
        world_->recvs_[static_cast<size_t>(op.peer * n + rank_)].push_back(o);
      }
      group_.push_back(std::move(o));
    }
    return qc::Status::ok();
  }

  qc::Status start_allreduce(void* data, size_t count, qc::NcclReduction reduction) override {
    std::lock_guard<std::mutex> lock(world_->mutex_);
    if (world_->aborted_[rank_]) return qc::transport_error("fake NCCL: communicator aborted");
    group_.clear();
    allreduce_ = std::make_shared<FakeNcclWorld::Allreduce>(
        FakeNcclWorld::Allreduce{rank_, data, data, count, reduction});
    world_->allreduces_[static_cast<size_t>(rank_)].push_back(allreduce_);
    ++world_->allreduce_counts_[static_cast<size_t>(rank_)][static_cast<size_t>(reduction)];
    return qc::Status::ok();
  }

  qc::Status enqueue_allreduce(const float* send, float* recv, size_t count, bool average,
                               void* stream) override {
    std::lock_guard<std::mutex> lock(world_->mutex_);
    if (world_->aborted_[rank_]) return qc::transport_error("fake NCCL: communicator aborted");
    world_->allreduces_[static_cast<size_t>(rank_)].push_back(
        std::make_shared<FakeNcclWorld::Allreduce>(FakeNcclWorld::Allreduce{
            rank_, send, recv, count, qc::NcclReduction::kSumFloat32, average}));
    ++world_->enqueued_[static_cast<size_t>(rank_)];
    world_->last_stream_[static_cast<size_t>(rank_)] = stream;
    world_->reduce_locked();  // "the stream" runs it once every rank has it
    return qc::Status::ok();
  }

  // "The stream" runs the group before this returns: the ranks are threads,
  // so the peers' groups meet this one here, and a group that can never
  // complete (a peer aborted, or another schedule) is reported, not hung.
  qc::Status enqueue_group(const qc::DeviceTransfer* ops, size_t count, void* stream) override {
    std::vector<std::shared_ptr<FakeNcclWorld::Op>> group;
    {
      std::lock_guard<std::mutex> lock(world_->mutex_);
      if (world_->aborted_[rank_]) return qc::transport_error("fake NCCL: communicator aborted");
      ++world_->device_groups_[static_cast<size_t>(rank_)];
      world_->last_stream_[static_cast<size_t>(rank_)] = stream;
      const int n = size();
      for (size_t i = 0; i < count; ++i) {
        const qc::DeviceTransfer& t = ops[i];
        if (t.peer < 0 || t.peer >= n || t.peer == rank_ || (t.data == nullptr && t.bytes > 0)) {
          return qc::internal_error("fake NCCL: a device op to a bad peer or without data");
        }
        auto o = std::make_shared<FakeNcclWorld::Op>(FakeNcclWorld::Op{
            rank_, qc::NcclOp{t.send, t.peer, 0, t.bytes}, static_cast<uint8_t*>(t.data)});
        if (t.send) {
          world_->sends_[static_cast<size_t>(rank_ * n + t.peer)].push_back(o);
        } else {
          world_->recvs_[static_cast<size_t>(t.peer * n + rank_)].push_back(o);
        }
        group.push_back(std::move(o));
      }
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(world_->mutex_);
        if (world_->aborted_[rank_]) return qc::transport_error("fake NCCL: communicator aborted");
        if (!world_->size_mismatch_.empty()) {
          return qc::internal_error("fake NCCL: " + world_->size_mismatch_);
        }
        world_->match_locked();
        bool done = true;
        for (const auto& o : group) {
          if (o->done) continue;
          done = false;
          if (world_->aborted_[static_cast<size_t>(o->op.peer)]) {
            return qc::transport_error("fake NCCL: peer " + std::to_string(o->op.peer) +
                                       " aborted with this group pending");
          }
        }
        if (done) return qc::Status::ok();
      }
      if (std::chrono::steady_clock::now() > give_up) {
        return qc::internal_error("fake NCCL: an enqueued group never completed");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  qc::Status check_device_buffers(const void* send, const void* recv) override {
    std::lock_guard<std::mutex> lock(world_->mutex_);
    if (world_->foreign_ != nullptr && (send == world_->foreign_ || recv == world_->foreign_)) {
      return qc::invalid_argument("fake NCCL: a buffer on another device");
    }
    return qc::Status::ok();
  }

  qc::Status async_error() override {
    std::lock_guard<std::mutex> lock(world_->mutex_);
    return world_->async_errors_[static_cast<size_t>(rank_)];
  }

  qc::Status poll(bool* done) override {
    std::lock_guard<std::mutex> lock(world_->mutex_);
    if (world_->aborted_[rank_]) return qc::transport_error("fake NCCL: communicator aborted");
    if (!world_->size_mismatch_.empty()) {
      return qc::internal_error("fake NCCL: " + world_->size_mismatch_);
    }
    world_->match_locked();
    world_->reduce_locked();
    *done = std::all_of(group_.begin(), group_.end(),
                        [](const std::shared_ptr<FakeNcclWorld::Op>& o) { return o->done; }) &&
            (allreduce_ == nullptr || allreduce_->done);
    return qc::Status::ok();
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(world_->mutex_);
    world_->aborted_[rank_] = true;
    // Like ncclCommAbort: this rank's pending operations vanish; its peers'
    // matching operations never complete (they time out in turn).
    auto mine = [this](const std::shared_ptr<FakeNcclWorld::Op>& o) { return o->rank == rank_; };
    for (auto& q : world_->sends_) q.erase(std::remove_if(q.begin(), q.end(), mine), q.end());
    for (auto& q : world_->recvs_) q.erase(std::remove_if(q.begin(), q.end(), mine), q.end());
    world_->allreduces_[static_cast<size_t>(rank_)].clear();
    group_.clear();
    allreduce_.reset();
  }

 private:
  std::shared_ptr<FakeNcclWorld> world_;
  int rank_;
  std::vector<std::shared_ptr<FakeNcclWorld::Op>> group_;
  std::shared_ptr<FakeNcclWorld::Allreduce> allreduce_;
};

std::shared_ptr<FakeNcclWorld> FakeNcclWorld::create(int nranks) {
  return std::shared_ptr<FakeNcclWorld>(new FakeNcclWorld(nranks));
}

FakeNcclWorld::FakeNcclWorld(int nranks)
    : nranks_(nranks),
      sends_(static_cast<size_t>(nranks * nranks)),
      recvs_(static_cast<size_t>(nranks * nranks)),
      allreduces_(static_cast<size_t>(nranks)),
      groups_(static_cast<size_t>(nranks), 0),
      allreduce_counts_(static_cast<size_t>(nranks), std::vector<long>(4, 0)),
      enqueued_(static_cast<size_t>(nranks), 0),
      device_groups_(static_cast<size_t>(nranks), 0),
      last_stream_(static_cast<size_t>(nranks), nullptr),
      async_errors_(static_cast<size_t>(nranks)),
      aborted_(static_cast<size_t>(nranks), false) {}

std::unique_ptr<qc::NcclBackend> FakeNcclWorld::backend(int rank) {
  return std::make_unique<FakeNcclBackend>(shared_from_this(), rank);
}

void FakeNcclWorld::match_locked() {
  for (size_t c = 0; c < sends_.size(); ++c) {
    auto& sq = sends_[c];
    auto& rq = recvs_[c];
    while (!sq.empty() && !rq.empty()) {
      Op& s = *sq.front();
      Op& r = *rq.front();
      if (s.op.bytes != r.op.bytes) {
        if (size_mismatch_.empty()) {
          size_mismatch_ = "rank " + std::to_string(s.rank) + " sent " +
                           std::to_string(s.op.bytes) + " bytes to rank " +
                           std::to_string(r.rank) + ", which received " +
                           std::to_string(r.op.bytes);
        }
        return;
      }
      std::memcpy(r.image + r.op.offset, s.image + s.op.offset, s.op.bytes);
      s.done = r.done = true;
      sq.pop_front();
      rq.pop_front();
    }
  }
}

namespace {

// Element i of every rank's buffer, combined in rank order (float sums are
// not associative: rank order is one fixed order, as NCCL's is for a fixed
// ring), written back to every rank.
template <typename T, typename Combine>
void reduce_all(const std::vector<std::shared_ptr<FakeNcclWorld::Allreduce>>& ops, Combine f) {
  const size_t count = ops.front()->count;
  const bool average = ops.front()->average;
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(ops.front()->send)[i];
    for (size_t r = 1; r < ops.size(); ++r) acc = f(acc, static_cast<const T*>(ops[r]->send)[i]);
    if (average) acc = static_cast<T>(acc / static_cast<T>(ops.size()));
    for (const auto& op : ops) static_cast<T*>(op->recv)[i] = acc;
  }
}

}  // namespace

void FakeNcclWorld::reduce_locked() {
  for (;;) {
    std::vector<std::shared_ptr<Allreduce>> front;
    for (auto& q : allreduces_) {
      if (q.empty()) return;
      front.push_back(q.front());
    }
    const Allreduce& first = *front.front();
    for (const auto& op : front) {
      if (op->count != first.count || op->reduction != first.reduction ||
          op->average != first.average) {
        if (size_mismatch_.empty()) {
          size_mismatch_ = "rank " + std::to_string(op->rank) + " started an allreduce of " +
                           std::to_string(op->count) + " elements (reduction " +
                           std::to_string(static_cast<int>(op->reduction)) + "), rank 0 of " +
                           std::to_string(first.count) + " (reduction " +
                           std::to_string(static_cast<int>(first.reduction)) + ")";
        }
        return;
      }
    }
    switch (first.reduction) {
      case qc::NcclReduction::kSumFloat32:
        reduce_all<float>(front, [](float a, float b) { return a + b; });
        break;
      case qc::NcclReduction::kMinUint64:
        reduce_all<uint64_t>(front, [](uint64_t a, uint64_t b) { return std::min(a, b); });
        break;
    }
    for (auto& q : allreduces_) {
      q.front()->done = true;
      q.pop_front();
    }
  }
}

long FakeNcclWorld::allreduces(int rank, qc::NcclReduction reduction) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allreduce_counts_[static_cast<size_t>(rank)][static_cast<size_t>(reduction)];
}

long FakeNcclWorld::enqueued(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return enqueued_[static_cast<size_t>(rank)];
}

long FakeNcclWorld::device_groups(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return device_groups_[static_cast<size_t>(rank)];
}

void* FakeNcclWorld::last_stream(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_stream_[static_cast<size_t>(rank)];
}

void FakeNcclWorld::set_foreign_buffer(const void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  foreign_ = p;
}

void FakeNcclWorld::set_async_error(int rank, const qc::Status& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  async_errors_[static_cast<size_t>(rank)] = error;
}

std::string FakeNcclWorld::size_mismatch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return size_mismatch_;
}

long FakeNcclWorld::groups(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return groups_[static_cast<size_t>(rank)];
}

bool FakeNcclWorld::aborted(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_[static_cast<size_t>(rank)];
}

}  // namespace qcfake
