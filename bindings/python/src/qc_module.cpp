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
//     qc/__init__.py), enumerations as their int values.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qc.h"

namespace py = pybind11;

namespace {

// A failed qc call: the status and the calling thread's qc_last_error().
struct QcFailure : std::exception {
  int status;
  std::string message;
  QcFailure(int s, std::string m) : status(s), message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

[[noreturn]] void fail(int status, std::string message) { throw QcFailure(status, std::move(message)); }

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

// ---- policies as tuples -------------------------------------------------------

constexpr size_t kPolicyFields = 11;

qc_policy_t policy_from_tuple(const py::tuple& t) {
  if (t.size() != kPolicyFields)
    fail(QC_ERROR_INVALID_ARGUMENT, "policy tuple must have " + std::to_string(kPolicyFields) + " fields");
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = static_cast<qc_codec_t>(t[0].cast<int>());
  p.bits = t[1].cast<int>();
  p.bucket_size = t[2].cast<int>();
  p.rounding = static_cast<qc_rounding_t>(t[3].cast<int>());
  p.algorithm = static_cast<qc_algorithm_t>(t[4].cast<int>());
  p.error_feedback = t[5].cast<int>();
  p.group_size = t[6].cast<int>();
  p.topk_ratio = t[7].cast<float>();
  p.scale_update_period = t[8].cast<int>();
  p.seed = t[9].cast<uint64_t>();
  p.min_compress_bytes = t[10].cast<size_t>();
  return p;
}

py::tuple policy_to_tuple(const qc_policy_t& p) {
  return py::make_tuple(static_cast<int>(p.codec), p.bits, p.bucket_size, static_cast<int>(p.rounding),
                        static_cast<int>(p.algorithm), p.error_feedback, p.group_size,
                        static_cast<double>(p.topk_ratio), p.scale_update_period, p.seed,
                        p.min_compress_bytes);
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

class Comm {
 public:
  explicit Comm(qc_comm_t h) : h_(h) {}
  ~Comm() {
    // Local: never waits for peers (qc_comm_destroy).
    if (h_) qc_comm_destroy(h_);
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
    call([&] { return qc_comm_destroy(h); });
  }
  std::atomic<bool>& busy() { return busy_; }

 private:
  qc_comm_t h_;
  std::atomic<bool> busy_{false};
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
    qc_error_buffer_t h = h_;
    h_ = nullptr;
    call([&] { return qc_error_buffer_destroy(h); });
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

std::vector<std::unique_ptr<Comm>> create_local(int nranks, double timeout) {
  if (nranks < 1) fail(QC_ERROR_INVALID_ARGUMENT, "argument 'n' (" + std::to_string(nranks) + ") must be >= 1");
  std::vector<qc_comm_t> handles(static_cast<size_t>(nranks), nullptr);
  qc_comm_config_t cfg = comm_config(timeout);
  call([&] { return qc_comm_create_local_with_config(nranks, &cfg, handles.data()); });
  std::vector<std::unique_ptr<Comm>> comms;
  comms.reserve(handles.size());
  for (qc_comm_t h : handles) comms.push_back(std::make_unique<Comm>(h));
  return comms;
}

std::unique_ptr<Comm> create_mpi(int64_t fortran_handle, double timeout) {
  qc_comm_config_t cfg = comm_config(timeout);
  cfg.transport = QC_TRANSPORT_MPI;
  cfg.mpi_comm = fortran_handle;
  qc_comm_t h = nullptr;
  // Collective over the MPI communicator: waits for the other processes.
  call_nogil([&] { return qc_comm_create(&cfg, &h); });
  return std::make_unique<Comm>(h);
}

const char* opt_cstr(const std::optional<std::string>& s) { return s ? s->c_str() : nullptr; }

py::dict stats_dict(const qc_stats_t& s) {
  py::dict d;
  d["calls"] = s.calls;
  d["logical_bytes"] = s.logical_bytes;
  d["wire_bytes"] = s.wire_bytes;
  d["codec_seconds"] = s.codec_seconds;
  d["transport_seconds"] = s.transport_seconds;
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
    py::object cls = errors.attr("error_class")(e.status);
    py::object exc = cls(e.status, e.message);
    PyErr_SetObject(cls.ptr(), exc.ptr());
  } catch (py::error_already_set&) {
    const std::string text = std::string(qc_status_string(static_cast<qc_status_t>(e.status))) + ": " + e.message;
    PyErr_SetString(PyExc_RuntimeError, text.c_str());
  }
}

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

  m.def("version_number", &qc_version_number, "qc_version_number(): version of the running libqc.");
  m.def("version_string", [] { return std::string(qc_version_string()); },
        "qc_version_string(): 'M.m.p' of the running libqc.");
  m.def("status_string", [](int s) { return std::string(qc_status_string(static_cast<qc_status_t>(s))); },
        py::arg("status"), "qc_status_string(): the name of a status, e.g. 'QC_ERROR_TIMEOUT'.");
  m.def("last_error", [] { return std::string(qc_last_error()); },
        "qc_last_error() of the calling thread.");

  // ---- policies ----
  m.def("policy_defaults", [] {
    qc_policy_t p;
    p.struct_size = sizeof(qc_policy_t);
    call([&] { return qc_policy_init(&p); });
    return policy_to_tuple(p);
  }, "qc_policy_init() as a tuple in qc_policy_t field order.");
  m.def("policy_check", [](const py::tuple& t) {
    const qc_policy_t p = policy_from_tuple(t);
    size_t bytes = 0;
    call([&] { return qc_encoded_size(&p, 0, &bytes); });
  }, py::arg("policy"), "Validate a policy tuple with the library's rules; raises qc.Error.");
  m.def("encoded_size", [](const py::tuple& t, size_t count) {
    const qc_policy_t p = policy_from_tuple(t);
    size_t bytes = 0;
    call([&] { return qc_encoded_size(&p, count, &bytes); });
    return bytes;
  }, py::arg("policy"), py::arg("count"));
  m.def("encode", [](const py::tuple& t, std::uintptr_t src, size_t count, int dtype) {
    const qc_policy_t p = policy_from_tuple(t);
    size_t bound = 0;
    call([&] { return qc_encoded_size(&p, count, &bound); });
    std::string out(bound, '\0');
    size_t written = 0;
    call_nogil([&] {
      return qc_encode(&p, ptr<const void>(src), count, static_cast<qc_dtype_t>(dtype), out.data(),
                       out.size(), &written);
    });
    return py::bytes(out.data(), written);
  }, py::arg("policy"), py::arg("src"), py::arg("count"), py::arg("dtype"));
  m.def("decode", [](const py::bytes& data, std::uintptr_t dst, size_t count, int dtype) {
    char* buf = nullptr;
    Py_ssize_t size = 0;
    if (PyBytes_AsStringAndSize(data.ptr(), &buf, &size) != 0) throw py::error_already_set();
    call_nogil([&] {
      return qc_decode(buf, static_cast<size_t>(size), ptr<void>(dst), count, static_cast<qc_dtype_t>(dtype));
    });
  }, py::arg("data"), py::arg("dst"), py::arg("count"), py::arg("dtype"));

  // ---- error buffers ----
  py::class_<ErrorBuffer>(m, "ErrorBuffer", "qc_error_buffer_t")
      .def(py::init<Comm*, size_t>(), py::arg("comm").none(true), py::arg("count"))
      .def_property_readonly("count", &ErrorBuffer::count)
      .def_property_readonly("closed", &ErrorBuffer::closed)
      .def("close", &ErrorBuffer::close)
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
      .def("load", [](ErrorBuffer& b, const py::bytes& data) {
        InUse use(b.busy(), "the qc.ErrorBuffer");
        qc_error_buffer_t h = b.handle();
        char* buf = nullptr;
        Py_ssize_t size = 0;
        if (PyBytes_AsStringAndSize(data.ptr(), &buf, &size) != 0) throw py::error_already_set();
        call_nogil([&] { return qc_error_buffer_load(h, buf, static_cast<size_t>(size)); });
      }, py::arg("data"));

  // ---- communicators ----
  py::class_<Comm>(m, "Comm", "qc_comm_t")
      .def_static("create_local", &create_local, py::arg("n"), py::arg("timeout"))
      .def_static("create_mpi", &create_mpi, py::arg("fortran_handle"), py::arg("timeout"))
      .def_property_readonly("closed", &Comm::closed)
      .def("close", &Comm::close)
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
           [](Comm& c, std::uintptr_t send, std::uintptr_t recv, size_t count, int dtype, int op,
              std::optional<std::string> layer, ErrorBuffer* eb, std::uintptr_t stream) {
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             std::optional<InUse> use_eb;
             qc_error_buffer_t ebh = nullptr;
             if (eb) {
               use_eb.emplace(eb->busy(), "the qc.ErrorBuffer");
               ebh = eb->handle();
             }
             call_nogil([&] {
               return qc_allreduce(h, ptr<const void>(send), ptr<void>(recv), count,
                                   static_cast<qc_dtype_t>(dtype), static_cast<qc_reduce_op_t>(op),
                                   opt_cstr(layer), ebh, ptr<void>(stream));
             });
           },
           py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op"),
           py::arg("layer").none(true), py::arg("error_buffer").none(true), py::arg("stream") = 0)
      .def("allreduce_segments",
           [](Comm& c, std::uintptr_t send, std::uintptr_t recv, std::vector<size_t> counts,
              std::vector<std::optional<std::string>> layers, int dtype, int op, ErrorBuffer* eb,
              std::uintptr_t stream) {
             if (layers.size() != counts.size())
               fail(QC_ERROR_INVALID_ARGUMENT, "argument 'layers' must have one entry per segment");
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             std::optional<InUse> use_eb;
             qc_error_buffer_t ebh = nullptr;
             if (eb) {
               use_eb.emplace(eb->busy(), "the qc.ErrorBuffer");
               ebh = eb->handle();
             }
             std::vector<const char*> names;
             names.reserve(layers.size());
             for (const auto& l : layers) names.push_back(opt_cstr(l));
             call_nogil([&] {
               return qc_allreduce_segments(h, ptr<const void>(send), ptr<void>(recv), counts.size(),
                                            counts.data(), names.data(), static_cast<qc_dtype_t>(dtype),
                                            static_cast<qc_reduce_op_t>(op), ebh, ptr<void>(stream));
             });
           },
           py::arg("send"), py::arg("recv"), py::arg("counts"), py::arg("layers"), py::arg("dtype"),
           py::arg("op"), py::arg("error_buffer").none(true), py::arg("stream") = 0)
      .def("alltoall",
           [](Comm& c, std::uintptr_t send, std::uintptr_t recv, size_t count_per_rank, int dtype,
              std::optional<std::string> layer, std::uintptr_t stream) {
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             call_nogil([&] {
               return qc_alltoall(h, ptr<const void>(send), ptr<void>(recv), count_per_rank,
                                  static_cast<qc_dtype_t>(dtype), opt_cstr(layer),
                                  ptr<void>(stream));
             });
           },
           py::arg("send"), py::arg("recv"), py::arg("count_per_rank"), py::arg("dtype"),
           py::arg("layer").none(true), py::arg("stream") = 0)
      .def("set_layer_policy",
           [](Comm& c, const std::string& pattern, const py::tuple& t) {
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             const qc_policy_t p = policy_from_tuple(t);
             call([&] { return qc_set_layer_policy(h, pattern.c_str(), &p); });
           },
           py::arg("pattern"), py::arg("policy"))
      .def("get_layer_policy",
           [](Comm& c, std::optional<std::string> layer) {
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             qc_policy_t p = QC_POLICY_INIT;
             call([&] { return qc_get_layer_policy(h, opt_cstr(layer), &p); });
             return policy_to_tuple(p);
           },
           py::arg("layer").none(true))
      .def("policy_preset",
           [](Comm& c, const std::string& name, std::optional<py::tuple> base) {
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             qc_policy_t b = QC_POLICY_INIT;
             if (base) b = policy_from_tuple(*base);
             call([&] { return qc_policy_preset(h, name.c_str(), base ? &b : nullptr); });
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
           [](Comm& c, std::optional<std::string> layer) {
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             qc_layer_stats_t s{};
             s.struct_size = sizeof(s);
             call([&] { return qc_comm_get_layer_stats(h, opt_cstr(layer), &s); });
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
      .def("adapt_policies",
           [](Comm& c, int method, double alpha, std::vector<int> allowed_bits) {
             InUse use(c.busy(), "the qc.Comm");
             qc_comm_t h = c.handle();
             qc_adapt_config_t cfg = QC_ADAPT_CONFIG_INIT;
             cfg.method = static_cast<qc_adapt_method_t>(method);
             cfg.alpha = alpha;
             if (allowed_bits.size() < 1 || allowed_bits.size() > 8)
               fail(QC_ERROR_INVALID_ARGUMENT, "argument 'allowed_bits' must have 1..8 entries");
             cfg.num_allowed = static_cast<int>(allowed_bits.size());
             for (size_t i = 0; i < allowed_bits.size(); ++i) cfg.allowed_bits[i] = allowed_bits[i];
             qc_adapt_report_t r{};
             r.struct_size = sizeof(r);
             call_nogil([&] { return qc_adapt_policies(h, &cfg, &r); });
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
        [](int nranks, std::vector<std::uintptr_t> sends, std::vector<std::uintptr_t> recvs, size_t count,
           int dtype, int op, const py::tuple& t, std::optional<std::vector<ErrorBuffer*>> ebs) {
          const qc_policy_t p = policy_from_tuple(t);
          if (sends.size() != static_cast<size_t>(nranks) || recvs.size() != static_cast<size_t>(nranks))
            fail(QC_ERROR_INVALID_ARGUMENT, "one send and one receive buffer per rank");
          std::vector<const void*> s(sends.size());
          std::vector<void*> r(recvs.size());
          for (size_t i = 0; i < sends.size(); ++i) s[i] = ptr<const void>(sends[i]);
          for (size_t i = 0; i < recvs.size(); ++i) r[i] = ptr<void>(recvs[i]);
          std::vector<qc_error_buffer_t> eb_handles;
          std::vector<std::unique_ptr<InUse>> uses;
          if (ebs) {
            if (ebs->size() != static_cast<size_t>(nranks))
              fail(QC_ERROR_INVALID_ARGUMENT, "argument 'error_buffers' must have one entry (or None) per rank");
            for (ErrorBuffer* b : *ebs) {
              if (b) {
                uses.push_back(std::make_unique<InUse>(b->busy(), "the qc.ErrorBuffer"));
                eb_handles.push_back(b->handle());
              } else {
                eb_handles.push_back(nullptr);
              }
            }
          }
          call_nogil([&] {
            return qc_emulate_allreduce(nranks, s.data(), r.data(), count, static_cast<qc_dtype_t>(dtype),
                                        static_cast<qc_reduce_op_t>(op), &p,
                                        ebs ? eb_handles.data() : nullptr);
          });
        },
        py::arg("nranks"), py::arg("sends"), py::arg("recvs"), py::arg("count"), py::arg("dtype"), py::arg("op"),
        py::arg("policy"), py::arg("error_buffers").none(true));
  m.def("emulate_alltoall",
        [](int nranks, std::vector<std::uintptr_t> sends, std::vector<std::uintptr_t> recvs,
           size_t count_per_rank, int dtype, const py::tuple& t) {
          const qc_policy_t p = policy_from_tuple(t);
          if (sends.size() != static_cast<size_t>(nranks) || recvs.size() != static_cast<size_t>(nranks))
            fail(QC_ERROR_INVALID_ARGUMENT, "one send and one receive buffer per rank");
          std::vector<const void*> s(sends.size());
          std::vector<void*> r(recvs.size());
          for (size_t i = 0; i < sends.size(); ++i) s[i] = ptr<const void>(sends[i]);
          for (size_t i = 0; i < recvs.size(); ++i) r[i] = ptr<void>(recvs[i]);
          call_nogil([&] {
            return qc_emulate_alltoall(nranks, s.data(), r.data(), count_per_rank,
                                       static_cast<qc_dtype_t>(dtype), &p);
          });
        },
        py::arg("nranks"), py::arg("sends"), py::arg("recvs"), py::arg("count_per_rank"), py::arg("dtype"),
        py::arg("policy"));
}
