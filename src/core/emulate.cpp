#include "core/emulate.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/api_checks.h"
#include "core/communicator.h"
#include "core/error_buffer.h"
#include "core/emulation_keep.h"
#include "core/fiber_ranks.h"
#include "core/params.h"
#include "core/policy.h"

namespace qc {
namespace {

// Trades a rank's buffers with a RankBuffers, both ways alike.
void swap_buffers(Communicator& c, RankBuffers& b) {
  std::swap(c.scratch, b.scratch);
  std::swap(c.work, b.work);
  std::swap(c.work_out, b.work_out);
  std::swap(c.residual_work, b.residual_work);
}

// The group's buffers move in from what an earlier call kept
// (emulation_keep.h) and back out when the call is done.
void lend_buffers(std::vector<RankBuffers> kept,
                  std::vector<std::unique_ptr<Communicator>>& comms) {
  for (size_t r = 0; r < kept.size() && r < comms.size(); ++r) swap_buffers(*comms[r], kept[r]);
}

void keep_buffers(std::vector<std::unique_ptr<Communicator>>& comms, size_t limit) {
  if (limit == 0) return;
  std::vector<RankBuffers> back(comms.size());
  for (size_t r = 0; r < comms.size(); ++r) swap_buffers(*comms[r], back[r]);
  EmulationKeep::give_back(std::move(back), limit);
}

// Creates the group, gives every rank the policy, runs body(rank, comm) for
// every rank, each on a fiber (core/fiber_ranks.h: the real code of a rank,
// without a thread per rank), and returns the first failure by rank order,
// or success.
Status run_ranks(const EmulationArgs& args,
                 const std::function<Status(int, Communicator*)>& body) {
  const int n = args.nranks;
  EnvParams env;
  QC_RETURN_IF_ERROR(read_env_params(&env));
  const size_t keep_limit = env_emulation_keep(env);
  FiberRanks fibers(n, /*threads=*/0);
  // Declared after `fibers`, so destroyed first: a communicator leaving
  // the group notifies the ranks through it.
  std::vector<std::unique_ptr<Communicator>> comms;
  QC_RETURN_IF_ERROR(create_local_group(n, default_comm_config().timeout_seconds, &comms, &fibers));
  // Every name resolves to "*"; the layer's earlier calls are counted as
  // if they had run, so its random stream is that of call `call_index`.
  for (auto& c : comms) {
    c->emulated = true;
    c->policies.set("*", args.policy);
    c->layer_calls[args.layer != nullptr ? args.layer : "*"] = args.call_index;
  }
  if (keep_limit > 0) lend_buffers(EmulationKeep::take(static_cast<size_t>(n)), comms);
  std::vector<Status> results;
  QC_RETURN_IF_ERROR(fibers.run([&](int r) { return body(r, comms[r].get()); }, &results));
  keep_buffers(comms, keep_limit);
  comms.clear();
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
