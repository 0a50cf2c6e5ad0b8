// A stand-in for libnccl.so.2 in the emulated-GPU build (README.md here):
// one-rank communicators only, the shape the NCCL smoke test uses on a
// one-GPU machine. Device memory is host memory there (fake_cudart.cpp) and
// the work runs at once, so a send to itself is a copy into the receive
// it is matched with (in order, as NCCL matches a peer's sends and
// receives), and an allreduce of one rank copies its input. A group that
// ends with a send or receive unmatched fails with ncclInvalidUsage
// instead of hanging as NCCL would; so does a size mismatch.
//
// libqc opens it by name (dlopen("libnccl.so.2")), as it opens NCCL, from
// the folder the emulated build's tests put on LD_LIBRARY_PATH.
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <deque>

namespace {

struct Pending {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t bytes = 0;
};

struct FakeComm {
  int device = 0;
  bool aborted = false;
  ncclResult_t async = ncclSuccess;
  std::deque<Pending> sends, recvs;
};

thread_local int group_depth = 0;
thread_local FakeComm* group_comm = nullptr;  // the comm whose ops wait for the group's end

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// Matches the comm's sends with its receives, in order.
ncclResult_t match(FakeComm* c) {
  while (!c->sends.empty() && !c->recvs.empty()) {
    const Pending s = c->sends.front(), r = c->recvs.front();
    c->sends.pop_front();
    c->recvs.pop_front();
    if (s.bytes != r.bytes) return ncclInvalidUsage;  // NCCL: truncation or a hang
    if (s.bytes > 0) std::memmove(r.recv, s.send, s.bytes);
  }
  return ncclSuccess;
}

ncclResult_t settle(FakeComm* c) {
  const ncclResult_t r = match(c);
  if (r != ncclSuccess) return r;
  if (!c->sends.empty() || !c->recvs.empty()) {
    c->sends.clear();
    c->recvs.clear();
    return ncclInvalidUsage;  // NCCL would wait forever for the missing half
  }
  return ncclSuccess;
}

ncclResult_t p2p(FakeComm* c, int peer, const Pending& op, bool send) {
  if (c == nullptr || peer != 0) return ncclInvalidArgument;
  if (c->aborted) return ncclInvalidUsage;
  (send ? c->sends : c->recvs).push_back(op);
  if (group_depth > 0) {
    group_comm = c;
    return ncclSuccess;
  }
  return settle(c);
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error (fake libnccl)";
    case ncclInvalidArgument: return "invalid argument (fake libnccl)";
    case ncclInvalidUsage: return "invalid usage (fake libnccl: one rank only, matched sends)";
    default: return "error (fake libnccl)";
  }
}
ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  if (comm == nullptr || nranks != 1 || rank != 0) return ncclInvalidArgument;
  *comm = reinterpret_cast<ncclComm_t>(new FakeComm());
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t*) {
  return ncclCommInitRank(comm, nranks, id, rank);
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t*) {
  if (comm == nullptr || newcomm == nullptr || key != 0) return ncclInvalidArgument;
  *newcomm = color == NCCL_SPLIT_NOCOLOR ? nullptr : reinterpret_cast<ncclComm_t>(new FakeComm());
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete reinterpret_cast<FakeComm*>(comm);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete reinterpret_cast<FakeComm*>(comm);
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
  if (comm == nullptr || async == nullptr) return ncclInvalidArgument;
  *async = reinterpret_cast<FakeComm*>(comm)->async;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr) return ncclInvalidArgument;
  *count = 1;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr) return ncclInvalidArgument;
  *rank = 0;
  return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr) return ncclInvalidArgument;
  *device = reinterpret_cast<FakeComm*>(comm)->device;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0 || group_comm == nullptr) return ncclSuccess;
  FakeComm* c = group_comm;
  group_comm = nullptr;
  return settle(c);
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t) {
  const size_t size = type_bytes(type);
  if (size == 0) return ncclInvalidArgument;
  return p2p(reinterpret_cast<FakeComm*>(comm), peer, Pending{buf, nullptr, count * size}, true);
}
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t) {
  const size_t size = type_bytes(type);
  if (size == 0) return ncclInvalidArgument;
  return p2p(reinterpret_cast<FakeComm*>(comm), peer, Pending{nullptr, buf, count * size}, false);
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  const size_t size = type_bytes(type);
  if (comm == nullptr || size == 0 || op < ncclSum || op > ncclAvg) return ncclInvalidArgument;
  // One rank: every reduction, NCCL's average included, is the input.
  if (count > 0 && send != recv) std::memmove(recv, send, count * size);
  return ncclSuccess;
}

}  // extern "C"
