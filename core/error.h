// Typed exceptions. Every message names the op, the argument and the offending values,
// e.g. "gg::matmul: shapes cannot be multiplied: a is [2, 3], b is [4, 5]".
#pragma once
#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

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
// One piece of a message, written as an ostream with default flags writes it (bool as 1 or 0,
// characters as characters, floating point as printf's %g). Numbers go through std::to_chars,
// not through a stream and its locale's facets: in a Python process the library may run beside
// another copy of the C++ runtime, and a stream's number formatting there has crashed.
template <typename T>
void append_piece(std::string& out, const T& x) {
  if constexpr (std::is_same_v<T, bool>) {
    out += x ? '1' : '0';
  } else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char> ||
                       std::is_same_v<T, unsigned char>) {
    out += static_cast<char>(x);
  } else if constexpr (std::is_integral_v<T> || std::is_floating_point_v<T>) {
    char buf[64];
    std::to_chars_result r;
    if constexpr (std::is_integral_v<T>) {
      r = std::to_chars(buf, buf + sizeof buf, x);
    } else {
      r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::general, 6);
    }
    out.append(buf, r.ptr);
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out += std::string_view(x);
  } else {
    std::ostringstream os;
    os << x;
    out += os.str();
  }
}

template <typename... Args>
std::string concat(const Args&... args) {
  std::string out;
  (append_piece(out, args), ...);
  return out;
}
}  // namespace detail

// GG_CHECK(cond, ErrorType, "gg::op: ", pieces...) throws ErrorType with the pieces concatenated.
#define GG_CHECK(cond, ErrorType, ...)                                  \
  do {                                                                  \
    if (!(cond)) throw ErrorType(::gg::detail::concat(__VA_ARGS__));    \
  } while (0)

}  // namespace gg
