// Logging through spdlog, kept behind this small interface so public headers (and .cu files)
// never include spdlog. The level comes from the SPDLOG_LEVEL environment variable
// (e.g. SPDLOG_LEVEL=debug); the default is "warn".
#pragma once
#include <string>

namespace gg::logging {

void debug(const std::string& msg);
void info(const std::string& msg);
void warn(const std::string& msg);
// Logs `msg` as a warning the first time `key` is seen in this process.
void warn_once(const std::string& key, const std::string& msg);

}  // namespace gg::logging
