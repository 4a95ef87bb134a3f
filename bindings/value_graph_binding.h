// hiertag._core.ValueGraph (value_graph_binding.cpp).
#pragma once

#include <nanobind/nanobind.h>

#include "hiertag/core/onnx/onnx_model.h"

namespace hiertag {

// Adds ValueGraph to `m`; `model_of` reads a serialized model or raises ValueError.
void BindValueGraph(nanobind::module_& m, OnnxModel (*model_of)(const nanobind::bytes&));

}  // namespace hiertag
