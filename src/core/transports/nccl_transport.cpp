#include "core/transports/nccl_transport.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "core/byte_order.h"
#include "core/transports/backoff.h"

namespace qc {
namespace {

// What post_* records; the NCCL calls happen in wait_all, one group per wait.
struct PendingOp {
  const uint8_t* data = nullptr;  // send
  size_t offset = 0;              // the frame's place in the wait's image
};

PendingOp* pending_of(const Request& req) { return static_cast<PendingOp*>(req.transport_state.get()); }

// NCCL is fastest on aligned buffers; 16 bytes keeps every frame's payload
// 16-byte aligned behind its 16-byte header.
constexpr size_t kFrameAlign = 16;

size_t align_up(size_t v) { return (v + kFrameAlign - 1) / kFrameAlign * kFrameAlign; }

}  // namespace

NcclTransport::NcclTransport(std::unique_ptr<NcclBackend> backend) : backend_(std::move(backend)) {}

NcclTransport::~NcclTransport() = default;

Status NcclTransport::check_peer(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank()) {
    return internal_error("the NCCL transport got peer " + std::to_string(peer) + " on rank " +
                          std::to_string(rank()) + " of " + std::to_string(size()));
  }
  return Status::ok();
}

Status NcclTransport::post_send(int peer, uint64_t tag, const void* data, size_t bytes,
                                size_t frame, Request* req) {
  QC_RETURN_IF_ERROR(check_peer(peer));
  if (bytes > frame) {
    return internal_error("a " + std::to_string(bytes) + "-byte message in a " +
                          std::to_string(frame) + "-byte frame");
  }
  *req = Request();
  req->kind = Request::Kind::kSend;
  req->peer = peer;
  req->tag = tag;
  req->bytes = bytes;
  req->frame = frame;
  auto op = std::make_shared<PendingOp>();
  op->data = static_cast<const uint8_t*>(data);
  req->transport_state = op;
  return Status::ok();
}

Status NcclTransport::post_recv(int peer, uint64_t tag, void* buffer, size_t capacity,
                                Request* req) {
  QC_RETURN_IF_ERROR(check_peer(peer));
  *req = Request();
  req->kind = Request::Kind::kRecv;
  req->peer = peer;
  req->tag = tag;
  req->buffer = buffer;
  req->capacity = capacity;
  req->transport_state = std::make_shared<PendingOp>();
  return Status::ok();
}

Status NcclTransport::fail(Request* reqs, size_t count, const Status& status) {
  abort(status);
  for (size_t i = 0; i < count; ++i) reqs[i].transport_state.reset();
  return recorded_failure();
}

Status NcclTransport::wait_all(Request* reqs, size_t count, Deadline deadline) {
  {
    Status failed = recorded_failure();
    if (!failed) return fail(reqs, count, failed);
  }
  // Lay the frames out and fill the send frames in one pass:
  // [tag | length | payload, zero padded to the frame]. The image only grows,
  // so after the first calls of a given shape nothing is allocated here.
  size_t total = 0;
  ops_.clear();
  for (size_t i = 0; i < count; ++i) {
    Request& req = reqs[i];
    PendingOp* op = pending_of(req);
    if (req.done || op == nullptr) continue;
    const bool send = req.kind == Request::Kind::kSend;
    const size_t wire = kFrameHeader + (send ? req.frame : req.capacity);
    op->offset = total;
    ops_.push_back({send, req.peer, total, wire});
    const size_t end = align_up(total + wire);
    if (image_.size() < end) image_.resize(std::max(end, 2 * image_.size()));
    if (send) {
      uint8_t* frame = image_.data() + op->offset;
      store_le64(frame, req.tag);
      store_le64(frame + 8, req.bytes);
      if (req.bytes > 0) std::memcpy(frame + kFrameHeader, op->data, req.bytes);
      // Padding is sent too: zero it so no stale bytes leave the process.
      std::memset(frame + kFrameHeader + req.bytes, 0, req.frame - req.bytes);
    }
    total = end;
  }
  if (ops_.empty()) return Status::ok();
  Status s = backend_->start(image_.data(), total, ops_);
  if (!s) return fail(reqs, count, s);
  s = await(deadline, [this] {
    std::string peers;
    for (const NcclOp& op : ops_) {
      const std::string p = std::to_string(op.peer);
      if (peers.find(p) == std::string::npos) peers += (peers.empty() ? "" : ", ") + p;
    }
    return "an NCCL group with rank(s) " + peers;
  });
  if (!s) return fail(reqs, count, s);

  for (size_t i = 0; i < count; ++i) {
    Request& req = reqs[i];
    PendingOp* op = pending_of(req);
    if (req.done || op == nullptr) continue;
    if (req.kind == Request::Kind::kRecv) {
      const uint8_t* frame = image_.data() + op->offset;
      const uint64_t tag = load_le64(frame);
      const uint64_t length = load_le64(frame + 8);
      if (tag != req.tag) {
        return fail(reqs, count,
                    mismatch("the next message from rank " + std::to_string(req.peer) +
                             " belongs to another step or call than rank " +
                             std::to_string(rank()) + " expects"));
      }
      if (length > req.capacity) {
        return fail(reqs, count,
                    corrupt_data("a frame from rank " + std::to_string(req.peer) + " claims " +
                                 std::to_string(length) + " bytes in a " +
                                 std::to_string(req.capacity) + "-byte frame"));
      }
      if (length > 0) std::memcpy(req.buffer, frame + kFrameHeader, length);
      req.bytes = length;
    }
    req.done = true;
    req.transport_state.reset();
  }
  return Status::ok();
}

Status NcclTransport::await(Deadline deadline, const std::function<std::string()>& what) {
  Backoff backoff;
  for (;;) {
    bool done = false;
    Status s = backend_->poll(&done);
    if (!s) return s;
    if (done) return Status::ok();
    {
      Status failed = recorded_failure();  // another thread's abort()
      if (!failed) return failed;
    }
    if (Clock::now() >= deadline) {
      return timeout_error("rank " + std::to_string(rank()) + " timed out in " + what() +
                           " (a peer is gone, stuck or much slower); the NCCL communicator is "
                           "aborted");
    }
    backoff.pause();
  }
}

Status NcclTransport::native_allreduce(void* data, size_t count, NcclReduction reduction,
                                       Deadline deadline, const char* what) {
  Status s = recorded_failure();
  if (s) s = backend_->start_allreduce(data, count, reduction);
  if (s) s = await(deadline, [what] { return std::string(what); });
  if (!s) {
    abort(s);
    return recorded_failure();
  }
  return Status::ok();
}

Status NcclTransport::allreduce_float(const float* send, float* recv, size_t count,
                                      Deadline deadline) {
  if (send != recv && count > 0) std::memcpy(recv, send, count * sizeof(float));
  if (count == 0 || size() == 1) return recorded_failure();
  return native_allreduce(recv, count, NcclReduction::kSumFloat32, deadline,
                          "the NCCL float allreduce");
}

Status NcclTransport::agree(uint64_t value, Deadline deadline) {
  if (size() == 1) return recorded_failure();
  // min(v) == v and min(~v) == ~v (so max(v) == v) on a rank means every
  // rank passed v; all ranks get the same minima, so all see a difference.
  uint64_t lanes[2] = {value, ~value};
  QC_RETURN_IF_ERROR(native_allreduce(lanes, 2, NcclReduction::kMinUint64, deadline,
                                      "the NCCL call agreement"));
  if (lanes[0] != value || lanes[1] != ~value) {
    return mismatch("the ranks disagree on the count, dtype, op, layer, policy or layer call "
                    "index (qc_comm_load_state) of this call (checked before NCCL's own "
                    "allreduce)");
  }
  return Status::ok();
}

Status NcclTransport::enqueue_device_allreduce_float(const float* send, float* recv,
                                                     size_t count, bool average, void* stream) {
  Status s = recorded_failure();
  if (s && count > 0) s = backend_->enqueue_allreduce(send, recv, count, average, stream);
  if (!s) {
    abort(s);
    return recorded_failure();
  }
  return Status::ok();
}

Status NcclTransport::enqueue_device_group(const DeviceTransfer* ops, size_t count,
                                           void* stream) {
  Status s = recorded_failure();
  for (size_t i = 0; i < count && s; ++i) s = check_peer(ops[i].peer);
  if (s && count > 0) s = backend_->enqueue_group(ops, count, stream);
  if (!s) {
    abort(s);
    return recorded_failure();
  }
  return Status::ok();
}

void NcclTransport::abort(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (!failure_) return;  // the first failure is the one reported
    failure_ = reason.is_ok() ? internal_error("the group was aborted") : reason;
  }
  backend_->abort();
}

Status NcclTransport::recorded_failure() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return failure_;
}

Status NcclTransport::failure() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (!failure_) return failure_;
  const Status async = backend_->async_error();
  if (async) return Status::ok();
  // NCCL asks for an abort after an asynchronous error, like any failure.
  failure_ = Status(async.code(), "NCCL reported an error after a call returned: " +
                                      async.message());
  backend_->abort();
  return failure_;
}

}  // namespace qc
