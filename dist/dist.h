// gg::dist: ranks that exchange tensors (Group: ThreadGroup in one process, NcclGroup across
// GPUs), differentiable collectives, data-parallel gradient averaging and sequence-parallel
// attention. docs/distributed.md describes the design and how to launch.
#pragma once
#include "dist/group.h"
#include "dist/nccl_group.h"
#include "dist/ops.h"
#include "dist/thread_group.h"
