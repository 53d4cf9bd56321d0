// The extension switchyard._C: the torch.distributed backend (backend.hpp)
// and the MoE layer's exchanges (moe.hpp).
//
// One translation unit on purpose: torch's headers make each one cost
// about half a minute and a gigabyte of memory to compile.

#include "moe.hpp"
#include "backend.hpp"

#include <pybind11/stl.h>

PYBIND11_MODULE(_C, m) {
  using switchyard_torch::MoePlan;
  using switchyard_torch::MoeRoute;
  using switchyard_torch::SwitchyardBackend;
  // The base classes must be registered (by torch) before ours derive from
  // them.
  py::module::import("torch.distributed");
  m.doc() = "The switchyard torch.distributed backend (C++ part)";
  auto backend = py::class_<SwitchyardBackend, c10d::Backend,
                            c10::intrusive_ptr<SwitchyardBackend>>(
      m, "SwitchyardBackend");
  py::class_<SwitchyardBackend::Options, c10d::Backend::Options,
             c10::intrusive_ptr<SwitchyardBackend::Options>>(backend,
                                                             "Options")
      .def(py::init<std::chrono::milliseconds>(),
           py::arg("timeout") = kBackendDefaultTimeout)
      .def_readwrite("config", &SwitchyardBackend::Options::config);
  backend
      .def_static("create", &SwitchyardBackend::create, py::arg("store"),
                  py::arg("rank"), py::arg("size"), py::arg("timeout"),
                  py::arg("split_from"), py::arg("options"),
                  py::call_guard<py::gil_scoped_release>())
      .def("perform_nocolor_split",
           [](SwitchyardBackend& self, const py::object& /*device*/) {
             self.performNocolorSplit();
           },
           py::arg("device"), py::call_guard<py::gil_scoped_release>())
      .def("query", &SwitchyardBackend::query, py::arg("name"))
      .def_property_readonly("made_by_split",
                             &SwitchyardBackend::madeBySplit);
  m.def("_set_priority", &switchyard_torch::setPriority, py::arg("set"),
        py::arg("priority"), py::arg("order"), py::arg("name"));
  m.def("library_version", &swy_version);
#ifdef SWY_TORCH_CUDA
  m.attr("HAS_CUDA") = true;
#else
  m.attr("HAS_CUDA") = false;
#endif
  m.attr("PRIO_LOW") = static_cast<int>(SWY_PRIO_LOW);
  m.attr("PRIO_DEFAULT") = static_cast<int>(SWY_PRIO_DEFAULT);
  m.attr("PRIO_HIGH") = static_cast<int>(SWY_PRIO_HIGH);

  py::class_<MoePlan, std::shared_ptr<MoePlan>>(m, "MoePlan")
      .def(py::init<c10::intrusive_ptr<SwitchyardBackend>, int, int, int,
                    double, const std::string&>(),
           py::arg("group"), py::arg("experts_per_rank"), py::arg("hidden"),
           py::arg("top_k"), py::arg("capacity_factor"),
           py::arg("dtype") = "float32")
      .def("route", &MoePlan::route, py::arg("topk_idx"));
  py::class_<MoeRoute, std::shared_ptr<MoeRoute>>(m, "MoeRoute")
      .def_property_readonly("recv_rows", &MoeRoute::recvRows)
      .def("expert_offsets", &MoeRoute::expertOffsets)
      .def("dispatch", &MoeRoute::dispatch, py::arg("tokens"))
      .def("combine", &MoeRoute::combine, py::arg("expert_out"),
           py::arg("topk_w"))
      .def("combine_backward", &MoeRoute::combineBackward,
           py::arg("grad_tokens_out"), py::arg("topk_w"))
      .def("dispatch_backward", &MoeRoute::dispatchBackward,
           py::arg("grad_expert_in"));
  m.def("ta_expert_weights", &switchyard_torch::taExpertWeights,
        py::arg("group"), py::arg("experts_per_rank"));
}
