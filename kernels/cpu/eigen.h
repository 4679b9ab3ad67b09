// Eigen's Core for the CPU kernels: every kernel file includes Eigen through this header.
//
// GCC 12 reports the AVX-512 intrinsics' deliberately undefined pass-through operands
// (_mm512_undefined_ps and its kin, reached through Eigen's packet functions) as possibly
// uninitialised wherever they are inlined: hundreds of false reports in a -march=native build.
// It decides by the warning settings in force where the intrinsics are defined, so the intrinsic
// headers are included here, first, with those two warnings off; the kernels' own code keeps them.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
