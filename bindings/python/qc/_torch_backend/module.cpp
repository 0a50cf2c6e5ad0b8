// module.cpp - the Python face of QcBackend (loaded by qc/torch_backend.py,
// which compiles this directory with torch.utils.cpp_extension at first
// use). torch.distributed must be imported first: QcBackend's base class,
// c10d::Backend, is registered by torch._C._distributed_c10d.
#include <pybind11/stl.h>
#include <torch/python.h>

#include "qc_backend.h"

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "qc's torch.distributed backend (QcBackend); see qc.torch_backend";
  py::class_<qc_torch::QcBackend, c10d::Backend, c10::intrusive_ptr<qc_torch::QcBackend>>(
      m, "QcBackend")
      .def(py::init<int, int, c10::intrusive_ptr<c10d::Backend>,
                    c10::intrusive_ptr<c10d::Backend>, double, size_t,
                    c10::intrusive_ptr<c10d::Store>>(),
           py::arg("rank"), py::arg("size"), py::arg("bytes_group"), py::arg("fallback_group"),
           py::arg("timeout_seconds"), py::arg("max_sites"), py::arg("store"))
      .def("set_layer_policy", &qc_torch::QcBackend::set_layer_policy,
           py::call_guard<py::gil_scoped_release>())
      .def("get_layer_policy", &qc_torch::QcBackend::get_layer_policy)
      .def("reset_call_sites", &qc_torch::QcBackend::reset_call_sites)
      .def("call_site_count", &qc_torch::QcBackend::call_site_count)
      .def("residuals",
           [](qc_torch::QcBackend& self) {
             std::map<std::string, std::pair<size_t, std::string>> saved;
             {
               py::gil_scoped_release release;
               saved = self.residuals();
             }
             py::dict out;
             for (auto& e : saved) {
               out[py::str(e.first)] =
                   py::make_tuple(e.second.first, py::bytes(e.second.second));
             }
             return out;
           })
      .def("load_residuals",
           [](qc_torch::QcBackend& self, const py::dict& saved) {
             std::map<std::string, std::pair<size_t, std::string>> in;
             for (auto item : saved) {
               auto value = item.second.cast<py::tuple>();
               in[item.first.cast<std::string>()] = {value[0].cast<size_t>(),
                                                    value[1].cast<std::string>()};
             }
             py::gil_scoped_release release;
             self.load_residuals(in);
           })
      .def("stats", &qc_torch::QcBackend::stats)
      .def("fallback_counts", &qc_torch::QcBackend::fallback_counts)
      .def("set_cuda_fallback", &qc_torch::QcBackend::set_cuda_fallback, py::arg("group"))
      .def("cuda_ready", [](qc_torch::QcBackend& self) { return self.cuda_ready(); })
      .def("synchronize", &qc_torch::QcBackend::synchronize,
           py::call_guard<py::gil_scoped_release>());
  m.def("reset_all_call_sites", &qc_torch::QcBackend::reset_all_call_sites);
}
