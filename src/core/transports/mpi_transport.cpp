#include "core/transports/mpi_transport.h"
#include "core/transports/backoff.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <thread>

namespace qc {
namespace {

constexpr int kAbortTag = 1;
constexpr size_t kMaxNoticeText = 480;
// An abort notice: int32 status, uint64 instance id, then the reason's text.
constexpr size_t kNoticeHeader = 12;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// MPI promises tags up to 32767 only: fold qc's 64-bit tag into 15 bits.
int mpi_tag(uint64_t tag) {
  const uint64_t h = tag ^ (tag >> 15) ^ (tag >> 30) ^ (tag >> 45) ^ (tag >> 60);
  return static_cast<int>(h & 0x7fffu);
}

bool mpi_usable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

}  // namespace

// One send or receive. A receive is unmatched (no MPI request yet) until
// match_receive gives it its message; then `request` receives into `block`.
// Destroyed while MPI still owns `request` (a call that failed, or a
// request never waited for), it hands request and block to the transport,
// which keeps the block alive until its own destruction.
struct MpiRequestState {
  MpiTransport* transport = nullptr;
  MPI_Request request = MPI_REQUEST_NULL;
  MpiTransport::Block block;
  bool receive = false;
  bool matched = false;       // receives: request is the message's MPI_Imrecv
  int peer = -1;
  int expected_tag = 0;       // receives: the tag the next message must carry
  void* destination = nullptr;  // receives: the caller's buffer
  size_t capacity = 0;
  size_t bytes = 0;           // receives: the matched message's size

  ~MpiRequestState() {
    if (request != MPI_REQUEST_NULL && mpi_usable()) {
      transport->keep_leftover({request}, /*collective=*/false, std::move(block));
    }
  }
};

namespace {

MpiRequestState* state_of(Request& req) {
  return static_cast<MpiRequestState*>(req.transport_state.get());
}

}  // namespace

Status MpiTransport::create(MPI_Fint fortran_handle, std::unique_ptr<Transport>* out) {
  if (!mpi_usable()) {
    return transport_error(
        "MPI is not initialized (or already finalized): call MPI_Init or MPI_Init_thread before "
        "qc_comm_create with QC_TRANSPORT_MPI; qc does not initialize MPI itself");
  }
  // MPI_Comm_f2c of an unknown handle gives MPI_COMM_NULL or (OpenMPI) a
  // null handle; passing either on would make MPI abort the whole job.
  const MPI_Comm user = MPI_Comm_f2c(fortran_handle);
  if (user == MPI_COMM_NULL || user == MPI_Comm()) {
    return invalid_argument("argument 'config': field 'mpi_comm' (" +
                            std::to_string(fortran_handle) +
                            ") is not the Fortran handle of an MPI communicator; pass "
                            "MPI_Comm_c2f(comm)");
  }
  MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(user, &data);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(user, &control);
  if (rc != MPI_SUCCESS) {
    if (data != MPI_COMM_NULL) MPI_Comm_free(&data);
    return transport_error("MPI_Comm_dup failed with MPI error " + std::to_string(rc));
  }
  // Errors come back as return codes: qc turns them into statuses.
  MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(control, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(data, &rank);
  MPI_Comm_size(data, &size);
  // Rank 0 picks the instance id (see instance_id_); unique per process
  // through the counter, across processes and runs through clock and pid.
  static std::atomic<uint64_t> created{0};
  uint64_t id = splitmix64(static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
                           (static_cast<uint64_t>(::getpid()) << 32) ^
                           splitmix64(created.fetch_add(1) + 1));
  rc = MPI_Bcast(&id, 1, MPI_UINT64_T, 0, control);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&control);
    MPI_Comm_free(&data);
    return transport_error("MPI_Bcast of the communicator id failed with MPI error " +
                           std::to_string(rc));
  }
  auto* transport = new MpiTransport(data, control, rank, size, id);
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  transport->thread_multiple_ = level == MPI_THREAD_MULTIPLE;
  out->reset(transport);
  return Status::ok();
}

MpiTransport::MpiTransport(MPI_Comm data, MPI_Comm control, int rank, int size,
                           uint64_t instance_id)
    : data_(data), control_(control), rank_(rank), size_(size), instance_id_(instance_id),
      unmatched_(static_cast<size_t>(size)) {}

MpiTransport::~MpiTransport() {
  if (!mpi_usable()) {
    // MPI is gone, and with it every operation that could touch a block.
    return;
  }
  // A notice MPI has not finished sending keeps its text (a few hundred
  // bytes, leaked): MPI may still read it after its request is freed.
  bool notices_pending = false;
  for (MPI_Request& r : notices_) {
    int done = 1;
    if (r != MPI_REQUEST_NULL) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) continue;
    notices_pending = true;
    MPI_Request_free(&r);
  }
  if (notices_pending) new std::vector<std::string>(std::move(notice_text_));
  // Operations abandoned at a failure: a finished one's block is freed; one
  // MPI may still write into (a receive, a collective) or read (a send)
  // keeps its block forever, a deliberate leak like the communicators'.
  for (Leftover& left : leftovers_) {
    int done = 0;
    if (MPI_Testall(static_cast<int>(left.requests.size()), left.requests.data(), &done,
                    MPI_STATUSES_IGNORE) == MPI_SUCCESS &&
        done) {
      continue;
    }
    for (MPI_Request& r : left.requests) {
      if (!left.collective && r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
    (void)left.block.bytes.release();
  }
  // After a failure, messages of the failed call (unmatched sends, abort
  // notices, an abandoned collective that can be neither cancelled nor
  // freed) may still be in flight. Freed, the communicators' context ids
  // would be reused by OpenMPI for a later communicator, where that traffic
  // then matches the new one's operations (a late notice fails it, a stray
  // message stalls its collectives), and freeing under an abandoned
  // collective crashes MPI_Finalize. So a failed group's two communicators
  // are left to MPI_Finalize: a deliberate leak of two handles per failure.
  // (Late notices also carry instance_id_, for MPI libraries that reuse ids
  // otherwise.)
  if (!failure() || !leftovers_.empty()) return;
  MPI_Comm_free(&control_);
  MPI_Comm_free(&data_);
}

Status MpiTransport::mpi_error(int code, const char* what) const {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return transport_error(std::string(what) + " failed on rank " + std::to_string(rank_) + ": " +
                         std::string(text, static_cast<size_t>(len)));
}

Status MpiTransport::failure() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return failure_;
}

void MpiTransport::set_failure(const Status& s) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (failure_) failure_ = s;
}

void MpiTransport::abort(const Status& reason) {
  set_failure(reason);
  if (notified_ || !mpi_usable()) return;
  notified_ = true;
  // One small notice to every peer: status code, then the reason's text.
  const Status cause = failure();
  std::string text = cause.message().substr(0, kMaxNoticeText);
  std::string packet(kNoticeHeader, '\0');
  const int32_t code = static_cast<int32_t>(cause.code());
  std::memcpy(&packet[0], &code, 4);
  std::memcpy(&packet[4], &instance_id_, 8);
  packet += text;
  notice_text_.assign(static_cast<size_t>(size_), packet);
  notices_.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    std::string& buf = notice_text_[static_cast<size_t>(peer)];
    MPI_Isend(&buf[0], static_cast<int>(buf.size()), MPI_BYTE, peer, kAbortTag, control_,
              &notices_[static_cast<size_t>(peer)]);
  }
}

void MpiTransport::interrupt(const Status& reason) {
  // Only recorded: MPI may not be called from this thread while the rank's
  // call runs MPI on its own (below MPI_THREAD_MULTIPLE). That call's next
  // poll sees it, fails with it and sends the notices.
  set_failure(reason);
}

bool MpiTransport::poll_abort() {
  if (!failure()) return true;
  for (;;) {
    // Matched, then received by its handle: the size is the notice's own,
    // and no other receive on `control` can take it in between.
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, kAbortTag, control_, &flag, &message, &st) != MPI_SUCCESS ||
        !flag) {
      return false;
    }
    int bytes = 0;
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    if (bytes < 0) bytes = 0;  // MPI_UNDEFINED: not a notice qc sent
    std::string packet(static_cast<size_t>(std::max(bytes, 1)), '\0');
    MPI_Mrecv(&packet[0], bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    packet.resize(static_cast<size_t>(bytes));
    uint64_t id = 0;
    if (packet.size() >= kNoticeHeader) std::memcpy(&id, packet.data() + 4, 8);
    if (id != instance_id_) continue;  // a late notice of an earlier communicator
    int32_t code = QC_ERROR_TRANSPORT;
    std::memcpy(&code, packet.data(), 4);
    if (code == QC_SUCCESS) code = QC_ERROR_TRANSPORT;
    set_failure(Status(static_cast<qc_status_t>(code),
                       "rank " + std::to_string(st.MPI_SOURCE) + " failed: " +
                           packet.substr(kNoticeHeader)));
    return true;
  }
}

MpiTransport::Block MpiTransport::take_block(size_t bytes) {
  // The smallest free block that fits; else a new one, in place of the
  // largest free one (so the free list holds the call's sizes, no more).
  size_t best = free_blocks_.size();
  for (size_t i = 0; i < free_blocks_.size(); ++i) {
    if (free_blocks_[i].capacity >= bytes &&
        (best == free_blocks_.size() || free_blocks_[i].capacity < free_blocks_[best].capacity)) {
      best = i;
    }
  }
  if (best == free_blocks_.size()) {
    if (!free_blocks_.empty()) {
      size_t largest = 0;
      for (size_t i = 1; i < free_blocks_.size(); ++i) {
        if (free_blocks_[i].capacity > free_blocks_[largest].capacity) largest = i;
      }
      free_blocks_.erase(free_blocks_.begin() + static_cast<std::ptrdiff_t>(largest));
    }
    Block fresh;
    fresh.capacity = std::max<size_t>(bytes, 64);
    fresh.bytes.reset(new uint8_t[fresh.capacity]);
    return fresh;
  }
  Block block = std::move(free_blocks_[best]);
  free_blocks_.erase(free_blocks_.begin() + static_cast<std::ptrdiff_t>(best));
  return block;
}

void MpiTransport::give_back_block(Block block) {
  if (block.bytes) free_blocks_.push_back(std::move(block));
}

void MpiTransport::keep_leftover(std::vector<MPI_Request> requests, bool collective,
                                 Block block) {
  Leftover left;
  left.requests = std::move(requests);
  left.collective = collective;
  left.block = std::move(block);
  leftovers_.push_back(std::move(left));
}

Status MpiTransport::post_send(int peer, uint64_t tag, const void* data, size_t bytes,
                               size_t frame, Request* req) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return unsupported("the MPI transport sends at most 2 GiB per message; this one has " +
                       std::to_string(bytes) + " bytes");
  }
  auto state = std::make_shared<MpiRequestState>();
  state->transport = this;
  state->peer = peer;
  // MPI reads the bytes until the send completes, maybe after a failed call
  // returned and the caller freed or reused `data`: it reads a copy.
  state->block = take_block(bytes);
  if (bytes > 0) std::memcpy(state->block.bytes.get(), data, bytes);
  *req = Request();
  req->kind = Request::Kind::kSend;
  req->peer = peer;
  req->tag = tag;
  req->bytes = bytes;
  req->frame = frame;
  const int rc = MPI_Isend(state->block.bytes.get(), static_cast<int>(bytes), MPI_BYTE, peer,
                           mpi_tag(tag), data_, &state->request);
  if (rc != MPI_SUCCESS) {
    state->request = MPI_REQUEST_NULL;
    return mpi_error(rc, "MPI_Isend");
  }
  req->transport_state = state;
  return Status::ok();
}

Status MpiTransport::post_recv(int peer, uint64_t tag, void* buffer, size_t capacity,
                               Request* req) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return internal_error("the MPI transport got receive peer " + std::to_string(peer) +
                          " on rank " + std::to_string(rank_) + " of " + std::to_string(size_));
  }
  auto state = std::make_shared<MpiRequestState>();
  state->transport = this;
  state->receive = true;
  state->peer = peer;
  state->expected_tag = mpi_tag(tag);
  state->destination = buffer;
  state->capacity = capacity;
  *req = Request();
  req->kind = Request::Kind::kRecv;
  req->peer = peer;
  req->tag = tag;
  req->buffer = buffer;
  req->capacity = capacity;
  // Nothing is posted to MPI yet: match_receives does, once the message's
  // size is known.
  unmatched_[static_cast<size_t>(peer)].push_back(state);
  req->transport_state = state;
  return Status::ok();
}

Status MpiTransport::match_receive(MpiRequestState& state) {
  int flag = 0;
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status st;
  int rc = MPI_Improbe(state.peer, MPI_ANY_TAG, data_, &flag, &message, &st);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Improbe");
  if (!flag) return Status::ok();
  // The message stays matched but unreceived when it is refused: the call
  // fails and the group is broken, so nothing else looks for it.
  if (st.MPI_TAG != state.expected_tag) {
    return mismatch("the next message from rank " + std::to_string(state.peer) +
                    " belongs to another step or call than rank " + std::to_string(rank_) +
                    " expects");
  }
  int bytes = 0;
  MPI_Get_count(&st, MPI_BYTE, &bytes);
  if (bytes < 0 || static_cast<size_t>(bytes) > state.capacity) {
    return mismatch("rank " + std::to_string(state.peer) + " sent a message of " +
                    (bytes < 0 ? std::string("more than 2 GiB")
                               : std::to_string(bytes) + " bytes") +
                    " where rank " + std::to_string(rank_) + " expects at most " +
                    std::to_string(state.capacity) +
                    ": the ranks disagree on the count, dtype, op, layer or policy of this call");
  }
  state.bytes = static_cast<size_t>(bytes);
  state.block = take_block(state.bytes);
  rc = MPI_Imrecv(state.block.bytes.get(), bytes, MPI_BYTE, &message, &state.request);
  if (rc != MPI_SUCCESS) {
    state.request = MPI_REQUEST_NULL;
    return mpi_error(rc, "MPI_Imrecv");
  }
  state.matched = true;
  return Status::ok();
}

Status MpiTransport::match_receives() {
  for (auto& queue : unmatched_) {
    while (!queue.empty()) {
      std::shared_ptr<MpiRequestState> oldest = queue.front().lock();
      if (!oldest) {
        // Its request is gone, never waited for (only in a failed call):
        // its message, should it come, fails the next receive's tag check.
        queue.pop_front();
        continue;
      }
      QC_RETURN_IF_ERROR(match_receive(*oldest));
      if (!oldest->matched) break;  // the peer's next message is not here yet
      queue.pop_front();
    }
  }
  return Status::ok();
}

Status MpiTransport::progress(Request& req) {
  MpiRequestState* s = state_of(req);
  if (req.done || s == nullptr) return Status::ok();
  if (s->receive && !s->matched) return Status::ok();
  int flag = 0;
  MPI_Status st;
  const int rc = MPI_Test(&s->request, &flag, &st);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Test");
  if (!flag) return Status::ok();
  // Finished: MPI has let go of the block.
  if (s->receive) {
    if (s->bytes > 0) std::memcpy(s->destination, s->block.bytes.get(), s->bytes);
    req.bytes = s->bytes;
  }
  give_back_block(std::move(s->block));
  s->block = Block();
  req.done = true;
  return Status::ok();
}

Status MpiTransport::progress() {
  QC_RETURN_IF_ERROR(failure());
  Status s = match_receives();
  if (!s) abort(s);
  return s ? s : failure();
}

Status MpiTransport::wait_all(Request* reqs, size_t count, Deadline deadline) {
  // On failure the requests still pending are left as they are: their
  // states hand MPI's requests and blocks to leftovers_ when destroyed.
  const auto fail = [this](const Status& bad) {
    abort(bad);
    return failure();
  };
  Backoff backoff;
  for (;;) {
    Status s = match_receives();
    if (!s) return fail(s);
    bool all_done = true;
    for (size_t i = 0; i < count; ++i) {
      s = progress(reqs[i]);
      if (!s) return fail(s);
      if (!reqs[i].done && state_of(reqs[i]) != nullptr) all_done = false;
    }
    if (all_done) return Status::ok();
    // The failure may be this rank's own, recorded by interrupt() on another
    // thread: fail() tells the peers (abort sends its notices once).
    if (poll_abort()) return fail(failure());
    if (Clock::now() >= deadline) {
      std::string peers;
      for (size_t i = 0; i < count; ++i) {
        if (!reqs[i].done) peers += (peers.empty() ? "" : ", ") + std::to_string(reqs[i].peer);
      }
      return fail(timeout_error("rank " + std::to_string(rank_) +
                                " timed out waiting for rank(s) " + peers +
                                " (a peer is gone, stuck or much slower)"));
    }
    backoff.pause();
  }
}

}  // namespace qc
