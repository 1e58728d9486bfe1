#pragma once
// Reading an input file (a plan, a topology, measurements, a log) whole.
//
// Only regular files are read. A FIFO with no writer would block the open, a
// device like /dev/zero never ends, /proc files misreport their size; none of
// them is a plan or a topology. The file is looked at before it is opened (so a
// device is never opened at all), opened non-blocking, and looked at again
// through the descriptor, so a file swapped in between is caught too. What is
// read is capped at kMaxInputBytes.

#include <cstdint>
#include <string>
#include <string_view>

#include "support/expected.hpp"

namespace charm {

/// The most an input file may hold: 1 GiB, far beyond any plan or topology, and
/// a bound on the memory a mistaken path can take.
inline constexpr std::uint64_t kMaxInputBytes = std::uint64_t{1} << 30;

/// The text of `path`. Errors name the path: "is a folder, not {what}" (what: "a
/// plan file"), "{cannot_open}: <errno text>" when it cannot be opened, "is a FIFO,
/// not {what}", "is N bytes; inputs are at most 1 GiB", "cannot read: <errno text>".
[[nodiscard]] Expected<std::string> read_input_file(const std::string& path, std::string_view what,
                                                    std::string_view cannot_open);

/// "a FIFO", "a character device", ... (from a stat mode), for messages about files.
[[nodiscard]] std::string_view file_kind(unsigned mode);

}  // namespace charm
