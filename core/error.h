// Typed exceptions. Every message names the op, the argument and the offending values,
// e.g. "gg::matmul: shapes cannot be multiplied: a is [2, 3], b is [4, 5]".
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace gg {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ShapeError : Error { using Error::Error; };      // incompatible shapes, bad dims
struct DTypeError : Error { using Error::Error; };      // wrong or mismatched element types
struct DeviceError : Error { using Error::Error; };     // mixed devices, missing backend
struct IndexError : Error { using Error::Error; };      // index out of range
struct ValueError : Error { using Error::Error; };      // any other bad argument value
struct AutogradError : Error { using Error::Error; };   // misuse of the tape
struct OutOfMemoryError : Error { using Error::Error; };  // an allocation failed (bytes, device)
// A call that cannot be recorded into a CUDA graph (a host copy, a synchronisation, .item())
// made while gg::cuda::Graph::capture runs; also a DeviceError.
struct CaptureError : DeviceError { using DeviceError::DeviceError; };

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// GG_CHECK(cond, ErrorType, "gg::op: ", pieces...) throws ErrorType with the pieces concatenated.
#define GG_CHECK(cond, ErrorType, ...)                                  \
  do {                                                                  \
    if (!(cond)) throw ErrorType(::gg::detail::concat(__VA_ARGS__));    \
  } while (0)

}  // namespace gg
