// qc_backend.cpp - see qc_backend.h.
#include "qc_backend.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "log.h"

namespace qc_torch {
namespace {

std::mutex g_live_mutex;
std::set<QcBackend*> g_live;  // for reset_all_call_sites

[[noreturn]] void throw_qc(const std::string& what) {
  throw std::runtime_error("qc: " + what + ": " + qc_last_error());
}

bool qc_dtype_of(const at::Tensor& t, qc_dtype_t* dtype) {
  switch (t.scalar_type()) {
    case at::kFloat: *dtype = QC_DTYPE_FLOAT32; return true;
    case at::kHalf: *dtype = QC_DTYPE_FLOAT16; return true;
    case at::kBFloat16: *dtype = QC_DTYPE_BFLOAT16; return true;
    default: return false;
  }
}

qc_dtype_t dtype_of(const at::Tensor& t) {
  qc_dtype_t d = QC_DTYPE_FLOAT32;
  qc_dtype_of(t, &d);
  return d;
}

// SUM and AVG are qc's; PREMUL_SUM with a scalar factor is a SUM scaled
// after (what FSDP2 asks for with a gradient divide factor).
bool reduce_op_of(const c10d::ReduceOp& op, qc_reduce_op_t* out, double* post_factor) {
  *post_factor = 1.0;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: *out = QC_OP_SUM; return true;
    case c10d::ReduceOp::AVG: *out = QC_OP_AVG; return true;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      if (s == nullptr || s->tensor_factor.defined()) return false;
      *out = QC_OP_SUM;
      *post_factor = s->double_factor;
      return true;
    }
    default: return false;
  }
}

const char* reduce_op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM (tensor factor)";
    default: return "unknown";
  }
}

// The tensor that tells which fallback group a call goes to.
at::Tensor first_of(const std::vector<at::Tensor>& tensors) {
  return tensors.empty() ? at::Tensor() : tensors.front();
}
at::Tensor first_of(const std::vector<std::vector<at::Tensor>>& lists) {
  return lists.empty() ? at::Tensor() : first_of(lists.front());
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  auto* a0 = static_cast<const char*>(a.data_ptr());
  auto* b0 = static_cast<const char*>(b.data_ptr());
  auto* a1 = a0 + a.nbytes();
  auto* b1 = b0 + b.nbytes();
  return a0 < b1 && b0 < a1;
}

// Whether `part` is rank `rank`'s slot of `whole`: the in-place layout of
// reduce-scatter (output in the input) and allgather (input in the output).
bool is_rank_slot(const at::Tensor& whole, const at::Tensor& part, int rank) {
  return static_cast<const char*>(part.data_ptr()) ==
         static_cast<const char*>(whole.data_ptr()) + rank * part.nbytes();
}

// `src`, or a copy of it where it overlaps `dst` other than in place.
at::Tensor unaliased(const at::Tensor& src, const at::Tensor& dst, bool in_place) {
  return !in_place && overlaps(src, dst) ? src.clone() : src;
}

// A contiguous tensor qc can write: `t` itself, or a staging copy that is
// copied back into `t` once the call succeeded.
at::Tensor writable(const c10::intrusive_ptr<QcWork>& work, const at::Tensor& t, bool copy_in) {
  if (t.is_contiguous()) return t;
  at::Tensor staged = copy_in ? t.contiguous() : at::empty(t.sizes(), t.options());
  work->keep_alive(staged);
  at::Tensor target = t;
  work->after_success([target, staged]() mutable { target.copy_(staged); });
  return staged;
}

}  // namespace

QcBackend::QcBackend(int rank, int size, c10::intrusive_ptr<c10d::Backend> bytes_group,
                     c10::intrusive_ptr<c10d::Backend> fallback_group, double timeout_seconds,
                     size_t max_sites, c10::intrusive_ptr<c10d::Store> store)
    : c10d::Backend(rank, size),
      bytes_group_(std::move(bytes_group)),
      fallback_(std::move(fallback_group)) {
  TORCH_CHECK(bytes_group_ && fallback_, "qc: QcBackend needs two inner groups");
  transport_ = std::make_unique<BackendTransport>(bytes_group_, rank, size);
  qc_transport_callbacks_t callbacks = transport_->callbacks();
  qc_comm_config_t config;
  qc_comm_config_init(&config);
  config.transport = QC_TRANSPORT_CALLBACKS;
  config.timeout_seconds = timeout_seconds;
  if (qc_comm_create_callbacks(&callbacks, &config, &comm_) != QC_SUCCESS) {
    const std::string message = qc_last_error();
    transport_.reset();
    throw std::runtime_error("qc: creating the communicator over gloo failed: " + message);
  }
  sites_ = std::make_unique<CallSites>(comm_, rank, max_sites);
  cuda_ = std::make_unique<CudaGroup>(std::move(store), rank, size, timeout_seconds, max_sites);
  completer_ = std::thread([this] { complete_in_order(); });
  std::lock_guard<std::mutex> lock(g_live_mutex);
  g_live.insert(this);
}

QcBackend::~QcBackend() {
  // Python drops the last reference with the GIL held (pybind's dealloc);
  // gloo's threads (joined by ~ProcessGroupGloo) and the completer (Future
  // callbacks) may need the GIL to finish: let go of it while tearing down.
  std::optional<pybind11::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
  close();
  fallback_.reset();
  cuda_fallback_.reset();
  bytes_group_.reset();
}

void QcBackend::shutdown() {
  close();
  fallback_->shutdown();
  if (cuda_fallback_) cuda_fallback_->shutdown();
  bytes_group_->shutdown();
}

void QcBackend::close() {
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live.erase(this);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    closed_ = true;
  }
  // Outstanding requests get the communicator's timeout to finish, then
  // fail; the completer sees them complete either way.
  qc_comm_destroy(comm_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (completer_.joinable()) completer_.join();
  cuda_.reset();  // waits for its stream, then destroys its communicator
  sites_.reset();
  transport_.reset();
}

void QcBackend::complete_in_order() {
  for (;;) {
    c10::intrusive_ptr<QcWork> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      work = queue_.front();
      queue_.pop_front();
    }
    work->complete(*sites_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --outstanding_;
    }
    changed_.notify_all();
  }
}

void QcBackend::synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return outstanding_ == 0; });
}

// ---- routing -------------------------------------------------------------

std::string QcBackend::why_not(const std::vector<at::Tensor>& tensors) const {
  for (const auto& t : tensors) {
    if (!t.defined()) return "undefined tensor";
    if (t.is_sparse()) return "sparse tensors";
    if (!t.device().is_cpu() && !t.device().is_cuda()) return "tensors on " + t.device().str();
    if (t.device() != tensors[0].device()) return "tensors on several devices";
    qc_dtype_t d;
    if (!qc_dtype_of(t, &d)) return std::string("dtype ") + c10::toString(t.scalar_type());
    if (t.scalar_type() != tensors[0].scalar_type()) return "mixed dtypes";
  }
  if (!tensors.empty() && tensors[0].is_cuda()) return cuda_->why_not(tensors[0].device());
  return "";
}

std::string QcBackend::why_not_reduce(const std::vector<at::Tensor>& tensors,
                                      const c10d::ReduceOp& op) const {
  std::string why = why_not(tensors);
  if (!why.empty()) return why;
  qc_reduce_op_t r;
  double f;
  if (!reduce_op_of(op, &r, &f)) return std::string("reduce op ") + reduce_op_name(op);
  return "";
}

QcBackend::WorkPtr QcBackend::to_fallback(const std::string& op, const std::string& why,
                                          const at::Tensor& sample,
                                          const std::function<WorkPtr(c10d::Backend&)>& call,
                                          bool collective) {
  const bool on_cuda = sample.defined() && sample.is_cuda();
  c10d::Backend& group = on_cuda && cuda_fallback_ ? *cuda_fallback_ : *fallback_;
  {
    std::lock_guard<std::mutex> lock(fallback_mutex_);
    const std::string key = op + ": " + why;
    if (fallback_counts_[key]++ == 0) {
      log_line(LogLevel::kInfo, getRank(),
               "torch backend: " + op + " goes to " + group.getBackendName() + " (" + why + ")");
    }
  }
  // Program order on shared tensors: the qc calls started before come first
  // (on the host; on the device, the caller's stream waits for qc's).
  if (collective) synchronize();
  if (on_cuda) {
    std::lock_guard<std::mutex> lock(cuda_->mutex());
    cuda_->current_waits_for_side(sample.device());
  }
  WorkPtr work = call(group);
  if (collective) last_fallback_ = work;
  return work;
}

void QcBackend::set_cuda_fallback(c10::intrusive_ptr<c10d::Backend> group) {
  cuda_fallback_ = std::move(group);
}

void QcBackend::before_qc_call() {
  if (last_fallback_) {
    WorkPtr previous = std::move(last_fallback_);
    last_fallback_.reset();
    if (!previous->isCompleted()) previous->wait();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!closed_, "qc: the process group was shut down");
}

void QcBackend::open_lane(const at::Tensor& first, Lane* lane) {
  if (!first.defined() || !first.is_cuda()) {
    lane->comm = comm_;
    lane->sites = sites_.get();
    return;
  }
  lane->device.reset_device(first.device());
  lane->lock = std::unique_lock<std::mutex>(cuda_->mutex());
  lane->comm = cuda_->comm();  // made by why_not, which routed this call here
  TORCH_CHECK(lane->comm != nullptr, "qc: no NCCL communicator for CUDA tensors");
  lane->sites = &cuda_->sites();
  lane->cuda = cuda_.get();
}

void* QcBackend::stream_for_call(const Lane& lane) {
  if (lane.cuda == nullptr) return nullptr;
  lane.cuda->side_waits_for_current();
  return lane.cuda->stream_handle();
}

c10::intrusive_ptr<QcWork> QcBackend::new_work(c10d::OpType type,
                                                std::vector<at::Tensor> outputs,
                                                const at::Tensor& first, Lane* lane) {
  before_qc_call();
  open_lane(first, lane);
  std::vector<c10::Device> devices;
  if (lane->cuda != nullptr) devices.push_back(first.device());
  return c10::make_intrusive<QcWork>(getRank(), type, std::move(outputs), std::move(devices));
}

void QcBackend::took_call(const c10::intrusive_ptr<QcWork>& work, Lane& lane, qc_status_t status,
                          const CallSites::Lease& lease, const char* function,
                          qc_request_t request, std::initializer_list<at::Tensor> tensors) {
  if (status != QC_SUCCESS) {
    lane.sites->release(lease.buffer);
    start_failed(work, lane, std::string(function) + " (layer " + lease.layer + ")");
  }
  for (const auto& t : tensors) work->keep_alive(t);
  if (lane.cuda != nullptr) {
    lane.sites->release(lease.buffer);  // the stream orders the residuals' next use
    return;
  }
  work->add_request(request, lease.buffer);
}

QcBackend::WorkPtr QcBackend::enqueue(const c10::intrusive_ptr<QcWork>& work, Lane& lane) {
  if (lane.cuda != nullptr) {
    work->finish_on_stream(*lane.cuda);
    return work;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(work);
    ++outstanding_;
  }
  changed_.notify_all();
  return work;
}

void QcBackend::start_failed(const c10::intrusive_ptr<QcWork>& work, Lane& lane,
                             const std::string& call) {
  const std::string message = qc_last_error();
  if (!work->empty()) enqueue(work, lane);  // the requests already started run out
  throw std::runtime_error("qc: " + call + " failed: " + message);
}

// ---- starting qc requests ----------------------------------------------

CallSites::Lease QcBackend::next_site(const c10::intrusive_ptr<QcWork>& work, Lane& lane,
                                      const std::string& op, qc_dtype_t dtype, size_t numel,
                                      bool with_residuals) {
  try {
    return lane.sites->next(op, dtype, numel, with_residuals);
  } catch (...) {
    if (!work->empty()) enqueue(work, lane);  // the requests already started run out
    throw;
  }
}

// Each qc collective once, for both lanes: the non-blocking call (a request)
// on the host, the stream-ordered call on the CUDA lane.

void QcBackend::start_allreduce(const c10::intrusive_ptr<QcWork>& work, Lane& lane,
                                const at::Tensor& tensor, qc_reduce_op_t op) {
  at::Tensor buf = writable(work, tensor, true);
  const qc_dtype_t dtype = dtype_of(buf);
  const size_t n = static_cast<size_t>(buf.numel());
  CallSites::Lease lease = next_site(work, lane, "allreduce", dtype, n, true);
  qc_request_t request = nullptr;
  void* stream = stream_for_call(lane);
  const qc_status_t status =
      lane.cuda ? qc_allreduce(lane.comm, buf.data_ptr(), buf.data_ptr(), n, dtype, op,
                               lease.layer.c_str(), lease.buffer, stream)
                : qc_iallreduce(lane.comm, buf.data_ptr(), buf.data_ptr(), n, dtype, op,
                                lease.layer.c_str(), lease.buffer, &request);
  took_call(work, lane, status, lease, "qc_iallreduce", request, {tensor, buf});
}

void QcBackend::start_reduce_scatter(const c10::intrusive_ptr<QcWork>& work, Lane& lane,
                                     const at::Tensor& output, const at::Tensor& input,
                                     qc_reduce_op_t op) {
  at::Tensor dst = writable(work, output, false);
  const at::Tensor whole = input.contiguous();
  const at::Tensor src = unaliased(whole, dst, is_rank_slot(whole, dst, getRank()));
  const size_t n = static_cast<size_t>(dst.numel());
  const qc_dtype_t dtype = dtype_of(src);
  CallSites::Lease lease = next_site(work, lane, "reduce_scatter", dtype, src.numel(), true);
  qc_request_t request = nullptr;
  void* stream = stream_for_call(lane);
  const qc_status_t status =
      lane.cuda ? qc_reduce_scatter(lane.comm, src.data_ptr(), dst.data_ptr(), n, dtype, op,
                                    lease.layer.c_str(), lease.buffer, stream)
                : qc_ireduce_scatter(lane.comm, src.data_ptr(), dst.data_ptr(), n, dtype, op,
                                     lease.layer.c_str(), lease.buffer, &request);
  took_call(work, lane, status, lease, "qc_ireduce_scatter", request, {src, dst});
}

void QcBackend::start_allgather(const c10::intrusive_ptr<QcWork>& work, Lane& lane,
                                const at::Tensor& output, const at::Tensor& input) {
  at::Tensor dst = writable(work, output, false);
  const at::Tensor part = input.contiguous();
  const at::Tensor src = unaliased(part, dst, is_rank_slot(dst, part, getRank()));
  const size_t n = static_cast<size_t>(src.numel());
  const qc_dtype_t dtype = dtype_of(src);
  CallSites::Lease lease = next_site(work, lane, "allgather", dtype, n, true);
  qc_request_t request = nullptr;
  void* stream = stream_for_call(lane);
  const qc_status_t status =
      lane.cuda ? qc_allgather(lane.comm, src.data_ptr(), dst.data_ptr(), n, dtype,
                               lease.layer.c_str(), lease.buffer, stream)
                : qc_iallgather(lane.comm, src.data_ptr(), dst.data_ptr(), n, dtype,
                                lease.layer.c_str(), lease.buffer, &request);
  took_call(work, lane, status, lease, "qc_iallgather", request, {src, dst});
}

// ---- the collectives -----------------------------------------------------

QcBackend::WorkPtr QcBackend::allreduce(std::vector<at::Tensor>& tensors,
                                        const c10d::AllreduceOptions& opts) {
  const std::string why = why_not_reduce(tensors, opts.reduceOp);
  if (!why.empty()) {
    return to_fallback("allreduce", why, first_of(tensors),
                       [&](c10d::Backend& fb) { return fb.allreduce(tensors, opts); });
  }
  qc_reduce_op_t op;
  double factor;
  reduce_op_of(opts.reduceOp, &op, &factor);
  Lane lane;
  auto work = new_work(c10d::OpType::ALLREDUCE, tensors, tensors.front(), &lane);
  for (const auto& t : tensors) {
    start_allreduce(work, lane, t, op);
    if (factor != 1.0) {
      at::Tensor target = t;
      work->after_success([target, factor]() mutable { target.mul_(factor); });
    }
  }
  return enqueue(work, lane);
}

QcBackend::WorkPtr QcBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceCoalescedOptions& opts) {
  const std::string why = why_not_reduce(tensors, opts.reduceOp);
  if (!why.empty()) {
    return to_fallback("allreduce_coalesced", why, first_of(tensors),
                       [&](c10d::Backend& fb) { return fb.allreduce_coalesced(tensors, opts); });
  }
  c10d::AllreduceOptions single;
  single.reduceOp = opts.reduceOp;
  single.timeout = opts.timeout;
  return allreduce(tensors, single);
}

QcBackend::WorkPtr QcBackend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                               const c10d::AllreduceOptions& opts) {
  return to_fallback("allreduce_sparse", "sparse tensors", first_of(tensors),
                     [&](c10d::Backend& fb) { return fb.allreduce_sparse(tensors, opts); });
}

QcBackend::WorkPtr QcBackend::broadcast(std::vector<at::Tensor>& tensors,
                                        const c10d::BroadcastOptions& opts) {
  std::string why = why_not(tensors);
  if (why.empty() && opts.rootTensor != 0) why = "rootTensor != 0";
  if (!why.empty()) {
    return to_fallback("broadcast", why, first_of(tensors),
                       [&](c10d::Backend& fb) { return fb.broadcast(tensors, opts); });
  }
  Lane lane;
  auto work = new_work(c10d::OpType::BROADCAST, tensors, tensors.front(), &lane);
  const int root = static_cast<int>(opts.rootRank);
  for (const auto& t : tensors) {
    at::Tensor buf = writable(work, t, getRank() == root);
    const qc_dtype_t dtype = dtype_of(buf);
    const size_t n = static_cast<size_t>(buf.numel());
    CallSites::Lease lease = next_site(work, lane, "broadcast", dtype, n, false);
    qc_request_t request = nullptr;
    void* send = getRank() == root ? buf.data_ptr() : nullptr;
    void* stream = stream_for_call(lane);
    const qc_status_t status =
        lane.cuda ? qc_broadcast(lane.comm, send, buf.data_ptr(), n, dtype, root,
                                 lease.layer.c_str(), stream)
                  : qc_ibroadcast(lane.comm, send, buf.data_ptr(), n, dtype, root,
                                  lease.layer.c_str(), &request);
    took_call(work, lane, status, lease, "qc_ibroadcast", request, {t, buf});
  }
  return enqueue(work, lane);
}

QcBackend::WorkPtr QcBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                   const c10d::ReduceScatterOptions& opts) {
  std::string why = why_not_reduce({output, input}, opts.reduceOp);
  if (why.empty() && input.numel() != output.numel() * getSize()) {
    why = "input is not world_size x output elements";
  }
  if (!why.empty()) {
    return to_fallback("reduce_scatter_tensor", why, output,
                       [&](c10d::Backend& fb) {
                         return fb._reduce_scatter_base(output, input, opts);
                       });
  }
  qc_reduce_op_t op;
  double factor;
  reduce_op_of(opts.reduceOp, &op, &factor);
  Lane lane;
  auto work = new_work(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, output, &lane);
  start_reduce_scatter(work, lane, output, input, op);
  if (factor != 1.0) {
    at::Tensor target = output;
    work->after_success([target, factor]() mutable { target.mul_(factor); });
  }
  return enqueue(work, lane);
}

QcBackend::WorkPtr QcBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> all(outputs);
  all.insert(all.end(), inputs.begin(), inputs.end());
  std::string why = why_not_reduce(all, opts.reduceOp);
  if (why.empty() && outputs.size() != inputs.size()) why = "as many inputs as outputs";
  for (size_t i = 0; why.empty() && i < outputs.size(); ++i) {
    if (inputs[i].numel() != outputs[i].numel() * getSize()) {
      why = "input is not world_size x output elements";
    }
  }
  if (!why.empty()) {
    return to_fallback("reduce_scatter_tensor_coalesced", why, first_of(outputs),
                       [&](c10d::Backend& fb) {
                         return fb.reduce_scatter_tensor_coalesced(outputs, inputs, opts);
                       });
  }
  qc_reduce_op_t op;
  double factor;
  reduce_op_of(opts.reduceOp, &op, &factor);
  Lane lane;
  auto work =
      new_work(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, outputs, outputs.front(), &lane);
  for (size_t i = 0; i < outputs.size(); ++i) {
    start_reduce_scatter(work, lane, outputs[i], inputs[i], op);
    if (factor != 1.0) {
      at::Tensor target = outputs[i];
      work->after_success([target, factor]() mutable { target.mul_(factor); });
    }
  }
  return enqueue(work, lane);
}

QcBackend::WorkPtr QcBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                             std::vector<std::vector<at::Tensor>>& inputs,
                                             const c10d::ReduceScatterOptions& opts) {
  std::string why;
  if (outputs.size() != 1 || inputs.size() != 1 ||
      inputs[0].size() != static_cast<size_t>(getSize())) {
    why = "more than one output tensor";
  } else {
    std::vector<at::Tensor> all(inputs[0]);
    all.push_back(outputs[0]);
    why = why_not_reduce(all, opts.reduceOp);
    for (const auto& t : inputs[0]) {
      if (why.empty() && t.numel() != outputs[0].numel()) why = "unequal sizes";
    }
  }
  if (!why.empty()) {
    return to_fallback("reduce_scatter", why, first_of(outputs),
                       [&](c10d::Backend& fb) { return fb.reduce_scatter(outputs, inputs, opts); });
  }
  std::vector<at::Tensor> flat_parts;
  for (const auto& t : inputs[0]) flat_parts.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(flat_parts);
  return _reduce_scatter_base(outputs[0], flat, opts);
}

QcBackend::WorkPtr QcBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                              const c10d::AllgatherOptions& opts) {
  std::string why = why_not({output, input});
  if (why.empty() && output.numel() != input.numel() * getSize()) {
    why = "output is not world_size x input elements";
  }
  if (!why.empty()) {
    return to_fallback("all_gather_into_tensor", why, output,
                       [&](c10d::Backend& fb) { return fb._allgather_base(output, input, opts); });
  }
  Lane lane;
  auto work = new_work(c10d::OpType::_ALLGATHER_BASE, {output}, output, &lane);
  start_allgather(work, lane, output, input);
  return enqueue(work, lane);
}

QcBackend::WorkPtr QcBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> all(outputs);
  all.insert(all.end(), inputs.begin(), inputs.end());
  std::string why = why_not(all);
  if (why.empty() && outputs.size() != inputs.size()) why = "as many inputs as outputs";
  for (size_t i = 0; why.empty() && i < outputs.size(); ++i) {
    if (outputs[i].numel() != inputs[i].numel() * getSize()) {
      why = "output is not world_size x input elements";
    }
  }
  if (!why.empty()) {
    return to_fallback("allgather_into_tensor_coalesced", why, first_of(outputs),
                       [&](c10d::Backend& fb) {
                         return fb.allgather_into_tensor_coalesced(outputs, inputs, opts);
                       });
  }
  Lane lane;
  auto work =
      new_work(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, outputs, outputs.front(), &lane);
  for (size_t i = 0; i < outputs.size(); ++i) start_allgather(work, lane, outputs[i], inputs[i]);
  return enqueue(work, lane);
}

QcBackend::WorkPtr QcBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::AllgatherOptions& opts) {
  std::string why;
  if (outputs.size() != 1 || inputs.size() != 1 ||
      outputs[0].size() != static_cast<size_t>(getSize())) {
    why = "more than one input tensor";
  } else {
    std::vector<at::Tensor> all(outputs[0]);
    all.push_back(inputs[0]);
    why = why_not(all);
    for (const auto& t : outputs[0]) {
      if (why.empty() && t.numel() != inputs[0].numel()) why = "unequal sizes";
    }
  }
  if (!why.empty()) {
    return to_fallback("allgather", why, first_of(inputs),
                       [&](c10d::Backend& fb) { return fb.allgather(outputs, inputs, opts); });
  }
  Lane lane;
  auto work = new_work(c10d::OpType::ALLGATHER, outputs[0], inputs[0], &lane);
  at::Tensor flat = at::empty({inputs[0].numel() * getSize()}, inputs[0].options());
  start_allgather(work, lane, flat, inputs[0]);
  std::vector<at::Tensor> targets = outputs[0];
  const int64_t n = inputs[0].numel();
  work->after_success([targets, flat, n]() mutable {
    for (size_t i = 0; i < targets.size(); ++i) {
      targets[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(targets[i].sizes()));
    }
  });
  for (const auto& t : targets) work->keep_alive(t);
  return enqueue(work, lane);
}

QcBackend::WorkPtr QcBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                            std::vector<int64_t>& output_splits,
                                            std::vector<int64_t>& input_splits,
                                            const c10d::AllToAllOptions& opts) {
  std::string why = why_not({output, input});
  const int64_t size = getSize();
  auto equal = [&](const std::vector<int64_t>& splits, const at::Tensor& t) {
    if (splits.empty()) return t.dim() > 0 && t.size(0) % size == 0;
    for (int64_t s : splits) {
      if (t.dim() == 0 || s * size != t.size(0)) return false;
    }
    return true;
  };
  if (why.empty() && (!equal(output_splits, output) || !equal(input_splits, input) ||
                      output.numel() != input.numel())) {
    why = "unequal splits";
  }
  if (!why.empty()) {
    return to_fallback("all_to_all_single", why, output,
                       [&](c10d::Backend& fb) {
                         return fb.alltoall_base(output, input, output_splits, input_splits, opts);
                       });
  }
  Lane lane;
  auto work = new_work(c10d::OpType::ALLTOALL_BASE, {output}, output, &lane);
  at::Tensor src = input.contiguous();
  at::Tensor dst = writable(work, output, false);
  src = unaliased(src, dst, src.data_ptr() == dst.data_ptr());
  const qc_dtype_t dtype = dtype_of(src);
  const size_t per_rank = static_cast<size_t>(src.numel() / size);
  CallSites::Lease lease = next_site(work, lane, "alltoall", dtype, src.numel(), false);
  qc_request_t request = nullptr;
  void* stream = stream_for_call(lane);
  const qc_status_t status =
      lane.cuda ? qc_alltoall(lane.comm, src.data_ptr(), dst.data_ptr(), per_rank, dtype,
                              lease.layer.c_str(), stream)
                : qc_ialltoall(lane.comm, src.data_ptr(), dst.data_ptr(), per_rank, dtype,
                               lease.layer.c_str(), &request);
  took_call(work, lane, status, lease, "qc_ialltoall", request, {src, dst});
  return enqueue(work, lane);
}

QcBackend::WorkPtr QcBackend::barrier(const c10d::BarrierOptions& /*opts*/) {
  // One float summed by qc on the host: it runs after every qc call
  // started before; the CUDA lane's calls are waited for first (as NCCL's
  // barrier waits for the device).
  {
    std::lock_guard<std::mutex> lock(cuda_->mutex());
    cuda_->synchronize();
  }
  Lane lane;
  auto work = new_work(c10d::OpType::BARRIER, {}, at::Tensor(), &lane);
  at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kFloat));
  qc_request_t request = nullptr;
  const qc_status_t status = qc_iallreduce(comm_, token.data_ptr(), token.data_ptr(), 1,
                                           QC_DTYPE_FLOAT32, QC_OP_SUM, "barrier", nullptr,
                                           &request);
  took_call(work, lane, status, CallSites::Lease{"barrier", nullptr}, "qc_iallreduce", request,
            {token});
  return enqueue(work, lane);
}

// ---- what qc does not do: the fallback ------------------------------------

QcBackend::WorkPtr QcBackend::reduce(std::vector<at::Tensor>& tensors,
                                     const c10d::ReduceOptions& opts) {
  return to_fallback("reduce", "not a qc collective", first_of(tensors),
                     [&](c10d::Backend& fb) { return fb.reduce(tensors, opts); });
}

QcBackend::WorkPtr QcBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  return to_fallback("allgather_coalesced", "not a qc collective", first_of(inputs),
                     [&](c10d::Backend& fb) {
                       return fb.allgather_coalesced(outputs, inputs, opts);
                     });
}

QcBackend::WorkPtr QcBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                     std::vector<at::Tensor>& inputs,
                                     const c10d::GatherOptions& opts) {
  return to_fallback("gather", "not a qc collective", first_of(inputs),
                     [&](c10d::Backend& fb) { return fb.gather(outputs, inputs, opts); });
}

QcBackend::WorkPtr QcBackend::scatter(std::vector<at::Tensor>& outputs,
                                      std::vector<std::vector<at::Tensor>>& inputs,
                                      const c10d::ScatterOptions& opts) {
  return to_fallback("scatter", "not a qc collective", first_of(outputs),
                     [&](c10d::Backend& fb) { return fb.scatter(outputs, inputs, opts); });
}

QcBackend::WorkPtr QcBackend::alltoall(std::vector<at::Tensor>& outputs,
                                       std::vector<at::Tensor>& inputs,
                                       const c10d::AllToAllOptions& opts) {
  return to_fallback("all_to_all", "tensor lists", first_of(outputs),
                     [&](c10d::Backend& fb) { return fb.alltoall(outputs, inputs, opts); });
}

QcBackend::WorkPtr QcBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return to_fallback("send", "point to point", first_of(tensors),
                     [&](c10d::Backend& fb) { return fb.send(tensors, dst, tag); }, false);
}

QcBackend::WorkPtr QcBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return to_fallback("recv", "point to point", first_of(tensors),
                     [&](c10d::Backend& fb) { return fb.recv(tensors, src, tag); }, false);
}

QcBackend::WorkPtr QcBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return to_fallback("recv", "point to point", first_of(tensors),
                     [&](c10d::Backend& fb) { return fb.recvAnysource(tensors, tag); }, false);
}

void QcBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  synchronize();
  fallback_->monitoredBarrier(opts, wait_all_ranks);
}

uint64_t QcBackend::getSequenceNumberForGroup() {
  return fallback_->getSequenceNumberForGroup();
}

// ---- the Python API ------------------------------------------------------

void QcBackend::set_layer_policy(const std::string& pattern, const PolicyTuple& t) {
  qc_policy_t p;
  qc_policy_init(&p);
  p.codec = static_cast<qc_codec_t>(std::get<0>(t));
  p.bits = std::get<1>(t);
  p.bucket_size = std::get<2>(t);
  p.rounding = static_cast<qc_rounding_t>(std::get<3>(t));
  p.algorithm = static_cast<qc_algorithm_t>(std::get<4>(t));
  p.error_feedback = std::get<5>(t);
  p.group_size = std::get<6>(t);
  p.topk_ratio = static_cast<float>(std::get<7>(t));
  p.scale_update_period = std::get<8>(t);
  p.seed = std::get<9>(t);
  p.min_compress_bytes = static_cast<size_t>(std::get<10>(t));
  p.scale = static_cast<qc_scale_t>(std::get<11>(t));
  if (qc_comm_set_layer_policy(comm_, pattern.c_str(), &p) != QC_SUCCESS) {
    throw_qc("set_layer_policy(\"" + pattern + "\")");
  }
  cuda_->set_layer_policy(pattern, p);
}

PolicyTuple QcBackend::get_layer_policy(const std::string& layer) {
  qc_policy_t p;
  qc_policy_init(&p);
  if (qc_comm_get_layer_policy(comm_, layer.c_str(), &p) != QC_SUCCESS) {
    throw_qc("get_layer_policy(\"" + layer + "\")");
  }
  return PolicyTuple(p.codec, p.bits, p.bucket_size, p.rounding, p.algorithm, p.error_feedback,
                     p.group_size, p.topk_ratio, p.scale_update_period, p.seed,
                     p.min_compress_bytes, static_cast<int>(p.scale));
}

// The CUDA lane's sites, in a state dict, carry this prefix before their
// layer name (their residuals live on its communicator).
static const std::string kCudaSitePrefix = "cuda/";

void QcBackend::reset_call_sites() {
  sites_->reset_counters();
  std::lock_guard<std::mutex> lock(cuda_->mutex());
  if (cuda_->comm() != nullptr) cuda_->sites().reset_counters();
}

size_t QcBackend::call_site_count() {
  size_t n = sites_->site_count();
  std::lock_guard<std::mutex> lock(cuda_->mutex());
  if (cuda_->comm() != nullptr) n += cuda_->sites().site_count();
  return n;
}

std::map<std::string, std::pair<size_t, std::string>> QcBackend::residuals() {
  synchronize();
  std::map<std::string, std::pair<size_t, std::string>> out;
  for (auto& s : sites_->save()) out[s.layer] = {s.count, std::move(s.image)};
  std::lock_guard<std::mutex> lock(cuda_->mutex());
  if (cuda_->comm() != nullptr) {
    cuda_->synchronize();
    for (auto& s : cuda_->sites().save()) {
      out[kCudaSitePrefix + s.layer] = {s.count, std::move(s.image)};
    }
  }
  return out;
}

void QcBackend::load_residuals(
    const std::map<std::string, std::pair<size_t, std::string>>& saved) {
  synchronize();
  std::lock_guard<std::mutex> lock(cuda_->mutex());
  for (const auto& entry : saved) {
    const std::string& name = entry.first;
    if (name.compare(0, kCudaSitePrefix.size(), kCudaSitePrefix) != 0) {
      sites_->load(CallSites::Saved{name, entry.second.first, entry.second.second});
      continue;
    }
    CallSites::Saved site{name.substr(kCudaSitePrefix.size()), entry.second.first,
                          entry.second.second};
    if (cuda_->comm() != nullptr) {
      cuda_->synchronize();
      cuda_->sites().load(site);
    } else {
      cuda_->defer_load(site);  // loaded when the first CUDA call makes the communicator
    }
  }
}

std::map<std::string, double> QcBackend::stats() {
  std::map<std::string, double> out{{"calls", 0.0},         {"logical_bytes", 0.0},
                                    {"wire_bytes", 0.0},    {"codec_seconds", 0.0},
                                    {"transport_seconds", 0.0}};
  auto add = [&out](qc_comm_t comm) {
    qc_stats_t s;
    qc_stats_init(&s);
    if (qc_comm_get_stats(comm, &s) != QC_SUCCESS) throw_qc("stats");
    out["calls"] += static_cast<double>(s.calls);
    out["logical_bytes"] += static_cast<double>(s.logical_bytes);
    out["wire_bytes"] += static_cast<double>(s.wire_bytes);
    out["codec_seconds"] += s.codec_seconds;
    out["transport_seconds"] += s.transport_seconds;
  };
  add(comm_);
  std::lock_guard<std::mutex> lock(cuda_->mutex());
  if (cuda_->comm() != nullptr) add(cuda_->comm());
  return out;
}

std::map<std::string, uint64_t> QcBackend::fallback_counts() {
  std::lock_guard<std::mutex> lock(fallback_mutex_);
  return fallback_counts_;
}

bool QcBackend::cuda_ready() {
  std::lock_guard<std::mutex> lock(cuda_->mutex());
  return cuda_->comm() != nullptr;
}

void QcBackend::reset_all_call_sites() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  for (QcBackend* b : g_live) b->reset_call_sites();
}

}  // namespace qc_torch
