#include "core/emulate.h"

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/api_checks.h"
#include "core/communicator.h"
#include "core/error_buffer.h"
#include "core/policy.h"

namespace qc {
namespace {

// Creates the group, gives every rank the policy, runs body(rank, comm) on
// one thread per rank (rank 0 on the caller's), and returns the first
// failure by rank order, or success.
Status run_ranks(const EmulationArgs& args,
                 const std::function<Status(int, Communicator*)>& body) {
  const int n = args.nranks;
  std::vector<std::unique_ptr<Communicator>> comms;
  QC_RETURN_IF_ERROR(create_local_group(n, default_comm_config().timeout_seconds, &comms));
  // Every name resolves to "*"; the layer's earlier calls are counted as
  // if they had run, so its random stream is that of call `call_index`.
  for (auto& c : comms) {
    c->policies.set("*", args.policy);
    c->layer_calls[args.layer != nullptr ? args.layer : "*"] = args.call_index;
  }

  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  Status spawn;
  try {
    threads.reserve(n - 1);
    for (int r = 1; r < n; ++r)
      threads.emplace_back([&, r] { results[r] = body(r, comms[r].get()); });
  } catch (const std::system_error& e) {
    // Ranks already running would wait for the missing ones: break the group.
    spawn = Status(QC_ERROR_OUT_OF_MEMORY,
                   std::string("could not start a thread per virtual rank: ") + e.what());
    comms[0]->transport->abort(spawn);
  }
  if (spawn) results[0] = body(0, comms[0].get());
  for (std::thread& t : threads) t.join();
  comms.clear();
  if (!spawn) return spawn;
  for (int r = 0; r < n; ++r) {
    if (!results[r]) return Status(results[r].code(), "rank " + std::to_string(r) + ": " +
                                                          results[r].message());
  }
  return Status::ok();
}

}  // namespace

Status check_emulation_group(int nranks, const char* layer, uint64_t call_index,
                             const qc_policy_t* policy, EmulationArgs* args) {
  if (nranks < 1 || nranks > kMaxLocalRanks) {
    return invalid_argument("argument 'nranks' is " + std::to_string(nranks) + "; expected 1.." +
                            std::to_string(kMaxLocalRanks));
  }
  QC_RETURN_IF_ERROR(read_policy(policy, "policy", &args->policy));
  args->nranks = nranks;
  args->layer = layer;
  args->call_index = call_index;
  return Status::ok();
}

Status check_emulation_args(int nranks, const void* const* sendbufs, void* const* recvbufs,
                            const char* layer, uint64_t call_index, const qc_policy_t* policy,
                            EmulationArgs* args) {
  QC_RETURN_IF_ERROR(check_emulation_group(nranks, layer, call_index, policy, args));
  QC_RETURN_IF_ERROR(require(sendbufs, "sendbufs"));
  QC_RETURN_IF_ERROR(require(recvbufs, "recvbufs"));
  args->sendbufs = sendbufs;
  args->recvbufs = recvbufs;
  return Status::ok();
}

Status for_rank(int r, const Status& s) {
  if (s) return s;
  return Status(s.code(), "rank " + std::to_string(r) + ": " + s.message());
}

Status emulate_ranks(const EmulationArgs& args,
                     const std::function<Status(int, Communicator*)>& body) {
  return run_ranks(args, body);
}

Status emulate_allreduce(const EmulationArgs& args, size_t count, qc_dtype_t dtype,
                         qc_reduce_op_t op, ErrorBuffer* const* error_buffers) {
  return run_ranks(args, [&](int r, Communicator* comm) {
    ErrorBuffer* eb = error_buffers != nullptr ? error_buffers[r] : nullptr;
    return comm_allreduce(comm, args.sendbufs[r], args.recvbufs[r], count, dtype, op, args.layer,
                          eb);
  });
}

Status emulate_alltoall(const EmulationArgs& args, size_t count_per_rank, qc_dtype_t dtype) {
  return run_ranks(args, [&](int r, Communicator* comm) {
    return comm_alltoall(comm, args.sendbufs[r], args.recvbufs[r], count_per_rank, dtype,
                         args.layer);
  });
}

Status emulate_reduce_scatter(const EmulationArgs& args, size_t recvcount, qc_dtype_t dtype,
                              qc_reduce_op_t op, ErrorBuffer* const* error_buffers) {
  return run_ranks(args, [&](int r, Communicator* comm) {
    ErrorBuffer* eb = error_buffers != nullptr ? error_buffers[r] : nullptr;
    return comm_reduce_scatter(comm, nullptr, nullptr, args.sendbufs[r], args.recvbufs[r],
                               recvcount, dtype, op, args.layer, eb);
  });
}

Status emulate_allgather(const EmulationArgs& args, size_t sendcount, qc_dtype_t dtype,
                         ErrorBuffer* const* error_buffers) {
  return run_ranks(args, [&](int r, Communicator* comm) {
    ErrorBuffer* eb = error_buffers != nullptr ? error_buffers[r] : nullptr;
    return comm_allgather(comm, nullptr, nullptr, args.sendbufs[r], args.recvbufs[r], sendcount,
                          dtype, args.layer, eb);
  });
}

Status emulate_broadcast(const EmulationArgs& args, size_t count, qc_dtype_t dtype, int root) {
  return run_ranks(args, [&](int r, Communicator* comm) {
    return comm_broadcast(comm, nullptr, nullptr, r == root ? args.sendbufs[r] : nullptr,
                          args.recvbufs[r], count, dtype, root, args.layer);
  });
}

}  // namespace qc
