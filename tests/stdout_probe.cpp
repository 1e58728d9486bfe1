// Preloaded into `charm` (LD_PRELOAD) by reliability_test: a library that writes to stdout while
// the process exits, as a library's teardown may. Its destructor runs after main has returned; it
// says on stderr, and exits with 7, when `stdout` is no longer the stream it was when the library
// was loaded (charm's checked stream is closed and freed by then), then writes to stdout.
#include <unistd.h>

#include <cstdio>

namespace {

FILE* g_at_load = nullptr;

__attribute__((constructor)) void at_load() { g_at_load = stdout; }

__attribute__((destructor)) void at_exit() {
  if (stdout != g_at_load) {
    static const char kMessage[] = "stdout_probe: stdout is not the stream it was at load\n";
    (void)!::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    ::_exit(7);
  }
  std::fputs("stdout_probe: written at exit\n", stdout);
  std::fflush(stdout);
}

}  // namespace
