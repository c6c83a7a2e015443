// The areas of the fleet_runtime Python module and the helpers they share. Each area lives in its
// own .cc and registers its classes and functions on the module (see CMakeLists.txt).
#pragma once

#include <stdexcept>
#include <string>

#include <pybind11/pybind11.h>

#include "fleet/base/result.h"
#include "fleet/runtime/env_contract.h"

namespace fleet::python {

// Raised in Python as fleet_runtime.Error (a RuntimeError): a failure the runtime reports as a
// Status/Result (a bad env, a peer that never came, a timeout). Bad arguments raise ValueError or
// TypeError instead.
struct RuntimeFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
void ThrowIfError(const Result<T>& result) {
  if (!result.ok()) throw RuntimeFailure(result.error());
}

// The environment a binding reads: the `env` argument when given (a mapping of str to str), else
// os.environ as Python sees it now.
EnvMap EnvFromPython(const pybind11::object& env);

void RegisterErrors(pybind11::module_& m);      // module.cc
void RegisterCollective(pybind11::module_& m);  // collective.cc
void RegisterPs(pybind11::module_& m);          // ps.cc: the submodule fleet_runtime.ps

}  // namespace fleet::python
