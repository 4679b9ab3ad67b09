// A fork-per-case test harness for the edge-case suite. Each case runs in a child process with
// a time limit, so a crash (signal), a hang (timeout) or an unexpected exception is recorded as
// that case's failure and the run goes on. Checks throw CaseFailure; the child prints it.
#pragma once
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "gradgrad.h"

namespace gg::edge {

struct Case {
  std::string name;
  std::function<void()> body;
};
std::vector<Case>& registry();
struct Register {
  Register(std::string name, std::function<void()> body) { registry().push_back({std::move(name), std::move(body)}); }
};
inline void add_case(std::string name, std::function<void()> body) { registry().push_back({std::move(name), std::move(body)}); }

struct CaseFailure {
  std::string what;
};
[[noreturn]] inline void fail(const std::string& what, const char* file, int line) {
  throw CaseFailure{std::string(file) + ":" + std::to_string(line) + ": " + what};
}

// Runs `f` and requires an exception of exactly type E whose message contains `needle`.
template <typename E, typename F>
void expect_throws(F&& f, const std::string& needle, const char* expr, const char* file, int line) {
  try {
    f();
  } catch (const E& e) {
    if (typeid(e) != typeid(E))
      fail(std::string(expr) + " threw " + typeid(e).name() + ", expected exactly " + typeid(E).name() + ": " + e.what(),
           file, line);
    if (std::string(e.what()).find(needle) == std::string::npos)
      fail(std::string(expr) + ": message \"" + e.what() + "\" lacks \"" + needle + "\"", file, line);
    return;
  } catch (const std::exception& e) {
    fail(std::string(expr) + " threw " + typeid(e).name() + " (" + e.what() + "), expected " + typeid(E).name(), file,
         line);
  }
  fail(std::string(expr) + " did not throw, expected " + typeid(E).name() + " with \"" + needle + "\"", file, line);
}

inline bool same_value(double a, double b, double tol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= tol * (1 + std::abs(b));
}

inline std::string values_str(const std::vector<double>& v) {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < v.size() && i < 16; ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > 16) os << ", ...";
  return os.str() + "}";
}

inline void expect_values(const Tensor& t, const std::vector<double>& want, double tol, const char* expr,
                          const char* file, int line) {
  std::vector<double> got = t.to_vector<double>();
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < got.size(); ++i) ok = same_value(got[i], want[i], tol);
  if (!ok) fail(std::string(expr) + " = " + values_str(got) + ", expected " + values_str(want), file, line);
}

}  // namespace gg::edge

#define EDGE_CAT2(a, b) a##b
#define EDGE_CAT(a, b) EDGE_CAT2(a, b)
// CASE("name") { body }: one case.
#define CASE(name)                                                              \
  static void EDGE_CAT(edge_case_, __LINE__)();                                 \
  static ::gg::edge::Register EDGE_CAT(edge_reg_, __LINE__)(name, EDGE_CAT(edge_case_, __LINE__)); \
  static void EDGE_CAT(edge_case_, __LINE__)()

#define THROWS(E, needle, ...) \
  ::gg::edge::expect_throws<E>([&] { (void)(__VA_ARGS__); }, needle, #__VA_ARGS__, __FILE__, __LINE__)
#define CHECK(cond) \
  do {              \
    if (!(cond)) ::gg::edge::fail("CHECK(" #cond ") failed", __FILE__, __LINE__); \
  } while (0)
#define CHECK_EQ(a, b)                                                                          \
  do {                                                                                          \
    const auto& edge_a = (a);                                                                   \
    const auto& edge_b = (b);                                                                   \
    if (!(edge_a == edge_b)) {                                                                  \
      std::ostringstream edge_os;                                                               \
      edge_os << #a << " == " << #b << " failed";                                               \
      ::gg::edge::fail(edge_os.str(), __FILE__, __LINE__);                                      \
    }                                                                                           \
  } while (0)
#define CHECK_SHAPE(t, ...) \
  do {                      \
    if ((t).shape() != ::gg::Shape(__VA_ARGS__))                                                        \
      ::gg::edge::fail(std::string(#t) + " has shape " + ::gg::shape_str((t).shape()) + ", expected " + \
                       ::gg::shape_str(::gg::Shape(__VA_ARGS__)), __FILE__, __LINE__);                 \
  } while (0)
#define CHECK_VALUES(t, ...) ::gg::edge::expect_values(t, std::vector<double>(__VA_ARGS__), 1e-12, #t, __FILE__, __LINE__)
#define CHECK_NEAR_VALUES(t, tol, ...) \
  ::gg::edge::expect_values(t, std::vector<double>(__VA_ARGS__), tol, #t, __FILE__, __LINE__)
