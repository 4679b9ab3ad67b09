// The index vocabulary of Tensor::index and Tensor::index_put_, spelled as libtorch's
// torch::indexing: x.index({Slice(1, None, 2), None, Ellipsis, 0, mask}). Data only; the ops
// that read it are gg::index and gg::index_put_ (ops/index.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <type_traits>

#include "tensor.h"

namespace gg::indexing {

// `None`: as a Slice bound, "from the start" or "to the end"; as an index, a new axis of size 1.
struct NoneType {
  constexpr explicit NoneType(int) {}
};
constexpr NoneType None{0};

// `...`: as many full slices as the dims the other indices leave (at most one per index).
struct EllipsisType {
  constexpr explicit EllipsisType(int) {}
};
constexpr EllipsisType Ellipsis{0};

// start:stop:step, Python's rules: negative bounds count from the end, bounds past the ends are
// clamped, step must be positive (as in libtorch).
struct Slice {
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step) {}
  Slice(NoneType, std::optional<int64_t> stop = std::nullopt, std::optional<int64_t> step = std::nullopt)
      : stop(stop), step(step) {}
  Slice(std::optional<int64_t> start, NoneType, std::optional<int64_t> step = std::nullopt)
      : start(start), step(step) {}
  Slice(NoneType, NoneType, std::optional<int64_t> step = std::nullopt) : step(step) {}
  std::optional<int64_t> start, stop, step;
};

// One entry of an index list: an integer (removes its dim), a Slice, None (inserts a dim),
// Ellipsis (or the string "..."), or a tensor: b8 (a mask over as many dims as it has) or i64
// (indices into one dim; negative ones count from the end).
class TensorIndex {
 public:
  enum class Kind { integer, slice, none, ellipsis, tensor };

  // Any integer type, so that a literal 0 is an index and not a null `const char*`.
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  TensorIndex(T i) : kind_(Kind::integer), integer_(static_cast<int64_t>(i)) {}
  TensorIndex(Slice s) : kind_(Kind::slice), slice_(s) {}
  TensorIndex(NoneType) : kind_(Kind::none) {}
  TensorIndex(EllipsisType) : kind_(Kind::ellipsis) {}
  TensorIndex(const char* text);  // "..." only; anything else is a ValueError
  TensorIndex(Tensor t) : kind_(Kind::tensor), tensor_(std::move(t)) {}

  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  Slice slice_;
  Tensor tensor_;
};

}  // namespace gg::indexing
