// The progress line on stderr (ProgressLine).
#include "tools/cli_support.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace charm::cli {

ProgressLine::ProgressLine(bool enabled)
    : enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0),
      t0_(std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count()) {}

double ProgressLine::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - t0_;
}

bool ProgressLine::due() {
  const double el = elapsed();
  if (el < 1.0 || el - last_ < (tty_ ? 0.1 : 5.0)) return false;
  last_ = el;
  return true;
}

void ProgressLine::draw(const std::string& line) {
  if (tty_)
    std::fprintf(stderr, "\r%-100s", line.c_str());
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::finish() {
  if (drawn_ && tty_) std::fputs("\n", stderr);
  drawn_ = false;
}

}  // namespace charm::cli
