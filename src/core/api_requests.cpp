// Entry points of the non-blocking collectives and their requests
// (qc.h section 6; core/request_queue.h runs them).
#include <memory>
#include <string>
#include <vector>

#include "core/api_checks.h"
#include "core/api_guard.h"
#include "core/log.h"
#include "core/communicator.h"
#include "core/emulate.h"
#include "core/error_buffer.h"
#include "core/request_queue.h"
#include "core/sparse_result.h"

using namespace qc;

namespace qc {

// What a qc_request_t names: the request's outcome, shared with the
// communicator's queue (which may finish it after the handle is freed).
struct CollectiveRequest {
  std::shared_ptr<RequestState> state;
};

// Never destroyed: see handle_table.h.
HandleTable<CollectiveRequest>& live_requests() {
  static auto* table = new HandleTable<CollectiveRequest>();
  return *table;
}

}  // namespace qc

namespace {

using RequestLease = HandleTable<CollectiveRequest>::Lease;

Status lease_request(qc_request_t request, RequestLease* out) {
  QC_RETURN_IF_ERROR(require(request, "request"));
  *out = live_requests().lease(handle_value(request), /*collective=*/false);
  if (*out) return Status::ok();
  return invalid_argument("argument 'request' is not a live qc request (freed, or not made by "
                          "one of the qc_i* collectives)");
}

// The host buffers a request's task reads and writes on another thread.
Status require_host_buffers(const void* sendbuf, const void* recvbuf) {
  QC_RETURN_IF_ERROR(require_host_memory(sendbuf, "sendbuf"));
  return require_host_memory(recvbuf, "recvbuf");
}

// A name the task keeps (the caller's string may be gone when it runs).
struct LayerName {
  explicit LayerName(const char* layer) : given(layer != nullptr), text(given ? layer : "") {}
  const char* get() const { return given ? text.c_str() : nullptr; }
  bool given;
  std::string text;
};

// Starts `task` on the communicator's queue and publishes its handle. The
// error buffer's lease goes with the task, so the buffer stays in use (and
// alive) until the request has run.
Status start_request(Communicator* comm, std::shared_ptr<ErrorBufferLease> error_buffer,
                     std::function<Status(ErrorBuffer*)> task, qc_request_t* request) {
  const int rank = comm->transport->rank();
  auto run = [error_buffer, task = std::move(task), rank]() {
    set_log_rank(rank);  // on the progress thread, the lines name the rank
    return task(error_buffer != nullptr ? error_buffer->get() : nullptr);
  };
  std::shared_ptr<RequestState> state = comm->requests.start(run, comm->progress_inline);
  auto object = std::make_unique<CollectiveRequest>();
  object->state = std::move(state);
  *request = reinterpret_cast<qc_request_t>(live_requests().add(std::move(object)));
  return Status::ok();
}

// The checks every start makes before its own: *request cleared first, so
// a failed start leaves no stale handle behind.
Status begin_start(qc_comm_t comm, qc_request_t* request, CommLease* c) {
  QC_RETURN_IF_ERROR(require(request, "request"));
  *request = nullptr;
  // Collective: without a progress thread the request runs in this call.
  return lease_comm(comm, /*collective=*/true, c);
}

Status lease_task_error_buffer(qc_error_buffer_t error_buffer,
                               std::shared_ptr<ErrorBufferLease>* out) {
  auto lease = std::make_shared<ErrorBufferLease>();
  QC_RETURN_IF_ERROR(lease_optional_error_buffer(error_buffer, "error_buffer", lease.get()));
  if (*lease) *out = std::move(lease);
  return Status::ok();
}

}  // namespace

extern "C" {

QC_API qc_status_t qc_iallreduce(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                 qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                                 qc_error_buffer_t error_buffer, qc_request_t* request) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(begin_start(comm, request, &c));
    std::shared_ptr<ErrorBufferLease> eb;
    QC_RETURN_IF_ERROR(lease_task_error_buffer(error_buffer, &eb));
    QC_RETURN_IF_ERROR(validate_allreduce(sendbuf, recvbuf, count, dtype, op));
    QC_RETURN_IF_ERROR(require_host_buffers(sendbuf, recvbuf));
    Communicator* object = c.get();
    auto name = std::make_shared<LayerName>(layer);
    return start_request(object, eb, [=](ErrorBuffer* buffer) {
      return comm_allreduce(object, sendbuf, recvbuf, count, dtype, op, name->get(), buffer);
    }, request);
  });
}

QC_API qc_status_t qc_iallreduce_segments(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                          size_t nsegments, const size_t* counts,
                                          const char* const* layers, qc_dtype_t dtype,
                                          qc_reduce_op_t op, qc_error_buffer_t error_buffer,
                                          qc_request_t* request) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(begin_start(comm, request, &c));
    std::shared_ptr<ErrorBufferLease> eb;
    QC_RETURN_IF_ERROR(lease_task_error_buffer(error_buffer, &eb));
    size_t total = 0;
    QC_RETURN_IF_ERROR(check_segment_counts(nsegments, counts, &total));
    QC_RETURN_IF_ERROR(validate_allreduce(sendbuf, recvbuf, total, dtype, op));
    QC_RETURN_IF_ERROR(require_host_buffers(sendbuf, recvbuf));
    // Copies of the caller's arrays: they may be gone when the task runs.
    auto segment_counts = std::make_shared<std::vector<size_t>>(counts, counts + nsegments);
    auto names = std::make_shared<std::vector<LayerName>>();
    for (size_t i = 0; i < nsegments; ++i) {
      names->emplace_back(layers != nullptr ? layers[i] : nullptr);
    }
    Communicator* object = c.get();
    return start_request(object, eb, [=](ErrorBuffer* buffer) {
      std::vector<const char*> name_ptrs;
      for (const LayerName& n : *names) name_ptrs.push_back(n.get());
      return comm_allreduce_segments(object, sendbuf, recvbuf, nsegments, segment_counts->data(),
                                     name_ptrs.data(), dtype, op, buffer);
    }, request);
  });
}

QC_API qc_status_t qc_ialltoall(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                size_t count_per_rank, qc_dtype_t dtype, const char* layer,
                                qc_request_t* request) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(begin_start(comm, request, &c));
    QC_RETURN_IF_ERROR(
        validate_alltoall(c->transport->size(), sendbuf, recvbuf, count_per_rank, dtype));
    QC_RETURN_IF_ERROR(require_host_buffers(sendbuf, recvbuf));
    Communicator* object = c.get();
    auto name = std::make_shared<LayerName>(layer);
    return start_request(object, nullptr, [=](ErrorBuffer*) {
      return comm_alltoall(object, sendbuf, recvbuf, count_per_rank, dtype, name->get());
    }, request);
  });
}

QC_API qc_status_t qc_ireduce_scatter(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                      size_t recvcount, qc_dtype_t dtype, qc_reduce_op_t op,
                                      const char* layer, qc_error_buffer_t error_buffer,
                                      qc_request_t* request) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(begin_start(comm, request, &c));
    std::shared_ptr<ErrorBufferLease> eb;
    QC_RETURN_IF_ERROR(lease_task_error_buffer(error_buffer, &eb));
    QC_RETURN_IF_ERROR(validate_reduce_scatter(c->transport->size(), c->transport->rank(),
                                               sendbuf, recvbuf, recvcount, dtype, op));
    QC_RETURN_IF_ERROR(require_host_buffers(sendbuf, recvbuf));
    Communicator* object = c.get();
    auto name = std::make_shared<LayerName>(layer);
    return start_request(object, eb, [=](ErrorBuffer* buffer) {
      return comm_reduce_scatter(object, nullptr, nullptr, sendbuf, recvbuf, recvcount, dtype, op,
                                 name->get(), buffer);
    }, request);
  });
}

QC_API qc_status_t qc_iallgather(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                 size_t sendcount, qc_dtype_t dtype, const char* layer,
                                 qc_error_buffer_t error_buffer, qc_request_t* request) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(begin_start(comm, request, &c));
    std::shared_ptr<ErrorBufferLease> eb;
    QC_RETURN_IF_ERROR(lease_task_error_buffer(error_buffer, &eb));
    QC_RETURN_IF_ERROR(validate_allgather(c->transport->size(), c->transport->rank(), sendbuf,
                                          recvbuf, sendcount, dtype));
    QC_RETURN_IF_ERROR(require_host_buffers(sendbuf, recvbuf));
    Communicator* object = c.get();
    auto name = std::make_shared<LayerName>(layer);
    return start_request(object, eb, [=](ErrorBuffer* buffer) {
      return comm_allgather(object, nullptr, nullptr, sendbuf, recvbuf, sendcount, dtype,
                            name->get(), buffer);
    }, request);
  });
}

QC_API qc_status_t qc_ibroadcast(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                 size_t count, qc_dtype_t dtype, int root, const char* layer,
                                 qc_request_t* request) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(begin_start(comm, request, &c));
    const int rank = c->transport->rank();
    QC_RETURN_IF_ERROR(
        validate_broadcast(c->transport->size(), rank, sendbuf, recvbuf, count, dtype, root));
    const void* send = rank == root ? sendbuf : nullptr;
    QC_RETURN_IF_ERROR(require_host_buffers(send, recvbuf));
    Communicator* object = c.get();
    auto name = std::make_shared<LayerName>(layer);
    return start_request(object, nullptr, [=](ErrorBuffer*) {
      return comm_broadcast(object, nullptr, nullptr, send, recvbuf, count, dtype, root,
                            name->get());
    }, request);
  });
}

QC_API qc_status_t qc_isparse_allreduce(qc_comm_t comm, const int64_t* indices,
                                        const void* values, size_t nnz, size_t row_len,
                                        qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                                        qc_sparse_result_t* result, qc_request_t* request) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require(result, "result"));
    *result = nullptr;
    CommLease c;
    QC_RETURN_IF_ERROR(begin_start(comm, request, &c));
    QC_RETURN_IF_ERROR(validate_sparse_rows(indices, values, nnz, row_len, dtype, op));
    Communicator* object = c.get();
    auto name = std::make_shared<LayerName>(layer);
    std::shared_ptr<SparseFill> fill;
    make_sparse_result(row_len, dtype, &fill, result);
    Status started = start_request(object, nullptr, [=](ErrorBuffer*) -> Status {
      SparseRows rows;
      QC_RETURN_IF_ERROR(comm_sparse_allreduce(object, indices, values, nnz, row_len, dtype, op,
                                               name->get(), &rows));
      fill->rows = std::move(rows);
      fill->ready.store(true, std::memory_order_release);
      return Status::ok();
    }, request);
    if (!started) {
      drop_sparse_result(*result);
      *result = nullptr;
    }
    return started;
  });
}

QC_API qc_status_t qc_isparse_allreduce_dense(qc_comm_t comm, const int64_t* indices,
                                              const void* values, size_t nnz, size_t row_len,
                                              size_t nrows, void* dense, qc_dtype_t dtype,
                                              qc_reduce_op_t op, const char* layer,
                                              qc_request_t* request) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(begin_start(comm, request, &c));
    QC_RETURN_IF_ERROR(validate_sparse_rows(indices, values, nnz, row_len, dtype, op));
    QC_RETURN_IF_ERROR(validate_sparse_dense(nnz, row_len, nrows, dense, dtype));
    Communicator* object = c.get();
    auto name = std::make_shared<LayerName>(layer);
    return start_request(object, nullptr, [=](ErrorBuffer*) {
      return comm_sparse_allreduce_dense(object, indices, values, nnz, row_len, nrows, dense,
                                         dtype, op, name->get());
    }, request);
  });
}

QC_API qc_status_t qc_request_test(qc_request_t request, int* done) {
  return QC_API_CALL({
    RequestLease r;
    QC_RETURN_IF_ERROR(lease_request(request, &r));
    QC_RETURN_IF_ERROR(require(done, "done"));
    Status status;
    *done = r->state->test(&status) ? 1 : 0;
    return status;
  });
}

QC_API qc_status_t qc_request_wait(qc_request_t request) {
  return QC_API_CALL({
    std::shared_ptr<RequestState> state;
    {
      RequestLease r;
      QC_RETURN_IF_ERROR(lease_request(request, &r));
      state = r->state;
    }
    // Without the lease: a free on another thread need not wait for this.
    return state->wait();
  });
}

QC_API qc_status_t qc_request_free(qc_request_t request) {
  return QC_API_CALL({
    if (request == nullptr) return Status::ok();
    CollectiveRequest* object = nullptr;
    if (live_requests().close(handle_value(request), &object) ==
        HandleTable<CollectiveRequest>::Use::kNotLive) {
      RequestLease none;
      return lease_request(request, &none);  // the "not live" message
    }
    live_requests().take_when_unused(handle_value(request)).reset();
    return Status::ok();
  });
}

}  // extern "C"
