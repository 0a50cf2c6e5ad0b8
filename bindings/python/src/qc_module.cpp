// qc._qc: the pybind11 extension of the Python package `qc`.
//
// A thin, 1:1 wrapper of the C ABI in qc.h. It knows nothing about numpy or
// torch: buffers arrive as addresses (int) with an element count and a
// qc_dtype_t, and the pure-Python layer (qc/__init__.py) checks dtypes,
// contiguity and sizes and keeps the arrays alive during the call.
//
// Rules kept here:
//   - every collective, encode/decode and emulation runs with the GIL
//     released, so the ranks of a local group can be driven by Python threads;
//   - qc_last_error() is thread-local: it is read in the calling thread right
//     after the failing call, before the GIL is taken back;
//   - a failing status becomes the matching qc.Error subclass (qc/_errors.py)
//     carrying .status and the message;
//   - a closed handle gives qc.InvalidArgumentError, never a crash; a handle
//     cannot be closed while another thread is inside a call on it.
//   - policies cross as tuples in qc_policy_t field order (POLICY_FIELDS in
//     qc/__init__.py), enumerations as their int values;
//   - every argument is converted here by a helper that names it (int_arg,
//     real_arg, name_arg, BytesArg, policy_arg ...), never by pybind11's
//     casters: those answer an int out of C range with "incompatible
//     function arguments" and a str passed on as char* ends at its first
//     NUL. A wrong value is qc.InvalidArgumentError (a ValueError), a wrong
//     Python type qc.ArgumentTypeError (a TypeError); docs/python.md, "Bad
//     arguments".

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#define QC_EXPERIMENTAL_API /* Comm.adapt_policies wraps qc_comm_adapt_policies */
#include "qc.h"
#include "py_transport.h"

namespace py = pybind11;

namespace {

// A failed qc call (the status and the calling thread's qc_last_error()), or
// an argument refused here; wrong_type: the argument had the wrong Python
// type (qc.ArgumentTypeError) rather than a wrong value.
struct QcFailure : std::exception {
  int status;
  std::string message;
  bool wrong_type;
  QcFailure(int s, std::string m, bool t = false) : status(s), message(std::move(m)), wrong_type(t) {}
  const char* what() const noexcept override { return message.c_str(); }
};

[[noreturn]] void fail(int status, std::string message) { throw QcFailure(status, std::move(message)); }
[[noreturn]] void fail_value(std::string message) { fail(QC_ERROR_INVALID_ARGUMENT, std::move(message)); }
[[noreturn]] void fail_type(std::string message) {
  throw QcFailure(QC_ERROR_INVALID_ARGUMENT, std::move(message), true);
}

// Runs a qc call with the GIL held (cheap, non-blocking calls).
template <class F>
void call(F&& f) {
  const qc_status_t st = f();
  if (st != QC_SUCCESS) fail(st, qc_last_error());
}

// Runs a qc call with the GIL released; the message is read in this thread
// before the GIL is reacquired.
template <class F>
void call_nogil(F&& f) {
  qc_status_t st = QC_SUCCESS;
  std::string message;
  {
    py::gil_scoped_release release;
    st = f();
    if (st != QC_SUCCESS) message = qc_last_error();
  }
  if (st != QC_SUCCESS) fail(st, std::move(message));
}

template <class T>
T* ptr(std::uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

// ---- arguments ------------------------------------------------------------------
// `what` names the argument as the Python caller wrote it ("argument 'count'",
// "argument 'layers[2]'"), so the message says which one was refused.

std::string type_name(py::handle value) { return Py_TYPE(value.ptr())->tp_name; }

// repr() of a value for a message, cut to a readable length.
std::string short_repr(py::handle value) {
  std::string text = py::repr(value).cast<std::string>();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// An int: a Python int or anything with __index__ (numpy integers), never a
// bool, a float or a str; outside [lo, hi] (the C type's range unless
// narrower) is a wrong value, never a silent wrap or truncation.
template <class T>
T int_arg(py::handle value, const std::string& what, T lo = std::numeric_limits<T>::min(),
          T hi = std::numeric_limits<T>::max()) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr()))
    fail_type(what + " must be an int, not " + type_name(value));
  PyObject* index = PyNumber_Index(value.ptr());
  if (index == nullptr) throw py::error_already_set();
  const auto number = py::reinterpret_steal<py::int_>(index);
  if (number < py::int_(lo) || number > py::int_(hi))
    fail_value(what + " is " + short_repr(number) + "; expected an int in " + std::to_string(lo) + ".." +
               std::to_string(hi));
  return number.cast<T>();
}

// A real number (float, int, numpy scalar; not a bool or a str). One beyond
// a double's range is a wrong value; NaN and infinities pass, for the
// library to judge.
double real_arg(py::handle value, const std::string& what) {
  if (PyBool_Check(value.ptr())) fail_type(what + " must be a number, not bool");
  const double number = PyFloat_AsDouble(value.ptr());
  if (number == -1.0 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
      PyErr_Clear();
      fail_value(what + " is " + short_repr(value) + ", beyond the range of a double");
    }
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      fail_type(what + " must be a number, not " + type_name(value));
    }
    throw py::error_already_set();
  }
  return number;
}

// A double narrowed to float without undefined behaviour: beyond the float
// range it becomes an infinity (which the library refuses by name).
float to_float(double number) {
  if (std::isfinite(number) && std::fabs(number) > FLT_MAX) return number > 0 ? INFINITY : -INFINITY;
  return static_cast<float>(number);
}

// A name (layer, pattern, preset): a str, as UTF-8, without NUL. C names end
// at their first NUL, so "x\0a" would silently act on "x".
std::string name_arg(py::handle value, const std::string& what) {
  if (!PyUnicode_Check(value.ptr())) fail_type(what + " must be a str, not " + type_name(value));
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(value.ptr(), &size);
  if (utf8 == nullptr) {
    PyErr_Clear();
    fail_value(what + " " + short_repr(value) + " cannot be encoded as UTF-8 (it holds a lone surrogate)");
  }
  const Py_ssize_t nul = PyUnicode_FindChar(value.ptr(), 0, 0, PyUnicode_GetLength(value.ptr()), 1);
  if (nul >= 0)
    fail_value(what + " " + short_repr(value) + " contains a NUL character at index " + std::to_string(nul) +
               "; qc names are C strings, which would end there");
  return std::string(utf8, static_cast<size_t>(size));
}

std::optional<std::string> opt_name_arg(py::handle value, const std::string& what) {
  if (value.is_none()) return std::nullopt;
  return name_arg(value, what);
}

// A list or tuple (not a str or bytes, whose items would pass for names or ints).
py::sequence sequence_arg(py::handle value, const std::string& what) {
  if (PyUnicode_Check(value.ptr()) || PyBytes_Check(value.ptr()) || PyByteArray_Check(value.ptr()) ||
      !PySequence_Check(value.ptr()))
    fail_type(what + " must be a list or tuple, not " + type_name(value));
  return py::reinterpret_borrow<py::sequence>(value);
}

std::string item(const std::string& what, size_t index) {
  // "argument 'layers'" -> "argument 'layers[2]'"
  const size_t quote = what.rfind('\'');
  if (quote == std::string::npos || quote == 0) return what + "[" + std::to_string(index) + "]";
  return what.substr(0, quote) + "[" + std::to_string(index) + "]" + what.substr(quote);
}

// A bytes-like argument (bytes, bytearray, memoryview, array.array, a numpy
// array: its raw bytes), read in place. The buffer is held, so a bytearray
// cannot be resized while the GIL is released; it must be contiguous.
class BytesArg {
 public:
  BytesArg(py::handle value, const std::string& what) {
    if (PyUnicode_Check(value.ptr()) || !PyObject_CheckBuffer(value.ptr()))
      fail_type(what + " must be bytes-like (bytes, bytearray, memoryview), not " + type_name(value));
    if (PyObject_GetBuffer(value.ptr(), &view_, PyBUF_SIMPLE) != 0) {
      py::error_already_set error;
      fail_value(what + " is not a contiguous buffer (" + std::string(error.what()) +
                 "); pass bytes(...) of it");
    }
  }
  BytesArg(const BytesArg&) = delete;
  BytesArg& operator=(const BytesArg&) = delete;
  ~BytesArg() { PyBuffer_Release(&view_); }  // with the GIL: destroyed after the call
  const void* data() const { return view_.buf; }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

std::uintptr_t address_arg(py::handle value, const std::string& what) {
  return int_arg<std::uintptr_t>(value, what);
}

std::vector<std::uintptr_t> addresses_arg(py::handle value, const std::string& what) {
  const py::sequence items = sequence_arg(value, what);
  std::vector<std::uintptr_t> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) out.push_back(address_arg(items[i], item(what, i)));
  return out;
}

// ---- policies as tuples -------------------------------------------------------

constexpr size_t kPolicyFields = 12;
constexpr const char* kPolicyFieldNames[kPolicyFields] = {
    "codec",      "bits",       "bucket_size",         "rounding", "algorithm",
    "error_feedback", "group_size", "topk_ratio", "scale_update_period", "seed",
    "min_compress_bytes", "scale"};

qc_policy_t policy_arg(py::handle value, const std::string& what) {
  if (!PyTuple_Check(value.ptr()))
    fail_type(what + " must be a policy tuple (qc.Policy._to_tuple()), not " + type_name(value));
  const auto t = py::reinterpret_borrow<py::tuple>(value);
  if (t.size() != kPolicyFields)
    fail_value(what + " has " + std::to_string(t.size()) + " fields; a policy tuple has " +
               std::to_string(kPolicyFields));
  auto field = [&](size_t i) { return what + " field '" + kPolicyFieldNames[i] + "'"; };
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = static_cast<qc_codec_t>(int_arg<int>(t[0], field(0)));
  p.bits = int_arg<int>(t[1], field(1));
  p.bucket_size = int_arg<int>(t[2], field(2));
  p.rounding = static_cast<qc_rounding_t>(int_arg<int>(t[3], field(3)));
  p.algorithm = static_cast<qc_algorithm_t>(int_arg<int>(t[4], field(4)));
  p.error_feedback = int_arg<int>(t[5], field(5));
  p.group_size = int_arg<int>(t[6], field(6));
  p.topk_ratio = to_float(real_arg(t[7], field(7)));
  p.scale_update_period = int_arg<int>(t[8], field(8));
  p.seed = int_arg<uint64_t>(t[9], field(9));
  p.min_compress_bytes = int_arg<size_t>(t[10], field(10));
  p.scale = static_cast<qc_scale_t>(int_arg<int>(t[11], field(11)));
  return p;
}

py::tuple policy_to_tuple(const qc_policy_t& p) {
  return py::make_tuple(static_cast<int>(p.codec), p.bits, p.bucket_size, static_cast<int>(p.rounding),
                        static_cast<int>(p.algorithm), p.error_feedback, p.group_size,
                        static_cast<double>(p.topk_ratio), p.scale_update_period, p.seed,
                        p.min_compress_bytes, static_cast<int>(p.scale));
}

// ---- handles -------------------------------------------------------------------

// Marks a handle in use by one thread for the duration of a call (the GIL is
// released inside). qc handles are used by one thread at a time; a second
// thread gets a clear error instead of a data race, and close() waits for no
// one: it refuses while the handle is in use.
class InUse {
 public:
  InUse(std::atomic<bool>& flag, const char* what) : flag_(&flag) {
    bool expected = false;
    if (!flag.compare_exchange_strong(expected, true))
      fail(QC_ERROR_INVALID_ARGUMENT,
           std::string(what) + " is in use by another thread (a handle is used by one thread at a time)");
  }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;
  ~InUse() {
    if (flag_) flag_->store(false);
  }

 private:
  std::atomic<bool>* flag_;
};

// A request whose qc.Request went away before it completed: the handle and
// the Python objects its buffers belong to, kept by its communicator until
// the request is done (qc.h: a freed request still runs and uses them).
struct OrphanRequest {
  qc_request_t handle;
  py::object keep;
};

// The GIL may be released in a destructor, except while the interpreter
// shuts down (threads that take it then are stopped for good).
bool may_release_gil() { return !_Py_IsFinalizing(); }

class Comm {
 public:
  explicit Comm(qc_comm_t h) : h_(h) {}
  ~Comm() {
    // Local (qc_comm_destroy): never waits for peers, but gives outstanding
    // requests up to the timeout; only orphans can be outstanding here (a
    // live qc.Request keeps its communicator alive), and their peers may be
    // Python threads that need the GIL to make progress.
    if (h_) {
      reap_orphans();
      if (!orphans_.empty() && may_release_gil()) {
        py::gil_scoped_release release;
        qc_comm_destroy(h_);
      } else {
        qc_comm_destroy(h_);
      }
      h_ = nullptr;
    }
    free_orphans();
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  qc_comm_t handle() const {
    if (!h_) fail(QC_ERROR_INVALID_ARGUMENT, "the qc.Comm is closed");
    return h_;
  }
  bool closed() const { return h_ == nullptr; }
  void close() {
    if (!h_) return;
    if (busy_.load()) fail(QC_ERROR_INVALID_ARGUMENT, "cannot close a qc.Comm while another thread uses it");
    qc_comm_t h = h_;
    h_ = nullptr;
    // Without the GIL: the destroy gives outstanding requests up to the
    // timeout, and their peers may be Python threads of this process.
    call_nogil([&] { return qc_comm_destroy(h); });
    free_orphans();  // the destroy has ended every request
  }
  std::atomic<bool>& busy() { return busy_; }

  // Takes over a request that is still running when its qc.Request goes;
  // with the GIL held.
  void adopt(qc_request_t request, py::object keep) {
    orphans_.push_back(OrphanRequest{request, std::move(keep)});
  }
  // Frees the orphans that have completed (their buffers are free again);
  // with the GIL held. Never blocks.
  void reap_orphans() {
    std::vector<OrphanRequest> running;
    for (OrphanRequest& orphan : orphans_) {
      int done = 0;
      (void)qc_request_test(orphan.handle, &done);
      if (done) {
        qc_request_free(orphan.handle);
      } else {
        running.push_back(std::move(orphan));
      }
    }
    orphans_.swap(running);
  }

 private:
  // After qc_comm_destroy every request has completed.
  void free_orphans() {
    for (OrphanRequest& orphan : orphans_) qc_request_free(orphan.handle);
    orphans_.clear();
  }

  qc_comm_t h_;
  std::atomic<bool> busy_{false};
  std::vector<OrphanRequest> orphans_;
};

class ErrorBuffer {
 public:
  ErrorBuffer(Comm* comm, size_t count) : count_(count) {
    qc_comm_t c = comm ? comm->handle() : nullptr;
    call([&] { return qc_error_buffer_create(c, count, &h_); });
  }
  ~ErrorBuffer() {
    if (h_) qc_error_buffer_destroy(h_);
  }
  ErrorBuffer(const ErrorBuffer&) = delete;
  ErrorBuffer& operator=(const ErrorBuffer&) = delete;

  qc_error_buffer_t handle() const {
    if (!h_) fail(QC_ERROR_INVALID_ARGUMENT, "the qc.ErrorBuffer is closed");
    return h_;
  }
  bool closed() const { return h_ == nullptr; }
  size_t count() const { return count_; }
  void close() {
    if (!h_) return;
    if (busy_.load())
      fail(QC_ERROR_INVALID_ARGUMENT, "cannot close a qc.ErrorBuffer while another thread uses it");
    // Refused while a request (qc.Request) still uses it ("in use"): the
    // buffer then stays open.
    call([&] { return qc_error_buffer_destroy(h_); });
    h_ = nullptr;
  }
  std::atomic<bool>& busy() { return busy_; }

 private:
  qc_error_buffer_t h_ = nullptr;
  size_t count_;
  std::atomic<bool> busy_{false};
};

qc_comm_config_t comm_config(double timeout) {
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  cfg.timeout_seconds = timeout;
  return cfg;
}

std::vector<std::unique_ptr<Comm>> create_local(py::handle n, py::handle timeout) {
  const int nranks = int_arg<int>(n, "argument 'n'", 1);
  qc_comm_config_t cfg = comm_config(real_arg(timeout, "argument 'timeout'"));
  // Not initialised, so not touched before the library has checked nranks
  // (a huge n would otherwise fill gigabytes just to be refused).
  std::unique_ptr<qc_comm_t[]> handles(new (std::nothrow) qc_comm_t[static_cast<size_t>(nranks)]);
  if (!handles) fail(QC_ERROR_OUT_OF_MEMORY, "argument 'n' is " + std::to_string(nranks) + ": no memory for the handles");
  call([&] { return qc_comm_create_local_with_config(nranks, &cfg, handles.get()); });
  std::vector<std::unique_ptr<Comm>> comms;
  comms.reserve(static_cast<size_t>(nranks));
  for (int i = 0; i < nranks; ++i) comms.push_back(std::make_unique<Comm>(handles[i]));
  return comms;
}

std::unique_ptr<Comm> create_mpi(py::handle fortran_handle, py::handle timeout) {
  qc_comm_config_t cfg = comm_config(real_arg(timeout, "argument 'timeout'"));
  cfg.transport = QC_TRANSPORT_MPI;
  cfg.mpi_comm = int_arg<int64_t>(fortran_handle, "argument 'fortran_handle'");
  qc_comm_t h = nullptr;
  // Collective over the MPI communicator: waits for the other processes.
  call_nogil([&] { return qc_comm_create(&cfg, &h); });
  return std::make_unique<Comm>(h);
}

std::unique_ptr<Comm> create_callbacks(py::handle transport, py::handle rank, py::handle size,
                                       py::handle any_thread, py::handle timeout) {
  qc_comm_config_t cfg = comm_config(real_arg(timeout, "argument 'timeout'"));
  cfg.transport = QC_TRANSPORT_CALLBACKS;
  const int r = int_arg<int>(rank, "argument 'rank'");
  const int n = int_arg<int>(size, "argument 'size'");
  if (!PyBool_Check(any_thread.ptr())) fail_type("argument 'any_thread' must be a bool, not " + type_name(any_thread));
  qc_transport_callbacks_t callbacks;
  const std::string missing =
      qcpy::make_transport_callbacks(transport, r, n, any_thread.cast<bool>(), &callbacks);
  if (!missing.empty()) fail_type("argument 'transport': " + missing);
  qc_comm_t h = nullptr;
  // Local: nothing is sent. On failure the table was not taken over.
  const qc_status_t st = qc_comm_create_callbacks(&callbacks, &cfg, &h);
  if (st != QC_SUCCESS) {
    std::string message = qc_last_error();
    qcpy::release_transport_callbacks(&callbacks);
    fail(st, std::move(message));
  }
  return std::make_unique<Comm>(h);
}

const char* opt_cstr(const std::optional<std::string>& s) { return s ? s->c_str() : nullptr; }

// A qc._qc.Comm or qc._qc.ErrorBuffer argument (None allowed where said).
template <class T>
T* handle_arg(py::handle value, const std::string& what, const char* class_name, bool none_ok) {
  if (none_ok && value.is_none()) return nullptr;
  if (!py::isinstance<T>(value))
    fail_type(what + " must be a " + class_name + (none_ok ? " or None" : "") + ", not " + type_name(value));
  return value.cast<T*>();
}

// Holds an error buffer, if any, for the duration of a call.
struct ErrorBufferUse {
  std::optional<InUse> use;
  qc_error_buffer_t handle = nullptr;
  explicit ErrorBufferUse(ErrorBuffer* eb) {
    if (eb) {
      use.emplace(eb->busy(), "the qc.ErrorBuffer");
      handle = eb->handle();
    }
  }
};

// A started non-blocking collective (qc_request_t), with the Python objects
// its buffers belong to (`keep`) and its communicator, both held until the
// request has completed. The handle is freed once a wait or test has seen
// it complete and no other thread is waiting on it; the status and message
// stay, so a later wait() or test() raises the same error again. A
// qc.Request dropped while its request still runs hands the handle and
// `keep` to its communicator (Comm::adopt), which frees them once done.
class Request {
 public:
  Request(qc_request_t h, py::object keep, py::object comm)
      : h_(h), keep_(std::move(keep)), comm_(std::move(comm)) {}
  ~Request() { release(); }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // Blocks (without the GIL) until the request completes; raises its error.
  void wait() {
    qc_request_t h = handle();
    if (!done_) {
      qc_status_t st = QC_SUCCESS;
      std::string message;
      ++waiters_;
      {
        py::gil_scoped_release release;
        st = qc_request_wait(h);
        if (st != QC_SUCCESS) message = qc_last_error();
      }
      --waiters_;
      complete(st, std::move(message));
    }
    raise_failure();
  }

  // Whether the request has completed (never blocks); raises its error once
  // it has, when `raise` is set.
  bool test(bool raise) {
    qc_request_t h = handle();
    if (!done_) {
      int done = 0;
      const qc_status_t st = qc_request_test(h, &done);
      if (!done) {
        if (st != QC_SUCCESS) fail(st, qc_last_error());  // a bad handle, not the collective
        return false;
      }
      complete(st, st == QC_SUCCESS ? std::string() : std::string(qc_last_error()));
    }
    if (raise) raise_failure();
    return true;
  }

  bool closed() const { return closed_; }

  void close() {
    if (closed_) return;
    if (waiters_ > 0)
      fail(QC_ERROR_INVALID_ARGUMENT, "cannot close a qc.Request while another thread waits on it");
    release();
  }

 private:
  qc_request_t handle() const {
    if (closed_) fail(QC_ERROR_INVALID_ARGUMENT, "the qc.Request is closed");
    return h_;
  }

  // With the GIL held.
  void complete(qc_status_t status, std::string message) {
    if (!done_) {
      done_ = true;
      status_ = status;
      message_ = std::move(message);
    }
    if (waiters_ == 0 && h_) {
      qc_request_free(h_);
      h_ = nullptr;
      keep_ = py::object();  // the buffers are the caller's again
    }
  }

  void raise_failure() const {
    if (status_ != QC_SUCCESS) fail(status_, message_);
  }

  // Frees the handle, or hands a running request to its communicator.
  void release() {
    closed_ = true;
    if (!h_) return;
    int done = 0;
    (void)qc_request_test(h_, &done);
    if (done) {
      qc_request_free(h_);
    } else {
      comm_.cast<Comm&>().adopt(h_, std::move(keep_));
    }
    h_ = nullptr;
    keep_ = py::object();
  }

  qc_request_t h_;
  py::object keep_;
  py::object comm_;
  bool done_ = false;
  bool closed_ = false;
  qc_status_t status_ = QC_SUCCESS;
  std::string message_;
  int waiters_ = 0;  // threads inside wait(); changed with the GIL held
};

// A sparse allreduce's result (qc_sparse_result_t): the union of the ranks'
// row indices with their summed rows, copied out by the Python layer into
// arrays of the caller's kind. Destroyed on close() or with the object; a
// non-blocking call's result may be destroyed before its request completes
// (qc.h: the request then finishes without it).
class SparseResult {
 public:
  SparseResult() = default;
  ~SparseResult() {
    if (h_) qc_sparse_result_destroy(h_);
  }
  SparseResult(const SparseResult&) = delete;
  SparseResult& operator=(const SparseResult&) = delete;

  qc_sparse_result_t* slot() { return &h_; }  // filled by the qc call that makes it
  qc_sparse_result_t handle() const {
    if (!h_) fail(QC_ERROR_INVALID_ARGUMENT, "the qc sparse result is closed");
    return h_;
  }
  bool closed() const { return h_ == nullptr; }
  void close() {
    if (!h_) return;
    call([&] { return qc_sparse_result_destroy(h_); });
    h_ = nullptr;
  }

 private:
  qc_sparse_result_t h_ = nullptr;
};

// The arguments of a sparse call on a communicator, converted in their
// order: one rank's rows (nnz int64 indices and nnz x row_len values, by
// address), their dtype, the op and the layer.
struct SparseCallArgs {
  std::uintptr_t indices;
  std::uintptr_t values;
  size_t nnz;
  size_t row_len;
  qc_dtype_t dtype;
  qc_reduce_op_t op;
  std::optional<std::string> layer;
  SparseCallArgs(py::handle indices_arg, py::handle values_arg, py::handle nnz_arg, py::handle row_len_arg,
                 py::handle dtype_arg, py::handle op_arg, py::handle layer_arg)
      : indices(address_arg(indices_arg, "argument 'indices'")),
        values(address_arg(values_arg, "argument 'values'")),
        nnz(int_arg<size_t>(nnz_arg, "argument 'nnz'")),
        row_len(int_arg<size_t>(row_len_arg, "argument 'row_len'")),
        dtype(static_cast<qc_dtype_t>(int_arg<int>(dtype_arg, "argument 'dtype'"))),
        op(static_cast<qc_reduce_op_t>(int_arg<int>(op_arg, "argument 'op'"))),
        layer(opt_name_arg(layer_arg, "argument 'layer'")) {}
  const int64_t* index_data() const { return ptr<const int64_t>(indices); }
  const void* value_data() const { return ptr<const void>(values); }
  const char* layer_name() const { return layer ? layer->c_str() : nullptr; }
};

// The table of a dense sparse call: nrows rows, by address.
struct DenseTableArg {
  size_t nrows;
  std::uintptr_t address;
  DenseTableArg(py::handle nrows_arg, py::handle dense_arg)
      : nrows(int_arg<size_t>(nrows_arg, "argument 'nrows'")), address(address_arg(dense_arg, "argument 'dense'")) {}
  void* data() const { return ptr<void>(address); }
};

[[noreturn]] void refuse_pickle(py::handle self) {
  fail_type(std::string("a ") + type_name(self) +
            " cannot be pickled or copied: it is a live library handle (one rank of a group, or "
            "its residuals); create one in each process (ErrorBuffer residuals travel as save() bytes)");
}

py::dict stats_dict(const qc_stats_t& s) {
  py::dict d;
  d["calls"] = s.calls;
  d["logical_bytes"] = s.logical_bytes;
  d["wire_bytes"] = s.wire_bytes;
  d["codec_seconds"] = s.codec_seconds;
  d["transport_seconds"] = s.transport_seconds;
  d["codec_seconds_in_flight"] = s.codec_seconds_in_flight;
  return d;
}

py::dict layer_stats_dict(const qc_layer_stats_t& s) {
  py::dict d;
  d["calls"] = s.calls;
  d["count"] = s.count;
  d["logical_bytes"] = s.logical_bytes;
  d["wire_bytes"] = s.wire_bytes;
  d["codec_seconds"] = s.codec_seconds;
  d["transport_seconds"] = s.transport_seconds;
  d["last_rel_error"] = s.last_rel_error;
  d["mean_sq_norm"] = s.mean_sq_norm;
  return d;
}

void raise_qc_error(const QcFailure& e) {
  // qc/_errors.py owns the exception classes (pure Python). Should it be
  // missing (the extension imported outside its package), a RuntimeError
  // still carries the status and the message.
  try {
    py::object errors = py::module_::import("qc._errors");
    py::object cls = e.wrong_type ? errors.attr("ArgumentTypeError") : errors.attr("error_class")(e.status);
    py::object exc = cls(e.status, e.message);
    PyErr_SetObject(cls.ptr(), exc.ptr());
  } catch (py::error_already_set&) {
    const std::string text = std::string(qc_status_string(static_cast<qc_status_t>(e.status))) + ": " + e.message;
    PyErr_SetString(PyExc_RuntimeError, text.c_str());
  }
}

// The buffers of an emulation (qc_emulate_*): one send and one receive
// address per virtual rank, as the C arrays the call takes.
struct EmulatedBuffers {
  std::vector<const void*> sends;
  std::vector<void*> recvs;
  EmulatedBuffers(int nranks, py::handle send_list, py::handle recv_list) {
    const std::vector<std::uintptr_t> from = addresses_arg(send_list, "argument 'sends'");
    const std::vector<std::uintptr_t> to = addresses_arg(recv_list, "argument 'recvs'");
    if (nranks < 1 || from.size() != static_cast<size_t>(nranks) || to.size() != static_cast<size_t>(nranks))
      fail_value("argument 'nranks' is " + std::to_string(nranks) + "; expected >= 1 and one send and one receive "
                 "buffer per rank");
    for (std::uintptr_t a : from) sends.push_back(ptr<const void>(a));
    for (std::uintptr_t a : to) recvs.push_back(ptr<void>(a));
  }
};

// The error buffers of an emulation: None, or one qc.ErrorBuffer (or None)
// per rank, each held for the duration of the call.
class EmulatedErrorBuffers {
 public:
  EmulatedErrorBuffers(int nranks, py::handle error_buffers) : given_(!error_buffers.is_none()) {
    if (!given_) return;
    const py::sequence items = sequence_arg(error_buffers, "argument 'error_buffers'");
    if (items.size() != static_cast<size_t>(nranks))
      fail_value("argument 'error_buffers' must have one entry (or None) per rank");
    for (size_t i = 0; i < items.size(); ++i) {
      ErrorBuffer* b = handle_arg<ErrorBuffer>(items[i], item("argument 'error_buffers'", i), "qc.ErrorBuffer", true);
      uses_.push_back(std::make_unique<ErrorBufferUse>(b));
      handles_.push_back(uses_.back()->handle);
    }
  }
  // NULL when none were given (qc_emulate_*'s error_buffers argument).
  qc_error_buffer_t* handles() { return given_ ? handles_.data() : nullptr; }

 private:
  bool given_;
  std::vector<std::unique_ptr<ErrorBufferUse>> uses_;
  std::vector<qc_error_buffer_t> handles_;
};

// Every virtual rank's rows for qc_emulate_sparse_allreduce*: one index
// address, one value address and one row count per rank.
struct EmulatedSparseRows {
  std::vector<const int64_t*> indices;
  std::vector<const void*> values;
  std::vector<size_t> nnz;
  EmulatedSparseRows(int nranks, py::handle index_list, py::handle value_list, py::handle nnz_list) {
    for (std::uintptr_t a : addresses_arg(index_list, "argument 'indices'")) indices.push_back(ptr<const int64_t>(a));
    for (std::uintptr_t a : addresses_arg(value_list, "argument 'values'")) values.push_back(ptr<const void>(a));
    const py::sequence counts = sequence_arg(nnz_list, "argument 'nnz'");
    for (size_t i = 0; i < counts.size(); ++i) nnz.push_back(int_arg<size_t>(counts[i], item("argument 'nnz'", i)));
    const size_t n = static_cast<size_t>(nranks);
    if (nranks < 1 || indices.size() != n || values.size() != n || nnz.size() != n)
      fail_value("argument 'nranks' is " + std::to_string(nranks) + "; expected >= 1 and one index address, "
                 "value address and row count per rank");
  }
};

}  // namespace

PYBIND11_MODULE(_qc, m) {
  m.doc() =
      "Low-level binding of the qc C ABI (qc.h). Use the package `qc` instead: it checks arrays, "
      "dtypes and policies and gives the Pythonic API. Buffers here are raw addresses.";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const QcFailure& e) {
      raise_qc_error(e);
    }
  });

  // ---- constants ----
  m.attr("HEADER_VERSION_NUMBER") = QC_VERSION_NUMBER;
  m.attr("PACKAGE_VERSION") = QC_PY_VERSION_INFO;
  py::dict statuses;
#define QC_PY_STATUS_ENTRY_(name, value, text) statuses[py::str("QC_" #name)] = value;
  QC_STATUS_MAP(QC_PY_STATUS_ENTRY_)
#undef QC_PY_STATUS_ENTRY_
  m.attr("STATUSES") = statuses;
  py::dict descriptions;
#define QC_PY_STATUS_TEXT_(name, value, text) descriptions[py::int_(value)] = text;
  QC_STATUS_MAP(QC_PY_STATUS_TEXT_)
#undef QC_PY_STATUS_TEXT_
  m.attr("STATUS_DESCRIPTIONS") = descriptions;
  m.attr("POLICY_FIELD_COUNT") = kPolicyFields;


  // ---- names of enum values: the library's tables (qc_codec_name, ...) ----
  struct EnumNames {
    const char* kind;
    const char* (*name_of)(int);
    qc_status_t (*from_name)(const char*, int*);
  };
#define QC_PY_ENUM_(kind, type)                                                        \
  EnumNames{#kind, [](int v) { return qc_##kind##_name(static_cast<type>(v)); },       \
            [](const char* n, int* v) {                                                \
              type t{};                                                                \
              const qc_status_t s = qc_##kind##_from_name(n, &t);                      \
              *v = static_cast<int>(t);                                                \
              return s;                                                                \
            }}
  static const EnumNames kEnums[] = {
      QC_PY_ENUM_(codec, qc_codec_t),         QC_PY_ENUM_(algorithm, qc_algorithm_t),
      QC_PY_ENUM_(dtype, qc_dtype_t),         QC_PY_ENUM_(reduce_op, qc_reduce_op_t),
      QC_PY_ENUM_(rounding, qc_rounding_t),   QC_PY_ENUM_(transport, qc_transport_t),
      QC_PY_ENUM_(adapt_method, qc_adapt_method_t), QC_PY_ENUM_(scale, qc_scale_t),
  };
#undef QC_PY_ENUM_
  py::dict enum_names;  // kind -> {canonical name: value}; values run 0, 1, ...
  for (const EnumNames& e : kEnums) {
    py::dict d;
    for (int v = 0; e.name_of(v) != nullptr; ++v) d[py::str(e.name_of(v))] = v;
    enum_names[py::str(e.kind)] = d;
  }
  m.attr("ENUM_NAMES") = enum_names;
  m.def("from_name", [](const std::string& kind, py::handle name) {
    for (const EnumNames& e : kEnums) {
      if (kind != e.kind) continue;
      const std::string text = name_arg(name, "argument 'name'");
      int v = 0;
      call([&] { return e.from_name(text.c_str(), &v); });
      return v;
    }
    throw py::value_error("no enum kind '" + kind + "'");
  }, py::arg("kind"), py::arg("name"),
     "qc_<kind>_from_name(): the value of a name or alias (spelled exactly); raises "
     "qc.InvalidArgumentError for a name the library does not know.");

  m.def("version_number", &qc_version_number, "qc_version_number(): version of the running libqc.");
  m.def("version_string", [] { return std::string(qc_version_string()); },
        "qc_version_string(): 'M.m.p' of the running libqc.");
  m.def("status_string", [](py::handle status) {
    const int s = int_arg<int>(status, "argument 'status'");
    return std::string(qc_status_string(static_cast<qc_status_t>(s)));
  }, py::arg("status"), "qc_status_string(): the name of a status, e.g. 'QC_ERROR_TIMEOUT'.");
  m.def("last_error", [] { return std::string(qc_last_error()); },
        "qc_last_error() of the calling thread.");

  // ---- policies ----
  m.def("policy_defaults", [] {
    qc_policy_t p;
    p.struct_size = sizeof(qc_policy_t);
    call([&] { return qc_policy_init(&p); });
    return policy_to_tuple(p);
  }, "qc_policy_init() as a tuple in qc_policy_t field order.");
  m.def("policy_check", [](py::handle policy) {
    const qc_policy_t p = policy_arg(policy, "argument 'policy'");
    size_t bytes = 0;
    call([&] { return qc_codec_encoded_size(&p, 0, &bytes); });
  }, py::arg("policy"), "Validate a policy tuple with the library's rules; raises qc.Error.");
  m.def("encoded_size", [](py::handle policy, py::handle count) {
    const qc_policy_t p = policy_arg(policy, "argument 'policy'");
    const size_t n = int_arg<size_t>(count, "argument 'count'");
    size_t bytes = 0;
    call([&] { return qc_codec_encoded_size(&p, n, &bytes); });
    return bytes;
  }, py::arg("policy"), py::arg("count"));
  m.def("encode", [](py::handle policy, py::handle src, py::handle count, py::handle dtype) {
    const qc_policy_t p = policy_arg(policy, "argument 'policy'");
    const std::uintptr_t from = address_arg(src, "argument 'src'");
    const size_t n = int_arg<size_t>(count, "argument 'count'");
    const int type = int_arg<int>(dtype, "argument 'dtype'");
    size_t bound = 0;
    call([&] { return qc_codec_encoded_size(&p, n, &bound); });
    std::string out(bound, '\0');
    size_t written = 0;
    call_nogil([&] {
      return qc_codec_encode(&p, ptr<const void>(from), n, static_cast<qc_dtype_t>(type), out.data(), out.size(),
                       &written);
    });
    return py::bytes(out.data(), written);
  }, py::arg("policy"), py::arg("src"), py::arg("count"), py::arg("dtype"));
  m.def("decode", [](py::handle data, py::handle dst, py::handle count, py::handle dtype) {
    const BytesArg message(data, "argument 'data'");
    const std::uintptr_t to = address_arg(dst, "argument 'dst'");
    const size_t n = int_arg<size_t>(count, "argument 'count'");
    const int type = int_arg<int>(dtype, "argument 'dtype'");
    call_nogil([&] {
      return qc_codec_decode(message.data(), message.size(), ptr<void>(to), n, static_cast<qc_dtype_t>(type));
    });
  }, py::arg("data"), py::arg("dst"), py::arg("count"), py::arg("dtype"));

  // ---- error buffers ----
  py::class_<ErrorBuffer>(m, "ErrorBuffer", "qc_error_buffer_t")
      .def(py::init([](py::handle comm, py::handle count) {
             Comm* c = handle_arg<Comm>(comm, "argument 'comm'", "qc.Comm", true);
             return std::make_unique<ErrorBuffer>(c, int_arg<size_t>(count, "argument 'count'"));
           }),
           py::arg("comm").none(true), py::arg("count"))
      .def_property_readonly("count", &ErrorBuffer::count)
      .def_property_readonly("closed", &ErrorBuffer::closed)
      .def("close", &ErrorBuffer::close)
      .def("__reduce__", [](py::handle self) { refuse_pickle(self); })
      .def("reset", [](ErrorBuffer& b) {
        InUse use(b.busy(), "the qc.ErrorBuffer");
        qc_error_buffer_t h = b.handle();
        call([&] { return qc_error_buffer_reset(h); });
      })
      .def("norm", [](ErrorBuffer& b) {
        InUse use(b.busy(), "the qc.ErrorBuffer");
        qc_error_buffer_t h = b.handle();
        double n = 0.0;
        call_nogil([&] { return qc_error_buffer_norm(h, &n); });
        return n;
      })
      .def("save", [](ErrorBuffer& b) {
        InUse use(b.busy(), "the qc.ErrorBuffer");
        qc_error_buffer_t h = b.handle();
        size_t size = 0;
        call([&] { return qc_error_buffer_save(h, nullptr, 0, &size); });
        std::string out(size, '\0');
        call_nogil([&] { return qc_error_buffer_save(h, out.data(), out.size(), &size); });
        return py::bytes(out.data(), size);
      })
      .def("load", [](ErrorBuffer& b, py::handle data) {
        const BytesArg image(data, "argument 'data'");
        InUse use(b.busy(), "the qc.ErrorBuffer");
        qc_error_buffer_t h = b.handle();
        call_nogil([&] { return qc_error_buffer_load(h, image.data(), image.size()); });
      }, py::arg("data"));

  // ---- requests ----
  py::class_<Request>(m, "Request", "qc_request_t")
      .def("wait", &Request::wait)
      .def("test", [](Request& r) { return r.test(true); })
      .def_property_readonly("done", [](Request& r) { return r.test(false); })
      .def_property_readonly("closed", &Request::closed)
      .def("close", &Request::close)
      .def("__reduce__", [](py::handle self) { refuse_pickle(self); });

  // ---- sparse allreduce results ----
  py::class_<SparseResult>(m, "SparseResult", "qc_sparse_result_t")
      .def_property_readonly("closed", &SparseResult::closed)
      .def("close", &SparseResult::close)
      .def("__reduce__", [](py::handle self) { refuse_pickle(self); })
      .def("nnz",
           [](SparseResult& r) {
             size_t n = 0;
             qc_sparse_result_t h = r.handle();
             call([&] { return qc_sparse_result_nnz(h, &n); });
             return n;
           })
      .def("copy",
           [](SparseResult& r, py::handle indices, py::handle values, py::handle capacity) {
             const std::uintptr_t to_indices = address_arg(indices, "argument 'indices'");
             const std::uintptr_t to_values = address_arg(values, "argument 'values'");
             const size_t rows = int_arg<size_t>(capacity, "argument 'capacity'");
             qc_sparse_result_t h = r.handle();
             call_nogil([&] { return qc_sparse_result_copy(h, ptr<int64_t>(to_indices), ptr<void>(to_values), rows); });
           },
           py::arg("indices"), py::arg("values"), py::arg("capacity"));

  // ---- communicators ----
  py::class_<Comm>(m, "Comm", "qc_comm_t")
      .def_static("create_local", &create_local, py::arg("n"), py::arg("timeout"))
      .def_static("create_mpi", &create_mpi, py::arg("fortran_handle"), py::arg("timeout"))
      .def_static("create_callbacks", &create_callbacks, py::arg("transport"), py::arg("rank"),
                  py::arg("size"), py::arg("any_thread"), py::arg("timeout"))
      .def_property_readonly("closed", &Comm::closed)
      .def("close", &Comm::close)
      .def("__reduce__", [](py::handle self) { refuse_pickle(self); })
      .def_property_readonly("rank", [](Comm& c) {
        int r = 0;
        qc_comm_t h = c.handle();
        call([&] { return qc_comm_rank(h, &r); });
        return r;
      })
      .def_property_readonly("size", [](Comm& c) {
        int s = 0;
        qc_comm_t h = c.handle();
        call([&] { return qc_comm_size(h, &s); });
        return s;
      })
      // Not guarded by InUse: a watchdog thread may poll while another is
      // blocked in a collective (qc.h). Holds the GIL, so close() cannot run
      // at the same time; the C call never blocks.
      .def("async_error", [](Comm& c) {
        qc_status_t e = QC_SUCCESS;
        qc_comm_t h = c.handle();
        call([&] { return qc_comm_get_async_error(h, &e); });
        return std::make_pair(static_cast<int>(e),
                              std::string(e == QC_SUCCESS ? "" : qc_last_error()));
      })
      .def("allreduce",
           [](Comm& c, py::handle send, py::handle recv, py::handle count, py::handle dtype, py::handle op,
              py::handle layer, py::handle error_buffer, py::handle stream) {
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const size_t n = int_arg<size_t>(count, "argument 'count'");
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const int reduce = int_arg<int>(op, "argument 'op'");
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             ErrorBuffer* eb = handle_arg<ErrorBuffer>(error_buffer, "argument 'error_buffer'",
                                                       "qc.ErrorBuffer", true);
             const std::uintptr_t queue = address_arg(stream, "argument 'stream'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             const ErrorBufferUse residuals(eb);
             call_nogil([&] {
               return qc_allreduce(h, ptr<const void>(from), ptr<void>(to), n, static_cast<qc_dtype_t>(type),
                                   static_cast<qc_reduce_op_t>(reduce), opt_cstr(name), residuals.handle,
                                   ptr<void>(queue));
             });
           },
           py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op"),
           py::arg("layer").none(true), py::arg("error_buffer").none(true), py::arg("stream") = 0)
      .def("allreduce_segments",
           [](Comm& c, py::handle send, py::handle recv, py::handle counts, py::handle layers, py::handle dtype,
              py::handle op, py::handle error_buffer, py::handle stream) {
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const py::sequence count_items = sequence_arg(counts, "argument 'counts'");
             const py::sequence layer_items = sequence_arg(layers, "argument 'layers'");
             if (layer_items.size() != count_items.size())
               fail_value("argument 'layers' has " + std::to_string(layer_items.size()) + " entries but 'counts' " +
                          std::to_string(count_items.size()) + "; one per segment");
             std::vector<size_t> sizes;
             std::vector<std::optional<std::string>> names;
             for (size_t i = 0; i < count_items.size(); ++i) {
               sizes.push_back(int_arg<size_t>(count_items[i], item("argument 'counts'", i)));
               names.push_back(opt_name_arg(layer_items[i], item("argument 'layers'", i)));
             }
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const int reduce = int_arg<int>(op, "argument 'op'");
             ErrorBuffer* eb = handle_arg<ErrorBuffer>(error_buffer, "argument 'error_buffer'",
                                                       "qc.ErrorBuffer", true);
             const std::uintptr_t queue = address_arg(stream, "argument 'stream'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             const ErrorBufferUse residuals(eb);
             std::vector<const char*> cnames;
             cnames.reserve(names.size());
             for (const auto& name : names) cnames.push_back(opt_cstr(name));
             call_nogil([&] {
               return qc_allreduce_segments(h, ptr<const void>(from), ptr<void>(to), sizes.size(), sizes.data(),
                                            cnames.data(), static_cast<qc_dtype_t>(type),
                                            static_cast<qc_reduce_op_t>(reduce), residuals.handle,
                                            ptr<void>(queue));
             });
           },
           py::arg("send"), py::arg("recv"), py::arg("counts"), py::arg("layers"), py::arg("dtype"),
           py::arg("op"), py::arg("error_buffer").none(true), py::arg("stream") = 0)
      .def("alltoall",
           [](Comm& c, py::handle send, py::handle recv, py::handle count_per_rank, py::handle dtype,
              py::handle layer, py::handle stream) {
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const size_t n = int_arg<size_t>(count_per_rank, "argument 'count_per_rank'");
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             const std::uintptr_t queue = address_arg(stream, "argument 'stream'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             call_nogil([&] {
               return qc_alltoall(h, ptr<const void>(from), ptr<void>(to), n, static_cast<qc_dtype_t>(type),
                                  opt_cstr(name), ptr<void>(queue));
             });
           },
           py::arg("send"), py::arg("recv"), py::arg("count_per_rank"), py::arg("dtype"),
           py::arg("layer").none(true), py::arg("stream") = 0)
      .def("reduce_scatter",
           [](Comm& c, py::handle send, py::handle recv, py::handle recvcount, py::handle dtype, py::handle op,
              py::handle layer, py::handle error_buffer, py::handle stream) {
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const size_t n = int_arg<size_t>(recvcount, "argument 'recvcount'");
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const int reduce = int_arg<int>(op, "argument 'op'");
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             ErrorBuffer* eb = handle_arg<ErrorBuffer>(error_buffer, "argument 'error_buffer'",
                                                       "qc.ErrorBuffer", true);
             const std::uintptr_t queue = address_arg(stream, "argument 'stream'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             const ErrorBufferUse residuals(eb);
             call_nogil([&] {
               return qc_reduce_scatter(h, ptr<const void>(from), ptr<void>(to), n, static_cast<qc_dtype_t>(type),
                                        static_cast<qc_reduce_op_t>(reduce), opt_cstr(name), residuals.handle,
                                        ptr<void>(queue));
             });
           },
           py::arg("send"), py::arg("recv"), py::arg("recvcount"), py::arg("dtype"), py::arg("op"),
           py::arg("layer").none(true), py::arg("error_buffer").none(true), py::arg("stream") = 0)
      .def("allgather",
           [](Comm& c, py::handle send, py::handle recv, py::handle sendcount, py::handle dtype, py::handle layer,
              py::handle error_buffer, py::handle stream) {
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const size_t n = int_arg<size_t>(sendcount, "argument 'sendcount'");
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             ErrorBuffer* eb = handle_arg<ErrorBuffer>(error_buffer, "argument 'error_buffer'",
                                                       "qc.ErrorBuffer", true);
             const std::uintptr_t queue = address_arg(stream, "argument 'stream'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             const ErrorBufferUse residuals(eb);
             call_nogil([&] {
               return qc_allgather(h, ptr<const void>(from), ptr<void>(to), n, static_cast<qc_dtype_t>(type),
                                   opt_cstr(name), residuals.handle, ptr<void>(queue));
             });
           },
           py::arg("send"), py::arg("recv"), py::arg("sendcount"), py::arg("dtype"), py::arg("layer").none(true),
           py::arg("error_buffer").none(true), py::arg("stream") = 0)
      // send: read on the root only; other ranks may pass 0 (qc.h).
      .def("broadcast",
           [](Comm& c, py::handle send, py::handle recv, py::handle count, py::handle dtype, py::handle root,
              py::handle layer, py::handle stream) {
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const size_t n = int_arg<size_t>(count, "argument 'count'");
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const int source = int_arg<int>(root, "argument 'root'");
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             const std::uintptr_t queue = address_arg(stream, "argument 'stream'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             call_nogil([&] {
               return qc_broadcast(h, ptr<const void>(from), ptr<void>(to), n, static_cast<qc_dtype_t>(type), source,
                                   opt_cstr(name), ptr<void>(queue));
             });
           },
           py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("root"),
           py::arg("layer").none(true), py::arg("stream") = 0)
      // Sparse allreduce (qc.h section 5): host memory only.
      .def("sparse_allreduce",
           [](Comm& c, py::handle indices, py::handle values, py::handle nnz, py::handle row_len, py::handle dtype,
              py::handle op, py::handle layer) {
             const SparseCallArgs a(indices, values, nnz, row_len, dtype, op, layer);
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             auto result = std::make_unique<SparseResult>();
             call_nogil([&] {
               return qc_sparse_allreduce(h, a.index_data(), a.value_data(), a.nnz, a.row_len, a.dtype, a.op,
                                          a.layer_name(), result->slot());
             });
             return result;
           },
           py::arg("indices"), py::arg("values"), py::arg("nnz"), py::arg("row_len"), py::arg("dtype"), py::arg("op"),
           py::arg("layer").none(true))
      .def("sparse_allreduce_dense",
           [](Comm& c, py::handle indices, py::handle values, py::handle nnz, py::handle row_len, py::handle nrows,
              py::handle dense, py::handle dtype, py::handle op, py::handle layer) {
             const SparseCallArgs a(indices, values, nnz, row_len, dtype, op, layer);
             const DenseTableArg table(nrows, dense);
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             call_nogil([&] {
               return qc_sparse_allreduce_dense(h, a.index_data(), a.value_data(), a.nnz, a.row_len, table.nrows,
                                                table.data(), a.dtype, a.op, a.layer_name());
             });
           },
           py::arg("indices"), py::arg("values"), py::arg("nnz"), py::arg("row_len"), py::arg("nrows"),
           py::arg("dense"), py::arg("dtype"), py::arg("op"), py::arg("layer").none(true))
      // Non-blocking forms (qc.h section 6): host buffers only. `keep` is
      // whatever the buffers belong to (the arrays); the request holds it,
      // its error buffer and its communicator until it completes. Started
      // without the GIL: with no progress thread the start runs the call.
      .def("iallreduce",
           [](py::object self, py::handle send, py::handle recv, py::handle count, py::handle dtype, py::handle op,
              py::handle layer, py::handle error_buffer, py::object keep) {
             Comm& c = self.cast<Comm&>();
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const size_t n = int_arg<size_t>(count, "argument 'count'");
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const int reduce = int_arg<int>(op, "argument 'op'");
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             ErrorBuffer* eb = handle_arg<ErrorBuffer>(error_buffer, "argument 'error_buffer'",
                                                       "qc.ErrorBuffer", true);
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             c.reap_orphans();
             const ErrorBufferUse residuals(eb);
             qc_request_t request = nullptr;
             call_nogil([&] {
               return qc_iallreduce(h, ptr<const void>(from), ptr<void>(to), n, static_cast<qc_dtype_t>(type),
                                    static_cast<qc_reduce_op_t>(reduce), opt_cstr(name), residuals.handle,
                                    &request);
             });
             return std::make_unique<Request>(request, py::make_tuple(keep, error_buffer), self);
           },
           py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op"),
           py::arg("layer").none(true), py::arg("error_buffer").none(true), py::arg("keep").none(true))
      .def("iallreduce_segments",
           [](py::object self, py::handle send, py::handle recv, py::handle counts, py::handle layers,
              py::handle dtype, py::handle op, py::handle error_buffer, py::object keep) {
             Comm& c = self.cast<Comm&>();
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const py::sequence count_items = sequence_arg(counts, "argument 'counts'");
             const py::sequence layer_items = sequence_arg(layers, "argument 'layers'");
             if (layer_items.size() != count_items.size())
               fail_value("argument 'layers' has " + std::to_string(layer_items.size()) + " entries but 'counts' " +
                          std::to_string(count_items.size()) + "; one per segment");
             std::vector<size_t> sizes;
             std::vector<std::optional<std::string>> names;
             for (size_t i = 0; i < count_items.size(); ++i) {
               sizes.push_back(int_arg<size_t>(count_items[i], item("argument 'counts'", i)));
               names.push_back(opt_name_arg(layer_items[i], item("argument 'layers'", i)));
             }
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const int reduce = int_arg<int>(op, "argument 'op'");
             ErrorBuffer* eb = handle_arg<ErrorBuffer>(error_buffer, "argument 'error_buffer'",
                                                       "qc.ErrorBuffer", true);
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             c.reap_orphans();
             const ErrorBufferUse residuals(eb);
             std::vector<const char*> cnames;
             cnames.reserve(names.size());
             for (const auto& name : names) cnames.push_back(opt_cstr(name));
             qc_request_t request = nullptr;
             // counts and layers are copied by the start (qc.h).
             call_nogil([&] {
               return qc_iallreduce_segments(h, ptr<const void>(from), ptr<void>(to), sizes.size(), sizes.data(),
                                             cnames.data(), static_cast<qc_dtype_t>(type),
                                             static_cast<qc_reduce_op_t>(reduce), residuals.handle, &request);
             });
             return std::make_unique<Request>(request, py::make_tuple(keep, error_buffer), self);
           },
           py::arg("send"), py::arg("recv"), py::arg("counts"), py::arg("layers"), py::arg("dtype"),
           py::arg("op"), py::arg("error_buffer").none(true), py::arg("keep").none(true))
      .def("ialltoall",
           [](py::object self, py::handle send, py::handle recv, py::handle count_per_rank, py::handle dtype,
              py::handle layer, py::object keep) {
             Comm& c = self.cast<Comm&>();
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const size_t n = int_arg<size_t>(count_per_rank, "argument 'count_per_rank'");
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             c.reap_orphans();
             qc_request_t request = nullptr;
             call_nogil([&] {
               return qc_ialltoall(h, ptr<const void>(from), ptr<void>(to), n, static_cast<qc_dtype_t>(type),
                                   opt_cstr(name), &request);
             });
             return std::make_unique<Request>(request, std::move(keep), self);
           },
           py::arg("send"), py::arg("recv"), py::arg("count_per_rank"), py::arg("dtype"),
           py::arg("layer").none(true), py::arg("keep").none(true))
      .def("ireduce_scatter",
           [](py::object self, py::handle send, py::handle recv, py::handle recvcount, py::handle dtype,
              py::handle op, py::handle layer, py::handle error_buffer, py::object keep) {
             Comm& c = self.cast<Comm&>();
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const size_t n = int_arg<size_t>(recvcount, "argument 'recvcount'");
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const int reduce = int_arg<int>(op, "argument 'op'");
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             ErrorBuffer* eb = handle_arg<ErrorBuffer>(error_buffer, "argument 'error_buffer'",
                                                       "qc.ErrorBuffer", true);
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             c.reap_orphans();
             const ErrorBufferUse residuals(eb);
             qc_request_t request = nullptr;
             call_nogil([&] {
               return qc_ireduce_scatter(h, ptr<const void>(from), ptr<void>(to), n, static_cast<qc_dtype_t>(type),
                                         static_cast<qc_reduce_op_t>(reduce), opt_cstr(name), residuals.handle,
                                         &request);
             });
             return std::make_unique<Request>(request, py::make_tuple(keep, error_buffer), self);
           },
           py::arg("send"), py::arg("recv"), py::arg("recvcount"), py::arg("dtype"), py::arg("op"),
           py::arg("layer").none(true), py::arg("error_buffer").none(true), py::arg("keep").none(true))
      .def("iallgather",
           [](py::object self, py::handle send, py::handle recv, py::handle sendcount, py::handle dtype,
              py::handle layer, py::handle error_buffer, py::object keep) {
             Comm& c = self.cast<Comm&>();
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const size_t n = int_arg<size_t>(sendcount, "argument 'sendcount'");
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             ErrorBuffer* eb = handle_arg<ErrorBuffer>(error_buffer, "argument 'error_buffer'",
                                                       "qc.ErrorBuffer", true);
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             c.reap_orphans();
             const ErrorBufferUse residuals(eb);
             qc_request_t request = nullptr;
             call_nogil([&] {
               return qc_iallgather(h, ptr<const void>(from), ptr<void>(to), n, static_cast<qc_dtype_t>(type),
                                    opt_cstr(name), residuals.handle, &request);
             });
             return std::make_unique<Request>(request, py::make_tuple(keep, error_buffer), self);
           },
           py::arg("send"), py::arg("recv"), py::arg("sendcount"), py::arg("dtype"), py::arg("layer").none(true),
           py::arg("error_buffer").none(true), py::arg("keep").none(true))
      .def("ibroadcast",
           [](py::object self, py::handle send, py::handle recv, py::handle count, py::handle dtype, py::handle root,
              py::handle layer, py::object keep) {
             Comm& c = self.cast<Comm&>();
             const std::uintptr_t from = address_arg(send, "argument 'send'");
             const std::uintptr_t to = address_arg(recv, "argument 'recv'");
             const size_t n = int_arg<size_t>(count, "argument 'count'");
             const int type = int_arg<int>(dtype, "argument 'dtype'");
             const int source = int_arg<int>(root, "argument 'root'");
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             c.reap_orphans();
             qc_request_t request = nullptr;
             call_nogil([&] {
               return qc_ibroadcast(h, ptr<const void>(from), ptr<void>(to), n, static_cast<qc_dtype_t>(type), source,
                                    opt_cstr(name), &request);
             });
             return std::make_unique<Request>(request, std::move(keep), self);
           },
           py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("root"),
           py::arg("layer").none(true), py::arg("keep").none(true))
      // The result handle is made at once and read once the request has
      // completed (qc.h); (result, request) come back together.
      .def("isparse_allreduce",
           [](py::object self, py::handle indices, py::handle values, py::handle nnz, py::handle row_len,
              py::handle dtype, py::handle op, py::handle layer, py::object keep) {
             Comm& c = self.cast<Comm&>();
             const SparseCallArgs a(indices, values, nnz, row_len, dtype, op, layer);
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             c.reap_orphans();
             auto result = std::make_unique<SparseResult>();
             qc_request_t request = nullptr;
             call_nogil([&] {
               return qc_isparse_allreduce(h, a.index_data(), a.value_data(), a.nnz, a.row_len, a.dtype, a.op,
                                           a.layer_name(), result->slot(), &request);
             });
             auto started = std::make_unique<Request>(request, std::move(keep), self);
             return py::make_tuple(py::cast(result.release(), py::return_value_policy::take_ownership),
                                   py::cast(started.release(), py::return_value_policy::take_ownership));
           },
           py::arg("indices"), py::arg("values"), py::arg("nnz"), py::arg("row_len"), py::arg("dtype"), py::arg("op"),
           py::arg("layer").none(true), py::arg("keep").none(true))
      .def("isparse_allreduce_dense",
           [](py::object self, py::handle indices, py::handle values, py::handle nnz, py::handle row_len,
              py::handle nrows, py::handle dense, py::handle dtype, py::handle op, py::handle layer,
              py::object keep) {
             Comm& c = self.cast<Comm&>();
             const SparseCallArgs a(indices, values, nnz, row_len, dtype, op, layer);
             const DenseTableArg table(nrows, dense);
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             c.reap_orphans();
             qc_request_t request = nullptr;
             call_nogil([&] {
               return qc_isparse_allreduce_dense(h, a.index_data(), a.value_data(), a.nnz, a.row_len, table.nrows,
                                                 table.data(), a.dtype, a.op, a.layer_name(), &request);
             });
             return std::make_unique<Request>(request, std::move(keep), self);
           },
           py::arg("indices"), py::arg("values"), py::arg("nnz"), py::arg("row_len"), py::arg("nrows"),
           py::arg("dense"), py::arg("dtype"), py::arg("op"), py::arg("layer").none(true),
           py::arg("keep").none(true))
      .def("set_layer_policy",
           [](Comm& c, py::handle pattern, py::handle policy) {
             const std::string name = name_arg(pattern, "argument 'pattern'");
             const qc_policy_t p = policy_arg(policy, "argument 'policy'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             call([&] { return qc_comm_set_layer_policy(h, name.c_str(), &p); });
           },
           py::arg("pattern"), py::arg("policy"))
      .def("get_layer_policy",
           [](Comm& c, py::handle layer) {
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             qc_policy_t p = QC_POLICY_INIT;
             call([&] { return qc_comm_get_layer_policy(h, opt_cstr(name), &p); });
             return policy_to_tuple(p);
           },
           py::arg("layer").none(true))
      .def("policy_preset",
           [](Comm& c, py::handle name, py::handle base) {
             const std::string preset = name_arg(name, "argument 'name'");
             const std::optional<qc_policy_t> b =
                 base.is_none() ? std::nullopt : std::optional<qc_policy_t>(policy_arg(base, "argument 'base'"));
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             call([&] { return qc_comm_apply_preset(h, preset.c_str(), b ? &*b : nullptr); });
           },
           py::arg("name"), py::arg("base").none(true))
      .def("stats",
           [](Comm& c) {
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             qc_stats_t s{};
             s.struct_size = sizeof(s);
             call([&] { return qc_comm_get_stats(h, &s); });
             return stats_dict(s);
           })
      .def("layer_stats",
           [](Comm& c, py::handle layer) {
             const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             qc_layer_stats_t s{};
             s.struct_size = sizeof(s);
             call([&] { return qc_comm_get_layer_stats(h, opt_cstr(name), &s); });
             return layer_stats_dict(s);
           },
           py::arg("layer").none(true))
      .def("layer_names",
           [](Comm& c) {
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             size_t n = 0;
             call([&] { return qc_comm_layer_count(h, &n); });
             std::vector<std::string> names;
             names.reserve(n);
             for (size_t i = 0; i < n; ++i) {
               size_t len = 0;
               call([&] { return qc_comm_layer_name(h, i, nullptr, 0, &len); });
               std::string name(len + 1, '\0');
               call([&] { return qc_comm_layer_name(h, i, name.data(), name.size(), &len); });
               name.resize(len);
               names.push_back(std::move(name));
             }
             return names;
           })
      .def("save_state",
           [](Comm& c) {
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             size_t size = 0;
             call_nogil([&] { return qc_comm_save_state(h, nullptr, 0, &size); });
             std::string out(size, '\0');
             call_nogil([&] { return qc_comm_save_state(h, out.data(), out.size(), &size); });
             return py::bytes(out.data(), size);
           })
      .def("load_state",
           [](Comm& c, py::handle data) {
             const BytesArg image(data, "argument 'data'");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             call_nogil([&] { return qc_comm_load_state(h, image.data(), image.size()); });
           },
           py::arg("data"))
      .def("adapt_policies",
           [](Comm& c, py::handle method, py::handle alpha, py::handle allowed_bits) {
             qc_adapt_config_t cfg = QC_ADAPT_CONFIG_INIT;
             cfg.method = static_cast<qc_adapt_method_t>(int_arg<int>(method, "argument 'method'"));
             cfg.alpha = real_arg(alpha, "argument 'alpha'");
             const py::sequence bits = sequence_arg(allowed_bits, "argument 'allowed_bits'");
             if (bits.size() < 1 || bits.size() > 8)
               fail_value("argument 'allowed_bits' has " + std::to_string(bits.size()) + " entries; expected 1..8");
             cfg.num_allowed = static_cast<int>(bits.size());
             for (size_t i = 0; i < bits.size(); ++i)
               cfg.allowed_bits[i] = int_arg<int>(bits[i], item("argument 'allowed_bits'", i));
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             qc_adapt_report_t r{};
             r.struct_size = sizeof(r);
             call_nogil([&] { return qc_comm_adapt_policies(h, &cfg, &r); });
             py::dict d;
             d["layers"] = r.layers;
             d["predicted_error"] = r.predicted_error;
             d["error_budget"] = r.error_budget;
             d["e4"] = r.e4;
             d["predicted_bytes"] = r.predicted_bytes;
             d["bytes_at_4"] = r.bytes_at_4;
             return d;
           },
           py::arg("method"), py::arg("alpha"), py::arg("allowed_bits"));

  // ---- emulation ----
  m.def("emulate_allreduce",
        [](py::handle nranks, py::handle sends, py::handle recvs, py::handle count, py::handle dtype, py::handle op,
           py::handle layer, py::handle call_index, py::handle policy, py::handle error_buffers) {
          const int n = int_arg<int>(nranks, "argument 'nranks'");
          const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
          const uint64_t index = int_arg<uint64_t>(call_index, "argument 'call_index'");
          const size_t elements = int_arg<size_t>(count, "argument 'count'");
          const int type = int_arg<int>(dtype, "argument 'dtype'");
          const int reduce = int_arg<int>(op, "argument 'op'");
          const qc_policy_t p = policy_arg(policy, "argument 'policy'");
          EmulatedBuffers b(n, sends, recvs);
          EmulatedErrorBuffers residuals(n, error_buffers);
          call_nogil([&] {
            return qc_emulate_allreduce(n, b.sends.data(), b.recvs.data(), elements, static_cast<qc_dtype_t>(type),
                                        static_cast<qc_reduce_op_t>(reduce), opt_cstr(name), index, &p,
                                        residuals.handles());
          });
        },
        py::arg("nranks"), py::arg("sends"), py::arg("recvs"), py::arg("count"), py::arg("dtype"), py::arg("op"),
        py::arg("layer").none(true), py::arg("call_index"), py::arg("policy"), py::arg("error_buffers").none(true));
  m.def("emulate_alltoall",
        [](py::handle nranks, py::handle sends, py::handle recvs, py::handle count_per_rank, py::handle dtype,
           py::handle layer, py::handle call_index, py::handle policy) {
          const int n = int_arg<int>(nranks, "argument 'nranks'");
          const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
          const uint64_t index = int_arg<uint64_t>(call_index, "argument 'call_index'");
          const size_t elements = int_arg<size_t>(count_per_rank, "argument 'count_per_rank'");
          const int type = int_arg<int>(dtype, "argument 'dtype'");
          const qc_policy_t p = policy_arg(policy, "argument 'policy'");
          EmulatedBuffers b(n, sends, recvs);
          call_nogil([&] {
            return qc_emulate_alltoall(n, b.sends.data(), b.recvs.data(), elements, static_cast<qc_dtype_t>(type),
                                       opt_cstr(name), index, &p);
          });
        },
        py::arg("nranks"), py::arg("sends"), py::arg("recvs"), py::arg("count_per_rank"), py::arg("dtype"),
        py::arg("layer").none(true), py::arg("call_index"), py::arg("policy"));
  m.def("emulate_reduce_scatter",
        [](py::handle nranks, py::handle sends, py::handle recvs, py::handle recvcount, py::handle dtype,
           py::handle op, py::handle layer, py::handle call_index, py::handle policy, py::handle error_buffers) {
          const int n = int_arg<int>(nranks, "argument 'nranks'");
          const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
          const uint64_t index = int_arg<uint64_t>(call_index, "argument 'call_index'");
          const size_t elements = int_arg<size_t>(recvcount, "argument 'recvcount'");
          const int type = int_arg<int>(dtype, "argument 'dtype'");
          const int reduce = int_arg<int>(op, "argument 'op'");
          const qc_policy_t p = policy_arg(policy, "argument 'policy'");
          EmulatedBuffers b(n, sends, recvs);
          EmulatedErrorBuffers residuals(n, error_buffers);
          call_nogil([&] {
            return qc_emulate_reduce_scatter(n, b.sends.data(), b.recvs.data(), elements,
                                             static_cast<qc_dtype_t>(type), static_cast<qc_reduce_op_t>(reduce),
                                             opt_cstr(name), index, &p, residuals.handles());
          });
        },
        py::arg("nranks"), py::arg("sends"), py::arg("recvs"), py::arg("recvcount"), py::arg("dtype"), py::arg("op"),
        py::arg("layer").none(true), py::arg("call_index"), py::arg("policy"), py::arg("error_buffers").none(true));
  m.def("emulate_allgather",
        [](py::handle nranks, py::handle sends, py::handle recvs, py::handle sendcount, py::handle dtype,
           py::handle layer, py::handle call_index, py::handle policy, py::handle error_buffers) {
          const int n = int_arg<int>(nranks, "argument 'nranks'");
          const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
          const uint64_t index = int_arg<uint64_t>(call_index, "argument 'call_index'");
          const size_t elements = int_arg<size_t>(sendcount, "argument 'sendcount'");
          const int type = int_arg<int>(dtype, "argument 'dtype'");
          const qc_policy_t p = policy_arg(policy, "argument 'policy'");
          EmulatedBuffers b(n, sends, recvs);
          EmulatedErrorBuffers residuals(n, error_buffers);
          call_nogil([&] {
            return qc_emulate_allgather(n, b.sends.data(), b.recvs.data(), elements, static_cast<qc_dtype_t>(type),
                                        opt_cstr(name), index, &p, residuals.handles());
          });
        },
        py::arg("nranks"), py::arg("sends"), py::arg("recvs"), py::arg("sendcount"), py::arg("dtype"),
        py::arg("layer").none(true), py::arg("call_index"), py::arg("policy"), py::arg("error_buffers").none(true));
  // sends: only sends[root] is read; the others may be 0 (qc.h).
  m.def("emulate_broadcast",
        [](py::handle nranks, py::handle sends, py::handle recvs, py::handle count, py::handle dtype,
           py::handle root, py::handle layer, py::handle call_index, py::handle policy) {
          const int n = int_arg<int>(nranks, "argument 'nranks'");
          const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
          const uint64_t index = int_arg<uint64_t>(call_index, "argument 'call_index'");
          const size_t elements = int_arg<size_t>(count, "argument 'count'");
          const int type = int_arg<int>(dtype, "argument 'dtype'");
          const int source = int_arg<int>(root, "argument 'root'");
          const qc_policy_t p = policy_arg(policy, "argument 'policy'");
          EmulatedBuffers b(n, sends, recvs);
          call_nogil([&] {
            return qc_emulate_broadcast(n, b.sends.data(), b.recvs.data(), elements, static_cast<qc_dtype_t>(type),
                                        source, opt_cstr(name), index, &p);
          });
        },
        py::arg("nranks"), py::arg("sends"), py::arg("recvs"), py::arg("count"), py::arg("dtype"), py::arg("root"),
        py::arg("layer").none(true), py::arg("call_index"), py::arg("policy"));

  m.def("emulate_sparse_allreduce",
        [](py::handle nranks, py::handle indices, py::handle values, py::handle nnz, py::handle row_len,
           py::handle dtype, py::handle op, py::handle layer, py::handle call_index, py::handle policy) {
          const int n = int_arg<int>(nranks, "argument 'nranks'");
          const EmulatedSparseRows rows(n, indices, values, nnz);
          const size_t width = int_arg<size_t>(row_len, "argument 'row_len'");
          const int type = int_arg<int>(dtype, "argument 'dtype'");
          const int reduce = int_arg<int>(op, "argument 'op'");
          const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
          const uint64_t index = int_arg<uint64_t>(call_index, "argument 'call_index'");
          const qc_policy_t p = policy_arg(policy, "argument 'policy'");
          auto result = std::make_unique<SparseResult>();
          call_nogil([&] {
            return qc_emulate_sparse_allreduce(n, rows.indices.data(), rows.values.data(), rows.nnz.data(), width,
                                               static_cast<qc_dtype_t>(type), static_cast<qc_reduce_op_t>(reduce),
                                               opt_cstr(name), index, &p, result->slot());
          });
          return result;
        },
        py::arg("nranks"), py::arg("indices"), py::arg("values"), py::arg("nnz"), py::arg("row_len"),
        py::arg("dtype"), py::arg("op"), py::arg("layer").none(true), py::arg("call_index"), py::arg("policy"));
  m.def("emulate_sparse_allreduce_dense",
        [](py::handle nranks, py::handle indices, py::handle values, py::handle nnz, py::handle row_len,
           py::handle nrows, py::handle denses, py::handle dtype, py::handle op, py::handle layer,
           py::handle call_index, py::handle policy) {
          const int n = int_arg<int>(nranks, "argument 'nranks'");
          const EmulatedSparseRows rows(n, indices, values, nnz);
          const size_t width = int_arg<size_t>(row_len, "argument 'row_len'");
          const size_t table_rows = int_arg<size_t>(nrows, "argument 'nrows'");
          std::vector<void*> tables;
          for (std::uintptr_t a : addresses_arg(denses, "argument 'dense'")) tables.push_back(ptr<void>(a));
          if (tables.size() != rows.nnz.size()) fail_value("argument 'dense' must have one table per rank");
          const int type = int_arg<int>(dtype, "argument 'dtype'");
          const int reduce = int_arg<int>(op, "argument 'op'");
          const std::optional<std::string> name = opt_name_arg(layer, "argument 'layer'");
          const uint64_t index = int_arg<uint64_t>(call_index, "argument 'call_index'");
          const qc_policy_t p = policy_arg(policy, "argument 'policy'");
          call_nogil([&] {
            return qc_emulate_sparse_allreduce_dense(n, rows.indices.data(), rows.values.data(), rows.nnz.data(),
                                                     width, table_rows, tables.data(), static_cast<qc_dtype_t>(type),
                                                     static_cast<qc_reduce_op_t>(reduce), opt_cstr(name), index, &p);
          });
        },
        py::arg("nranks"), py::arg("indices"), py::arg("values"), py::arg("nnz"), py::arg("row_len"),
        py::arg("nrows"), py::arg("dense"), py::arg("dtype"), py::arg("op"), py::arg("layer").none(true),
        py::arg("call_index"), py::arg("policy"));
}
