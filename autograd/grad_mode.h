// Whether ops record onto the tape. Thread-local, like PyTorch's GradMode.
#pragma once

namespace gg {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Restores the previous mode on scope exit.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~AutoGradMode() { GradMode::set_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

// Inside this scope no op is recorded: use it for optimizer updates and evaluation.
struct NoGradGuard : AutoGradMode {
  NoGradGuard() : AutoGradMode(false) {}
};
struct EnableGradGuard : AutoGradMode {
  EnableGradGuard() : AutoGradMode(true) {}
};

}  // namespace gg
