#include "py_transport.h"

#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <string>
#include <unordered_map>

namespace py = pybind11;

namespace qcpy {

namespace {

// What the callbacks' context points at; every member is touched with the
// GIL held (qc never calls one communicator's callbacks concurrently).
struct PyTransport {
  py::object transport;
  py::object post_send, post_recv, test, wait, cancel, abort;  // bound methods; None if absent
  // The transfers qc holds: a number (the C handle) -> what post_* returned.
  std::unordered_map<uintptr_t, py::object> transfers;
  uintptr_t next_id = 1;
  std::string error;  // the last failure, for error_message
};

PyTransport* self_of(void* context) { return static_cast<PyTransport*>(context); }

// Runs `body` with the GIL; a Python exception becomes the return value 1
// and its text the transport's error.
template <class F>
int guarded(void* context, const char* method, F&& body) {
  py::gil_scoped_acquire gil;
  PyTransport* self = self_of(context);
  try {
    body(*self);
    return 0;
  } catch (py::error_already_set& e) {
    self->error = std::string("transport.") + method + " raised " + e.what();
  } catch (const std::exception& e) {
    self->error = std::string("transport.") + method + ": " + e.what();
  }
  return 1;
}

uintptr_t keep(PyTransport& self, py::object handle) {
  const uintptr_t id = self.next_id++;
  self.transfers.emplace(id, std::move(handle));
  return id;
}

py::object& transfer(PyTransport& self, void* handle) {
  auto it = self.transfers.find(reinterpret_cast<uintptr_t>(handle));
  if (it == self.transfers.end()) throw std::runtime_error("qc passed an unknown transfer");
  return it->second;
}

py::object memory(void* data, size_t bytes, bool writable) {
  PyObject* view = PyMemoryView_FromMemory(static_cast<char*>(data), static_cast<Py_ssize_t>(bytes),
                                           writable ? PyBUF_WRITE : PyBUF_READ);
  if (view == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(view);
}

int cb_post_send(void* context, int peer, const void* data, size_t bytes, void** handle) {
  return guarded(context, "post_send", [&](PyTransport& self) {
    py::object h = self.post_send(peer, memory(const_cast<void*>(data), bytes, false));
    *handle = reinterpret_cast<void*>(keep(self, std::move(h)));
  });
}

int cb_post_recv(void* context, int peer, void* data, size_t bytes, void** handle) {
  return guarded(context, "post_recv", [&](PyTransport& self) {
    py::object h = self.post_recv(peer, memory(data, bytes, true));
    *handle = reinterpret_cast<void*>(keep(self, std::move(h)));
  });
}

int cb_test(void* context, void* handle, int* done) {
  *done = 0;
  return guarded(context, "test", [&](PyTransport& self) {
    const bool finished = py::bool_(self.test(transfer(self, handle)));
    if (finished) self.transfers.erase(reinterpret_cast<uintptr_t>(handle));
    *done = finished ? 1 : 0;
  });
}

int cb_wait(void* context, void* handle, double timeout_seconds, int* done) {
  *done = 0;
  return guarded(context, "wait", [&](PyTransport& self) {
    // A method that blocks should do so without the GIL (time.sleep,
    // mpi4py's Wait do), so that the program's other threads go on.
    const bool finished = py::bool_(self.wait(transfer(self, handle), timeout_seconds));
    if (finished) self.transfers.erase(reinterpret_cast<uintptr_t>(handle));
    *done = finished ? 1 : 0;
  });
}

// Only for a transport with cancel(): after it returns, qc frees the
// transfer's memory at once.
void cb_cancel(void* context, void* handle) {
  (void)guarded(context, "cancel", [&](PyTransport& self) {
    auto it = self.transfers.find(reinterpret_cast<uintptr_t>(handle));
    if (it == self.transfers.end()) return;
    py::object h = std::move(it->second);
    self.transfers.erase(it);
    self.cancel(h);
  });
}

void cb_abort(void* context, int status, const char* reason) {
  (void)guarded(context, "abort", [&](PyTransport& self) {
    if (!self.abort.is_none()) self.abort(status, std::string(reason != nullptr ? reason : ""));
  });
}

const char* cb_error_message(void* context) {
  // qc copies the text at once, before any other callback can change it.
  return self_of(context)->error.c_str();
}

void cb_destroy(void* context) {
  py::gil_scoped_acquire gil;
  delete self_of(context);  // drops the transport and what it still holds
}

}  // namespace

std::string make_transport_callbacks(py::handle transport, int rank, int size, bool any_thread,
                                     qc_transport_callbacks_t* callbacks) {
  auto self = std::make_unique<PyTransport>();
  self->transport = py::reinterpret_borrow<py::object>(transport);
  const auto method = [&](const char* name, bool required, py::object* out) -> std::string {
    py::object m = py::getattr(transport, name, py::none());
    if (m.is_none()) {
      if (required) return std::string("the transport has no method ") + name + "()";
      *out = py::none();
      return "";
    }
    if (!PyCallable_Check(m.ptr())) return std::string("the transport's ") + name + " is not callable";
    *out = std::move(m);
    return "";
  };
  for (auto [name, required, out] :
       {std::make_tuple("post_send", true, &self->post_send),
        std::make_tuple("post_recv", true, &self->post_recv), std::make_tuple("test", true, &self->test),
        std::make_tuple("wait", false, &self->wait), std::make_tuple("cancel", false, &self->cancel),
        std::make_tuple("abort", false, &self->abort)}) {
    std::string missing = method(name, required, out);
    if (!missing.empty()) return missing;
  }
  qc_transport_callbacks_init(callbacks);
  callbacks->rank = rank;
  callbacks->size = size;
  callbacks->any_thread = any_thread ? 1 : 0;
  callbacks->post_send = cb_post_send;
  callbacks->post_recv = cb_post_recv;
  callbacks->test = cb_test;
  if (!self->wait.is_none()) callbacks->wait = cb_wait;
  // Without cancel() a transfer cannot be stopped (gloo's isend/irecv): qc
  // then keeps an abandoned one's memory, and this side its handle, until
  // destroy, rather than free memory the transport may still write.
  if (!self->cancel.is_none()) callbacks->cancel = cb_cancel;
  callbacks->abort = cb_abort;
  callbacks->error_message = cb_error_message;
  callbacks->destroy = cb_destroy;
  callbacks->context = self.release();
  return "";
}

void release_transport_callbacks(qc_transport_callbacks_t* callbacks) {
  delete self_of(callbacks->context);
  callbacks->context = nullptr;
}

}  // namespace qcpy
