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

struct MpiRequestState {
  MPI_Request request = MPI_REQUEST_NULL;
  int expected_tag = 0;  // receives: the tag the next message must carry
};

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
  out->reset(new MpiTransport(data, control, rank, size, id));
  return Status::ok();
}

MpiTransport::MpiTransport(MPI_Comm data, MPI_Comm control, int rank, int size,
                           uint64_t instance_id)
    : data_(data), control_(control), rank_(rank), size_(size), instance_id_(instance_id) {}

MpiTransport::~MpiTransport() {
  if (!mpi_usable()) return;  // after MPI_Finalize nothing may be called
  for (MPI_Request& r : notices_) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
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
  if (!failure()) return;
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

bool MpiTransport::poll_abort() {
  if (!failure()) return true;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, control_, &flag, &st) != MPI_SUCCESS || !flag) {
      return false;
    }
    int bytes = 0;
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    std::string packet(static_cast<size_t>(std::max(bytes, 1)), '\0');
    MPI_Recv(&packet[0], bytes, MPI_BYTE, st.MPI_SOURCE, kAbortTag, control_, MPI_STATUS_IGNORE);
    uint64_t id = 0;
    if (bytes >= static_cast<int>(kNoticeHeader)) std::memcpy(&id, packet.data() + 4, 8);
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

Status MpiTransport::post_send(int peer, uint64_t tag, const void* data, size_t bytes,
                               size_t frame, Request* req) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return unsupported("the MPI transport sends at most 2 GiB per message; this one has " +
                       std::to_string(bytes) + " bytes");
  }
  auto state = std::make_shared<MpiRequestState>();
  req->kind = Request::Kind::kSend;
  req->peer = peer;
  req->tag = tag;
  req->bytes = bytes;
  req->frame = frame;
  req->done = false;
  const int rc = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, mpi_tag(tag), data_,
                           &state->request);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Isend");
  req->transport_state = state;
  return Status::ok();
}

Status MpiTransport::post_recv(int peer, uint64_t tag, void* buffer, size_t capacity,
                               Request* req) {
  auto state = std::make_shared<MpiRequestState>();
  state->expected_tag = mpi_tag(tag);
  req->kind = Request::Kind::kRecv;
  req->peer = peer;
  req->tag = tag;
  req->buffer = buffer;
  req->capacity = capacity;
  req->bytes = 0;
  req->done = false;
  const int count = static_cast<int>(std::min(capacity, static_cast<size_t>(INT_MAX)));
  const int rc = MPI_Irecv(buffer, count, MPI_BYTE, peer, MPI_ANY_TAG, data_, &state->request);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Irecv");
  req->transport_state = state;
  return Status::ok();
}

void MpiTransport::release_pending(Request* reqs, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    MpiRequestState* s = state_of(reqs[i]);
    if (s == nullptr || s->request == MPI_REQUEST_NULL) continue;
    if (reqs[i].kind == Request::Kind::kRecv) {
      // A cancelled receive completes at once; it must not write later.
      MPI_Cancel(&s->request);
      MPI_Wait(&s->request, MPI_STATUS_IGNORE);
    } else {
      // A send cannot be taken back; MPI finishes or drops it on its own.
      MPI_Request_free(&s->request);
    }
  }
}

Status MpiTransport::wait_all(Request* reqs, size_t count, Deadline deadline) {
  Backoff backoff;
  for (;;) {
    bool all_done = true;
    for (size_t i = 0; i < count; ++i) {
      Request& req = reqs[i];
      MpiRequestState* s = state_of(req);
      if (req.done || s == nullptr) continue;
      int flag = 0;
      MPI_Status st;
      const int rc = MPI_Test(&s->request, &flag, &st);
      if (rc != MPI_SUCCESS) {
        int cls = 0;
        MPI_Error_class(rc, &cls);
        Status bad = cls == MPI_ERR_TRUNCATE
                         ? mismatch("a message from rank " + std::to_string(req.peer) +
                                    " is longer than the receiver expects (" +
                                    std::to_string(req.capacity) + " bytes)")
                         : mpi_error(rc, "MPI_Test");
        abort(bad);
        release_pending(reqs, count);
        return bad;
      }
      if (!flag) {
        all_done = false;
        continue;
      }
      req.done = true;
      if (req.kind == Request::Kind::kRecv) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        req.bytes = static_cast<size_t>(got);
        if (st.MPI_TAG != s->expected_tag) {
          Status bad = mismatch("the next message from rank " + std::to_string(req.peer) +
                                " belongs to another step or call than rank " +
                                std::to_string(rank_) + " expects");
          abort(bad);
          release_pending(reqs, count);
          return bad;
        }
      }
    }
    if (all_done) return Status::ok();
    if (poll_abort()) {
      release_pending(reqs, count);
      return failure();
    }
    if (Clock::now() >= deadline) {
      std::string peers;
      for (size_t i = 0; i < count; ++i) {
        if (!reqs[i].done) peers += (peers.empty() ? "" : ", ") + std::to_string(reqs[i].peer);
      }
      Status timeout = timeout_error("rank " + std::to_string(rank_) +
                                     " timed out waiting for rank(s) " + peers +
                                     " (a peer is gone, stuck or much slower)");
      abort(timeout);
      release_pending(reqs, count);
      return timeout;
    }
    backoff.pause();
  }
}

Status MpiTransport::wait_collective(MPI_Request* request, Deadline deadline, const char* what) {
  Backoff backoff;
  for (;;) {
    int flag = 0;
    const int rc = MPI_Test(request, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      Status bad = mpi_error(rc, what);
      abort(bad);
      return bad;
    }
    if (flag) return Status::ok();
    if (poll_abort() || Clock::now() >= deadline) {
      Status bad = failure() ? timeout_error("rank " + std::to_string(rank_) + " timed out in " +
                                             what)
                             : failure();
      abort(bad);
      // A collective can be neither cancelled nor freed: it stays with the
      // (now broken) communicator.
      orphans_.push_back(*request);
      return bad;
    }
    backoff.pause();
  }
}

Status MpiTransport::allreduce_int64(int64_t* values, size_t count, int width,
                                     Deadline deadline) {
  // int32 when the sums fit (half the bytes), else int64.
  const bool narrow = width <= 31;
  std::vector<int32_t> narrow_values;
  if (narrow) narrow_values.assign(values, values + count);
  size_t done = 0;
  while (done < count) {
    const size_t chunk = std::min(count - done, static_cast<size_t>(INT_MAX));
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc = narrow ? MPI_Iallreduce(MPI_IN_PLACE, narrow_values.data() + done,
                                           static_cast<int>(chunk), MPI_INT32_T, MPI_SUM, data_,
                                           &request)
                          : MPI_Iallreduce(MPI_IN_PLACE, values + done, static_cast<int>(chunk),
                                           MPI_INT64_T, MPI_SUM, data_, &request);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Iallreduce");
    QC_RETURN_IF_ERROR(wait_collective(&request, deadline, "the integer allreduce"));
    done += chunk;
  }
  if (narrow) std::copy(narrow_values.begin(), narrow_values.end(), values);
  return Status::ok();
}

Status MpiTransport::allreduce_float(const float* send, float* recv, size_t count,
                                     Deadline deadline) {
  // Blocking on purpose. The agreement just showed every rank inside this
  // call, so only a crash (which ends an MPI job anyway) or a stopped
  // process can keep MPI_Allreduce from returning; and the blocking form
  // runs MPI's tuned algorithms, 1.5 to 3 times faster than the
  // non-blocking schedule (OpenMPI 4.1, shared memory, 4 KiB to 4 MiB).
  (void)deadline;
  size_t done = 0;
  while (done < count) {
    const size_t chunk = std::min(count - done, static_cast<size_t>(INT_MAX));
    const void* from = send == recv ? MPI_IN_PLACE : static_cast<const void*>(send + done);
    const int rc =
        MPI_Allreduce(from, recv + done, static_cast<int>(chunk), MPI_FLOAT, MPI_SUM, data_);
    if (rc != MPI_SUCCESS) {
      Status bad = mpi_error(rc, "MPI_Allreduce");
      abort(bad);
      return bad;
    }
    done += chunk;
  }
  return Status::ok();
}

Status MpiTransport::agree(uint64_t value, Deadline deadline) {
  // min(v) == v and min(~v) == ~v (i.e. max(v) == v) on a rank means every
  // rank passed v; every rank gets the same minima, so all see a difference.
  uint64_t lanes[2] = {value, ~value};
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Iallreduce(MPI_IN_PLACE, lanes, 2, MPI_UINT64_T, MPI_MIN, data_, &request);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Iallreduce");
  QC_RETURN_IF_ERROR(wait_collective(&request, deadline, "the call agreement"));
  if (lanes[0] != value || lanes[1] != ~value) {
    return mismatch("the ranks disagree on the count, dtype, op, layer or policy of this call "
                    "(checked before the transport's own allreduce)");
  }
  return Status::ok();
}

}  // namespace qc
