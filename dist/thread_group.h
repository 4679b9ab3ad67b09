// In-process ranks: run_threads(P, fn) starts P threads, each calling fn with its own Group.
// Collectives meet in shared memory (a mutex and a condition variable); every rank computes a
// reduction itself, adding the ranks' tensors in rank order, so all ranks get bitwise the same
// result. Grad mode and the backward level are per thread (autograd/node.cpp), so each rank runs
// its own tape, forward and backward, exactly like a process of its own.
//
// Failures: when fn throws on one rank, the ranks waiting in (or later entering) a collective
// get a DistError instead of waiting forever; run_threads joins every thread and rethrows the
// first rank's original exception.
//
// The random generator behind gg::randn and gg::rand is one per process and not thread safe:
// make random inputs before run_threads (or pass them in), not inside fn.
#pragma once
#include <functional>

#include "group.h"

namespace gg::dist {

void run_threads(int world_size, const std::function<void(Group&)>& fn);

}  // namespace gg::dist
