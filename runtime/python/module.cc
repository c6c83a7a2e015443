// The fleet_runtime Python module: the shared pieces, then one Register* call per runtime area.
#include <pybind11/pybind11.h>

#include "bindings.h"

namespace py = pybind11;

namespace fleet::python {

void RegisterErrors(py::module_& m) {
  auto& error = py::register_exception<RuntimeFailure>(m, "Error", PyExc_RuntimeError);
  error.attr("__doc__") = "A failure reported by the FleetJob runtime (bad Paddle env, unreachable peer, timeout).";
}

EnvMap EnvFromPython(const py::object& env) {
  py::object source = env.is_none() ? py::module_::import("os").attr("environ") : env;
  EnvMap out;
  for (auto item : source.attr("items")()) {
    auto pair = item.cast<py::tuple>();
    out[pair[0].cast<std::string>()] = pair[1].cast<std::string>();
  }
  return out;
}

}  // namespace fleet::python

PYBIND11_MODULE(fleet_runtime, m) {
  m.doc() = "FleetJob runtime: collectives from the Paddle launcher env (docs/runtime.md).";
  fleet::python::RegisterErrors(m);
  fleet::python::RegisterCollective(m);
  fleet::python::RegisterPs(m);
}
