#pragma once
// Drawing a figure with gnuplot, in bounded time and without leaving a file behind.
//
// The script writes the figure to gnuplot's stdout (`set output` with no file), so no path of
// the user's reaches gnuplot's parser, where a line break or a quote in it would name another
// file. The script, gnuplot's messages and the figure go to a private temporary folder that is
// removed on every path (an interrupt included); the caller writes the figure where it belongs.

#include <atomic>
#include <string>

namespace charm::cli {

struct Drawing {
  std::string image;    // the figure's bytes, when drawn
  std::string failure;  // why not, for a line on stderr; empty when drawn
};

/// Runs `gnuplot` on `script`. Past `timeout_s` seconds (0: no limit), or once `cancel` is set,
/// gnuplot is killed and the failure says so.
[[nodiscard]] Drawing draw_with_gnuplot(const std::string& gnuplot, const std::string& script, double timeout_s,
                                        const std::atomic<bool>& cancel);

}  // namespace charm::cli
