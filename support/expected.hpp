#pragma once
// Recoverable errors travel as values (LLVM style); only `main` maps them to exit codes.

#include <string>
#include <utility>
#include <variant>

#include "support/field.hpp"

namespace charm {

/// What kind of error it is, for the code that must tell errors apart (never by their text).
enum class ErrorKind {
  Input,        // the user's input is wrong: a flag, a file, a field (the default)
  RunFailed,    // the run itself failed: a simulated plan that deadlocks
  Interrupted,  // a signal stopped the work
  PeerFailed,   // this rank stopped because another failed first: that one's error is the one to report
};

/// An error for the user: `where` names the file or JSON path, or `field` the request's field (the flag that
/// set it), and `what` says what is wrong.
struct Error {
  Error() = default;
  Error(std::string where_, std::string what_, ErrorKind kind_ = ErrorKind::Input)
      : where(std::move(where_)), what(std::move(what_)), kind(kind_) {}
  Error(Field field_, std::string what_, ErrorKind kind_ = ErrorKind::Input)
      : what(std::move(what_)), kind(kind_), field(field_) {}
  std::string where;
  std::string what;
  ErrorKind kind = ErrorKind::Input;
  Field field = Field::None;
  /// "where: what", "--flag: what" or "what".
  [[nodiscard]] std::string message() const {
    if (!where.empty()) return where + ": " + what;
    if (field != Field::None) return std::string(flag_name(field)) + ": " + what;
    return what;
  }
};

template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Expected(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  [[nodiscard]] T& value() & { return std::get<0>(v_); }
  [[nodiscard]] const T& value() const& { return std::get<0>(v_); }
  [[nodiscard]] T&& value() && { return std::get<0>(std::move(v_)); }
  [[nodiscard]] const Error& error() const { return std::get<1>(v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Error> v_;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : error_(std::move(e)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  [[nodiscard]] bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  [[nodiscard]] const Error& error() const { return error_; }
  static Status success() { return {}; }

 private:
  Error error_;
  bool ok_ = true;
};

/// Broken invariants (programming errors) abort at once with file and line.
[[noreturn]] void invariant_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace charm

/// `lhs = *expr` (a variable or a field), or return expr's error from the enclosing function.
#define CHARM_TRY_ASSIGN(lhs, expr)                                                                                    \
  do {                                                                                                                 \
    auto charm_tmp_ = (expr);                                                                                          \
    if (!charm_tmp_) return charm_tmp_.error();                                                                        \
    lhs = std::move(*charm_tmp_);                                                                                      \
  } while (0)

/// `auto var = *expr`, declared in the enclosing scope, or return expr's error from the enclosing function.
#define CHARM_TRY_LET(var, expr)                                                                                       \
  auto var##_ex = (expr);                                                                                              \
  if (!var##_ex) return var##_ex.error();                                                                              \
  auto var = std::move(var##_ex).value()

#define CHARM_ASSERT(cond, msg)                                                                                        \
  do {                                                                                                                 \
    if (!(cond)) ::charm::invariant_failed(#cond, __FILE__, __LINE__, (msg));                                          \
  } while (0)
