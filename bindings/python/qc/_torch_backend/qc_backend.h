// qc_backend.h - QcBackend, the c10d::Backend behind
// torch.distributed.init_process_group("qc").
//
// What it does with a call:
//   - compressed by qc, over qc's callback transport on an inner gloo group
//     that carries only qc's bytes (BackendTransport): allreduce (SUM, AVG),
//     reduce_scatter_tensor, all_gather_into_tensor, all_gather (equal
//     sizes), broadcast, all_to_all_single (equal splits), barrier, and
//     their coalesced forms, on contiguous or not CPU tensors of float32,
//     float16, bfloat16. Each call is a qc request (non-blocking) whose
//     layer name comes from its call site (CallSites: "allreduce:float32:
//     1024:0"), so policies are chosen by patterns ("allreduce:*").
//   - the same calls on CUDA tensors of one device go to qc's NCCL
//     communicator (CudaGroup: made at the first such call from a unique id
//     shared through torch's store), enqueued on a side stream, no host
//     staging in the backend.
//   - everything else goes to a second inner group, the fallback (gloo; for
//     CUDA tensors NCCL's process group where torch has one):
//     other reduce ops, other dtypes, tensors on several devices, unequal
//     sizes or splits, send/recv, gather, scatter, reduce, ... (one info
//     line per (op, reason) with QC_DEBUG=info).
// Order between the two: a fallback collective first waits for the qc
// calls started before it, and a qc call first waits for the fallback
// collective started before it, so calls on one tensor keep program order.
#pragma once

#include <condition_variable>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "backend_transport.h"
#include "call_sites.h"
#include "cuda_group.h"
#include "qc.h"
#include "qc_work.h"

namespace qc_torch {

// The fields of qc_policy_t in order, as qc.Policy._to_tuple gives them.
using PolicyTuple =
    std::tuple<int, int, int, int, int, int, int, double, int, uint64_t, uint64_t, int>;

class QcBackend : public c10d::Backend {
 public:
  // store: where the NCCL unique id for CUDA tensors is shared (NULL: CUDA
  // tensors go to the fallback).
  QcBackend(int rank, int size, c10::intrusive_ptr<c10d::Backend> bytes_group,
            c10::intrusive_ptr<c10d::Backend> fallback_group, double timeout_seconds,
            size_t max_sites, c10::intrusive_ptr<c10d::Store> store);
  ~QcBackend() override;

  const std::string getBackendName() const override { return "qc"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  uint64_t getSequenceNumberForGroup() override;
  void shutdown() override;

  // ---- the Python API (qc.torch_backend) ----
  // The group for CUDA tensors qc does not take (an NCCL process group).
  void set_cuda_fallback(c10::intrusive_ptr<c10d::Backend> group);
  void set_layer_policy(const std::string& pattern, const PolicyTuple& policy);
  PolicyTuple get_layer_policy(const std::string& layer);
  void reset_call_sites();
  size_t call_site_count();
  // Residuals per site: layer -> (count, qc_error_buffer_save image).
  std::map<std::string, std::pair<size_t, std::string>> residuals();
  void load_residuals(const std::map<std::string, std::pair<size_t, std::string>>& saved);
  // qc_comm_get_stats: calls, logical_bytes, wire_bytes.
  std::map<std::string, double> stats();
  // What went to the fallback: "op: reason" -> calls.
  std::map<std::string, uint64_t> fallback_counts();
  // Waits for every qc call started so far (on the host).
  void synchronize();
  // Whether the NCCL communicator for CUDA tensors was made (by a first
  // collective on CUDA tensors).
  bool cuda_ready();

  // Every live backend (the optimizer hook resets them all).
  static void reset_all_call_sites();

 private:
  using WorkPtr = c10::intrusive_ptr<c10d::Work>;

  // Returns "" when qc takes these tensors, else why not.
  std::string why_not(const std::vector<at::Tensor>& tensors) const;
  std::string why_not_reduce(const std::vector<at::Tensor>& tensors,
                             const c10d::ReduceOp& op) const;

  // Where one torch call's qc calls go: the host communicator (requests,
  // completed by the completer thread) or, for CUDA tensors, the CudaGroup
  // (stream-ordered calls; its lock held and its device current for the
  // whole call).
  struct Lane {
    qc_comm_t comm = nullptr;
    CallSites* sites = nullptr;
    CudaGroup* cuda = nullptr;  // NULL: the host path
    std::unique_lock<std::mutex> lock;
    c10::OptionalDeviceGuard device;
  };
  void open_lane(const at::Tensor& first, Lane* lane);
  // The call's stream (a cudaStream_t) on the CUDA path, after making it
  // wait for the caller's stream; NULL on the host path.
  static void* stream_for_call(const Lane& lane);
  // Runs `call` on the fallback group for `sample`'s device: NCCL's for
  // CUDA tensors when set_cuda_fallback gave one, else gloo.
  WorkPtr to_fallback(const std::string& op, const std::string& why, const at::Tensor& sample,
                      const std::function<WorkPtr(c10d::Backend&)>& call,
                      bool collective = true);

  c10::intrusive_ptr<QcWork> new_work(c10d::OpType type, std::vector<at::Tensor> outputs,
                                      const at::Tensor& first, Lane* lane);
  WorkPtr enqueue(const c10::intrusive_ptr<QcWork>& work, Lane& lane);
  // Queues what was started, then throws qc's message.
  [[noreturn]] void start_failed(const c10::intrusive_ptr<QcWork>& work, Lane& lane,
                                 const std::string& call);
  // After starting qc's `function` for `lease`: on failure frees the lease
  // and throws (start_failed); else keeps `tensors` alive for the Work and
  // takes the call: its request (host lane) or, on the CUDA lane, frees
  // the residuals' lease at once (the stream orders their next use).
  void took_call(const c10::intrusive_ptr<QcWork>& work, Lane& lane, qc_status_t status,
                 const CallSites::Lease& lease, const char* function, qc_request_t request,
                 std::initializer_list<at::Tensor> tensors);
  void before_qc_call();
  // lane.sites->next, queueing what `work` already started when it throws.
  CallSites::Lease next_site(const c10::intrusive_ptr<QcWork>& work, Lane& lane,
                             const std::string& op, qc_dtype_t dtype, size_t numel,
                             bool with_residuals);

  void start_allreduce(const c10::intrusive_ptr<QcWork>& work, Lane& lane,
                       const at::Tensor& tensor, qc_reduce_op_t op);
  void start_reduce_scatter(const c10::intrusive_ptr<QcWork>& work, Lane& lane,
                            const at::Tensor& output, const at::Tensor& input, qc_reduce_op_t op);
  void start_allgather(const c10::intrusive_ptr<QcWork>& work, Lane& lane,
                       const at::Tensor& output, const at::Tensor& input);

  void complete_in_order();
  void close();

  c10::intrusive_ptr<c10d::Backend> bytes_group_;
  c10::intrusive_ptr<c10d::Backend> fallback_;
  c10::intrusive_ptr<c10d::Backend> cuda_fallback_;  // NULL: gloo takes CUDA tensors too
  std::unique_ptr<BackendTransport> transport_;
  qc_comm_t comm_ = nullptr;
  std::unique_ptr<CallSites> sites_;
  std::unique_ptr<CudaGroup> cuda_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<c10::intrusive_ptr<QcWork>> queue_;
  size_t outstanding_ = 0;  // queued or running
  bool stopping_ = false;
  bool closed_ = false;
  std::thread completer_;

  WorkPtr last_fallback_;  // the last fallback collective (caller's thread)
  std::mutex fallback_mutex_;
  std::map<std::string, uint64_t> fallback_counts_;
};

}  // namespace qc_torch
