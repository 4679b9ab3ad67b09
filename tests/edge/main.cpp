// Runs every registered edge case in its own child process (fork), with a time limit, and
// prints one line per failure and a summary line with the number of cases. Flags:
//   --list            print the case names
//   --filter TEXT     run only cases whose name contains TEXT
//   --no-fork         run in-process (for a debugger; a crash then ends the run)
//   --timeout SECONDS per case (default 60)
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "harness.h"

namespace gg::edge {
std::vector<Case>& registry() {
  static std::vector<Case> cases;
  return cases;
}
}  // namespace gg::edge

namespace {

int run_in_process(const gg::edge::Case& c) {
  try {
    c.body();
    return 0;
  } catch (const gg::edge::CaseFailure& f) {
    std::fprintf(stderr, "FAILED %s: %s\n", c.name.c_str(), f.what.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED %s: unexpected exception %s: %s\n", c.name.c_str(), typeid(e).name(), e.what());
  } catch (...) {
    std::fprintf(stderr, "FAILED %s: unexpected non-std exception\n", c.name.c_str());
  }
  return 1;
}

// 0: passed; otherwise the failure was printed.
int run_forked(const gg::edge::Case& c, int timeout_s) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    return 1;
  }
  if (pid == 0) {
    alarm(static_cast<unsigned>(timeout_s));  // SIGALRM ends a hung case
    const int rc = run_in_process(c);
    std::fflush(stderr);
    std::_Exit(rc);  // no static destructors or sanitizer leak pass per child
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 0) return 0;
    if (WEXITSTATUS(status) != 1)
      std::fprintf(stderr, "FAILED %s: exited with status %d\n", c.name.c_str(), WEXITSTATUS(status));
    return 1;
  }
  const int sig = WTERMSIG(status);
  std::fprintf(stderr, "FAILED %s: %s (signal %d)\n", c.name.c_str(),
               sig == SIGALRM ? "timed out" : strsignal(sig), sig);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string filter;
  bool fork_cases = true, list = false;
  int timeout_s = 60;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--list") list = true;
    else if (a == "--no-fork") fork_cases = false;
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--timeout" && i + 1 < argc) timeout_s = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--list] [--filter TEXT] [--no-fork] [--timeout S]\n", argv[0]);
      return 2;
    }
  }
  int run = 0, failed = 0;
  for (const auto& c : gg::edge::registry()) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    if (list) {
      std::printf("%s\n", c.name.c_str());
      continue;
    }
    ++run;
    failed += fork_cases ? run_forked(c, timeout_s) : run_in_process(c);
  }
  if (list) return 0;
  std::printf("gradgrad edge cases: %d run, %d passed, %d failed\n", run, run - failed, failed);
  return failed == 0 && run > 0 ? 0 : 1;
}
