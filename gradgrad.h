// gradgrad: a small C++17 tensor and autograd engine whose tape differentiates its own
// backward pass, so derivatives of any order come for free. Include this one header.
//
// Rule for every header of the library: it includes the library's other headers by paths
// relative to its own folder ("../core/tensor.h"), never by paths that depend on the include
// path ("core/tensor.h"), so that an installed header resolves to its own package whatever a
// consumer puts on its include path (tests/package/check.sh proves it against a clashing copy
// of every header path).
#pragma once

#include "autograd/engine.h"
#include "autograd/forward_ad.h"
#include "autograd/functional.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/indexing.h"
#include "core/scalar.h"
#include "core/shape.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "ops/ops.h"
#include "core/cuda.h"
#include "core/cuda_graph.h"
#include "autograd/to_dot.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "optim/optim.h"
#include "optim/schedule.h"
// gg::dist (docs/distributed.md): ranks that exchange tensors, differentiable collectives,
// data-parallel gradient averaging and sequence-parallel attention.
#include "dist/group.h"
#include "dist/nccl_group.h"
#include "dist/ops.h"
#include "dist/thread_group.h"
#if defined(GG_HAS_SAFETENSORS)  // built where nlohmann-json was found (CMakeLists.txt)
#include "io/safetensors.h"
#endif
