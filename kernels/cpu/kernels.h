// CPU kernels: one function per parameter struct. Each is plain loops or Eigen maps.
#pragma once
#include "../params.h"

namespace gg::kernels::cpu {

void copy_strided(const CopyParams& p);
void fill(const FillParams& p);
void random(const RandomParams& p);
void arange(const ArangeParams& p);
void unary(const UnaryParams& p);
void binary(const BinaryParams& p);
void where(const WhereParams& p);
void reduce_last(const ReduceParams& p);
void sum_strided(const SumStridedParams& p);
void matmul(const MatmulParams& p);
void softmax_last(const SoftmaxParams& p);
void index_select(const IndexParams& p);
void index_add(const IndexParams& p);

}  // namespace gg::kernels::cpu
