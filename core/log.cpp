#include "core/log.h"

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <set>

namespace gg::logging {
namespace {
spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto lg = spdlog::stderr_color_mt("gradgrad");
    lg->set_level(spdlog::level::warn);
    lg->set_pattern("[%n %l] %v");
    spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL overrides the default
    if (const char* env = std::getenv("SPDLOG_LEVEL")) lg->set_level(spdlog::level::from_str(env));
    return lg;
  }();
  return *l;
}
}  // namespace

void debug(const std::string& msg) { logger().debug(msg); }
void info(const std::string& msg) { logger().info(msg); }
void warn(const std::string& msg) { logger().warn(msg); }

void warn_once(const std::string& key, const std::string& msg) {
  static std::mutex m;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(m);
  if (seen.insert(key).second) logger().warn(msg);
}

}  // namespace gg::logging
