// charm._core's argument readers and JSON <-> Python conversion: every argument is checked here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "python/module_support.hpp"
#include "scheduler/planners/algorithms.hpp"
#include "support/json_text.hpp"
#include "support/number_text.hpp"

namespace charm::python {

// ---- JSON <-> Python ----

py::object to_py(const json& j) {
  switch (j.type()) {
  case json::value_t::null:
    return py::none();
  case json::value_t::boolean:
    return py::bool_(j.get<bool>());
  case json::value_t::number_integer:
    return py::int_(j.get<std::int64_t>());
  case json::value_t::number_unsigned:
    return py::int_(j.get<std::uint64_t>());
  case json::value_t::number_float:
    return py::float_(j.get<double>());
  case json::value_t::string:
    return py::str(j.get_ref<const std::string&>());
  case json::value_t::array: {
    py::list l;
    for (const auto& e : j) l.append(to_py(e));
    return l;
  }
  case json::value_t::object: {
    py::dict d;
    for (const auto& [k, v] : j.items()) d[py::str(k)] = to_py(v);
    return d;
  }
  default:
    return py::none();
  }
}
namespace {

/// A Python value's type name, for messages.
std::string type_name(py::handle h) { return py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>(); }

/// A dict or list holds at most this many values in all: one that holds another many times over counts it
/// each time (x = [x, x] twenty times is a million), so a few lines of Python cannot ask for gigabytes.
/// A plan of about 900,000 ops fits (some 18 values an op); a larger one goes as a file.
constexpr std::size_t kMaxJsonValues = std::size_t{1} << 24;

/// Python values into JSON, bounded as the JSON reader bounds a file: arrays and objects at most
/// kMaxJsonDepth deep (a dict that holds itself ends there instead of recursing until the stack runs
/// out), and kMaxJsonValues values. Numbers as a file's are read: finite, within 64 bits.
json from_py_value(py::handle h, const std::string& where, std::size_t depth, std::size_t& values) {
  if (++values > kMaxJsonValues)
    fail(Error{where, fmt::format("more than {} values (a list or dict held many times counts each time; pass a "
                                  "larger plan as a file)",
                                  kMaxJsonValues)});
  if (h.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::isinstance<py::int_>(h)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow == 0) return std::int64_t{v};
    const unsigned long long u = PyLong_AsUnsignedLongLong(h.ptr());
    if (!PyErr_Occurred()) return std::uint64_t{u};
    PyErr_Clear();
    fail(Error{where, "an int past 64 bits is not a JSON number"});
  }
  if (py::isinstance<py::float_>(h)) {
    const double v = h.cast<double>();
    if (!std::isfinite(v)) fail(Error{where, fmt::format("JSON has no NaN or infinity, got {}", v)});
    return v;
  }
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  const bool dict = py::isinstance<py::dict>(h);
  if (!dict && !py::isinstance<py::list>(h) && !py::isinstance<py::tuple>(h))
    fail(Error{where, fmt::format("a {} is not a JSON value", type_name(h))});
  if (depth == kMaxJsonDepth)
    fail(Error{where, fmt::format("arrays and objects nested more than {} deep (a dict or list that holds itself?)",
                                  kMaxJsonDepth)});
  if (dict) {
    json o = json::object();
    for (auto [k, v] : h.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k)) fail(Error{where, "keys of a JSON object must be strings"});
      const auto key = k.cast<std::string>();
      o[key] = from_py_value(v, where + "." + key, depth + 1, values);
    }
    return o;
  }
  json a = json::array();
  std::size_t i = 0;
  for (auto v : h) a.push_back(from_py_value(v, fmt::format("{}[{}]", where, i++), depth + 1, values));
  return a;
}

}  // namespace

json from_py(py::handle h, const std::string& where) {
  std::size_t values = 0;
  return from_py_value(h, where, 0, values);
}

// ---- arguments ----
//
// Every argument is read and checked here, with the GIL held, before the work starts: the work runs with
// the GIL released, where reading a Python object would crash the process. A wrong type is a TypeError
// naming the keyword; a value the command would refuse is a ValueError naming the flag, as the command does.

bool given(const py::object& o) { return !o.is_none(); }
namespace {

/// The keyword of a flag: --head-dim is head_dim, --pass is pass_.
std::string keyword(const std::string& flag) {
  std::string k = flag.starts_with("--") ? flag.substr(2) : flag;
  std::replace(k.begin(), k.end(), '-', '_');
  return k == "pass" ? "pass_" : k;
}

}  // namespace

[[noreturn]] void type_error(const std::string& flag, const std::string& expected, py::handle got) {
  std::string shown = py::repr(got).cast<std::string>();
  if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
  throw py::type_error(fmt::format("{}: expected {}, got {} ({})", keyword(flag), expected, shown, type_name(got)));
}

/// A whole number (an int, not a bool) that fits the flag's 32 bits.
int int_arg(const py::object& o, const std::string& flag) {
  if (!py::isinstance<py::int_>(o) || py::isinstance<py::bool_>(o)) type_error(flag, "an int", o);
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(o.ptr(), &overflow);
  if (overflow != 0 || v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    fail(Error{flag, "must fit 32 bits"});
  return int(v);
}

/// A finite real number (an int or a float, not a bool).
double real_arg(const py::object& o, const std::string& flag) {
  if (!(py::isinstance<py::int_>(o) || py::isinstance<py::float_>(o)) || py::isinstance<py::bool_>(o))
    type_error(flag, "a number", o);
  const double v = PyFloat_AsDouble(o.ptr());
  if (v == -1.0 && PyErr_Occurred()) PyErr_Clear();  // an int past a double's range
  if (!std::isfinite(v)) fail(Error{flag, "must be a finite number"});
  return v;
}

bool bool_arg(const py::object& o, const std::string& flag) {
  if (!py::isinstance<py::bool_>(o)) type_error(flag, "True or False", o);
  return o.cast<bool>();
}

/// A path given as str or os.PathLike (or, where `dict_too`, a dict, which is no path); nullopt for None.
std::optional<std::string> path_arg(const py::object& o, const std::string& flag, bool dict_too) {
  if (!given(o) || (dict_too && py::isinstance<py::dict>(o))) return std::nullopt;
  if (!py::isinstance<py::str>(o) && !py::hasattr(o, "__fspath__"))
    type_error(flag, dict_too ? "a path (str or os.PathLike) or a dict" : "a path (str or os.PathLike)", o);
  auto p = py::module_::import("os").attr("fspath")(o).cast<std::string>();
  // The C library would stop at the NUL and read or write another file.
  if (p.empty() || p.find('\0') != std::string::npos)
    fail(Error{flag, p.empty() ? "the path is empty" : "the path holds a NUL byte"});
  return p;
}

/// A path that must be given: None is a TypeError, not "no file".
std::string required_path(const py::object& o, const std::string& flag, bool dict_too) {
  if (!given(o))
    type_error(flag, dict_too ? "a path (str or os.PathLike) or a dict" : "a path (str or os.PathLike)", o);
  return *path_arg(o, flag, dict_too);
}

/// A count or size as the command reads it ("26880", "4k"): an int or a str.
std::string size_text(const py::object& o, const std::string& flag) {
  if (py::isinstance<py::int_>(o) && !py::isinstance<py::bool_>(o)) return py::str(o).cast<std::string>();
  if (py::isinstance<py::str>(o)) return o.cast<std::string>();
  type_error(flag, "an int or a size like '4k'", o);
}

std::string text_arg(const py::object& o, const std::string& flag) {
  if (!py::isinstance<py::str>(o)) type_error(flag, "a str", o);
  return o.cast<std::string>();
}

/// A list flag: a str (comma-separated, as on the command line), or a list/tuple of items.
std::vector<std::string> list_items(const py::object& o, const std::string& flag, bool sizes) {
  if (py::isinstance<py::str>(o) || (sizes && py::isinstance<py::int_>(o)))
    return charm::split_list(sizes ? size_text(o, flag) : text_arg(o, flag));
  if (!py::isinstance<py::list>(o) && !py::isinstance<py::tuple>(o))
    type_error(flag, sizes ? "an int, a str or a list of them" : "a str or a list of str", o);
  std::vector<std::string> out;
  for (auto v : o) {
    const py::object item = py::reinterpret_borrow<py::object>(v);
    out.push_back(sizes ? size_text(item, flag) : text_arg(item, flag));
  }
  return out;
}

std::string algos_text(const py::object& o) {
  if (!given(o)) return {};
  std::string s;
  for (const auto& a : list_items(o, "--algos")) s += (s.empty() ? "" : ",") + a;
  if (s.empty()) fail(Error{"--algos", "names no algorithm"});
  return s;
}

std::string algo_arg(const py::object& o) {
  if (!given(o)) return std::string(sched::default_algorithm());
  auto a = sched::resolve_algorithm(text_arg(o, "--algo"));
  if (!a) fail(a.error());
  return *a;
}

/// The balanced layout's solver: solve_ms= and solve_seed=, as --solve-ms and --solve-seed.
sim::ChunkSolveOptions solve_args(const py::object& solve_ms, const py::object& solve_seed) {
  const double ms = given(solve_ms) ? real_arg(solve_ms, "--solve-ms") : sim::ChunkSolveOptions{}.budget_ms;
  std::uint64_t seed = sim::ChunkSolveOptions{}.seed;
  if (given(solve_seed)) {
    const int s = int_arg(solve_seed, "--solve-seed");
    if (s < 0) fail(Error{"--solve-seed", fmt::format("must be >= 0, got {}", s)});
    seed = std::uint64_t(s);
  }
  return unwrap(app::chunk_solve_options(ms, seed));
}

}  // namespace charm::python
