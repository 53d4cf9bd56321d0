// The extension switchyard._C: the torch.distributed backend
// (process_group.hpp) and the MoE layer's exchanges (moe.hpp).
//
// One translation unit on purpose: torch's headers make each one cost
// about half a minute and a gigabyte of memory to compile.

#include "moe.hpp"
#include "process_group.hpp"

#include <pybind11/stl.h>

PYBIND11_MODULE(_C, m) {
  using switchyard_torch::MoePlan;
  using switchyard_torch::MoeRoute;
  using switchyard_torch::ProcessGroupSwitchyard;
  // The base class must be registered (by torch) before ours derives from it.
  py::module::import("torch.distributed");
  m.doc() = "The switchyard torch.distributed backend (C++ part)";
  py::class_<ProcessGroupSwitchyard, c10d::ProcessGroup,
             c10::intrusive_ptr<ProcessGroupSwitchyard>>(
      m, "ProcessGroupSwitchyard")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank,
                       int size, std::chrono::milliseconds /*timeout*/) {
             return c10::make_intrusive<ProcessGroupSwitchyard>(store, rank,
                                                                size);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout"), py::call_guard<py::gil_scoped_release>())
      .def("_split_for_next_group",
           &ProcessGroupSwitchyard::splitForNextGroup, py::arg("color"),
           py::arg("key"))
      .def_static("_drop_pending_split",
                  &ProcessGroupSwitchyard::dropPendingSplit);
  m.attr("SPLIT_NOCOLOR") = static_cast<int>(SWY_SPLIT_NOCOLOR);
  m.def("_set_priority", &switchyard_torch::setPriority, py::arg("set"),
        py::arg("priority"), py::arg("order"), py::arg("name"));
  m.def("library_version", &swy_version);
  m.attr("PRIO_LOW") = static_cast<int>(SWY_PRIO_LOW);
  m.attr("PRIO_DEFAULT") = static_cast<int>(SWY_PRIO_DEFAULT);
  m.attr("PRIO_HIGH") = static_cast<int>(SWY_PRIO_HIGH);

  py::class_<MoePlan, std::shared_ptr<MoePlan>>(m, "MoePlan")
      .def(py::init<c10::intrusive_ptr<ProcessGroupSwitchyard>, int, int, int,
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
