#include <pybind11/pybind11.h>

#include "poseidon/version.h"

PYBIND11_MODULE(_C, m) { m.def("version", &poseidon::version); }
