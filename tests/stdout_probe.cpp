// Preloaded into `charm` (LD_PRELOAD) by reliability_test, as a library that keeps the FILE* it
// found in `stdout` and flushes it while the process exits (cuBLASLt's exit handler does). Such a
// library needs that stream alive until the end: the probe watches fclose (it comes first in the
// symbol lookup) and, from its destructor, after main has returned, says on stderr and exits with 7
// when a stream that `stdout` named was closed; otherwise it writes to stdout and flushes it.
// (A sanitizer build's own fclose interceptor binds first, and the probe sees nothing there.)
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>

namespace {

bool g_closed_stdout = false;

__attribute__((destructor)) void at_exit() {
  if (g_closed_stdout) {
    static const char kMessage[] = "stdout_probe: the stream stdout named was closed before the process exited\n";
    (void)!::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    ::_exit(7);
  }
  std::fputs("stdout_probe: written at exit\n", stdout);
  std::fflush(stdout);
}

}  // namespace

extern "C" int fclose(FILE* f) {
  using Fclose = int (*)(FILE*);
  static const auto real = reinterpret_cast<Fclose>(::dlsym(RTLD_NEXT, "fclose"));
  if (f == stdout) g_closed_stdout = true;
  return real(f);
}
