// File: embed/torch/module.cc
//
// The Python extension _relay_torch: ProcessGroupRelay as a subclass of
// torch's ProcessGroup binding (torch 1.x) or Backend binding (torch 2.x) (torch.distributed must be imported first,
// which relay_torch/__init__.py does), and the creator function
// torch.distributed.Backend.register_backend calls.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include "embed/torch/process_group_relay.h"

namespace py = pybind11;

PYBIND11_MODULE(_relay_torch, m) {
  m.doc() = "relay's torch.distributed backend (embed/torch)";
  py::class_<relay_torch::ProcessGroupRelay, relay_torch::BackendBase,
             c10::intrusive_ptr<relay_torch::ProcessGroupRelay>>(
      m, "ProcessGroupRelay")
      .def_property_readonly("transport",
                             &relay_torch::ProcessGroupRelay::transport)
      .def_property_readonly("device_transport",
                             &relay_torch::ProcessGroupRelay::device_transport)
      .def("metrics_text", &relay_torch::ProcessGroupRelay::metrics_text,
           "This rank's collective metrics, Prometheus text format")
      .def("register_window", &relay_torch::ProcessGroupRelay::register_window,
           py::arg("tensor"), py::call_guard<py::gil_scoped_release>(),
           "Collective: registers a CUDA tensor as a symmetric window")
      .def("deregister_window", &relay_torch::ProcessGroupRelay::deregister_window,
           py::arg("tensor"), py::call_guard<py::gil_scoped_release>(),
           "Collective: removes the window registered at the tensor");
  // Called as creator(store, rank, world_size, timeout) by
  // torch.distributed for backend="relay". Blocks until every rank joined,
  // without holding the GIL.
  m.def("create_process_group", &relay_torch::CreateProcessGroupRelay,
        py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
}
