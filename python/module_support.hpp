// Private header of the charm._core module: the argument, JSON and error helpers its parts share, and their bindings.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sim/chunk_solver.hpp"
#include "tools/app/cluster.hpp"
#include "tools/app/workload.hpp"
#include "tools/cli_support.hpp"
#include "topologies/topology_json.hpp"

namespace py = pybind11;
using nlohmann::json;

namespace charm::python {

using cli::fail;
using cli::unwrap;

// JSON <-> Python (module_args.cpp).
py::object to_py(const json& j);
json from_py(py::handle h, const std::string& where);

// Arguments (module_args.cpp).
bool given(const py::object& o);
[[noreturn]] void type_error(const std::string& flag, const std::string& expected, py::handle got);
int int_arg(const py::object& o, const std::string& flag);
double real_arg(const py::object& o, const std::string& flag);
bool bool_arg(const py::object& o, const std::string& flag);
std::optional<std::string> path_arg(const py::object& o, const std::string& flag, bool dict_too = false);
std::string required_path(const py::object& o, const std::string& flag, bool dict_too = false);
std::string size_text(const py::object& o, const std::string& flag);
std::string text_arg(const py::object& o, const std::string& flag);
std::vector<std::string> list_items(const py::object& o, const std::string& flag, bool sizes = false);
std::string algos_text(const py::object& o);
std::string algo_arg(const py::object& o);
sim::ChunkSolveOptions solve_args(const py::object& solve_ms, const py::object& solve_seed);

/// The workload flags; each argument None is the command's default.
struct WorkloadArgs {
  py::object batch, seq, heads, kv_heads, head_dim, dtype, layout, pass, causal, mask, model;
  [[nodiscard]] bool any_given() const {
    return given(batch) || given(seq) || given(heads) || given(kv_heads) || given(head_dim) || given(dtype) ||
           given(layout) || given(pass) || given(causal) || given(mask) || given(model);
  }
  [[nodiscard]] app::WorkloadSpec spec() const {
    app::WorkloadSpec f;
    if (given(batch)) f.batch = size_text(batch, "--batch");
    if (given(seq)) f.seq = size_text(seq, "--seq");
    if ((f.heads_given = given(heads))) f.heads = size_text(heads, "--heads");
    if ((f.kv_heads_given = given(kv_heads))) f.kv_heads = size_text(kv_heads, "--kv-heads");
    if ((f.head_dim_given = given(head_dim))) f.head_dim = size_text(head_dim, "--head-dim");
    if (given(dtype)) f.dtype = text_arg(dtype, "--dtype");
    if (given(layout)) {
      f.layout = text_arg(layout, "--layout");
      f.layout_given = true;
    }
    if (given(pass)) f.pass = text_arg(pass, "--pass");
    if (given(causal)) f.causal = bool_arg(causal, "--causal");
    if (given(mask)) f.mask = text_arg(mask, "--mask");
    if (given(model)) f.model = *path_arg(model, "--model");
    return f;
  }
};

#define CHARM_WORKLOAD_ARGS                                                                                            \
  py::arg("batch") = py::none(), py::arg("seq") = py::none(), py::arg("heads") = py::none(),                           \
  py::arg("kv_heads") = py::none(), py::arg("head_dim") = py::none(), py::arg("dtype") = py::none(),                   \
  py::arg("layout") = py::none(), py::arg("pass_") = py::none(), py::arg("causal") = py::none(),                       \
  py::arg("mask") = py::none(), py::arg("model") = py::none()

/// Where the cluster comes from: topology (a file, or its JSON as a dict) or uniform=True with its numbers.
struct ClusterArgs {
  py::object topology, uniform, ranks, bw_gbps, tflops, latency_us, hbm_gbps, domains, reserved_gb;

  [[nodiscard]] app::Cluster flags() const {
    app::Cluster f;
    f.uniform = given(uniform) && bool_arg(uniform, "--uniform");
    if (auto p = path_arg(topology, "--topology", /*dict_too=*/true)) f.topology = *p;
    if (given(ranks)) {
      f.ranks = int_arg(ranks, "--ranks");
      f.ranks_given = true;
    }
    if ((f.bw_given = given(bw_gbps))) f.bw_gbps = real_arg(bw_gbps, "--bw-gbps");
    if ((f.tflops_given = given(tflops))) f.tflops = real_arg(tflops, "--tflops");
    if ((f.latency_given = given(latency_us))) f.latency_us = real_arg(latency_us, "--latency-us");
    if ((f.hbm_given = given(hbm_gbps))) f.hbm_gbps = real_arg(hbm_gbps, "--hbm-gbps");
    if (given(reserved_gb)) f.reserved_gb = real_arg(reserved_gb, "--reserved-gb");
    if ((f.domains_given = given(domains))) {
      f.domains = int_arg(domains, "--domains");
      if (auto s = f.check_domains(); !s) fail(s.error());
    }
    return f;
  }
  /// The topology (app::Cluster::load): a file's, or the dict's document; what its reader read past on stderr.
  [[nodiscard]] topo::Topology get(app::Cluster& f) const {
    if (py::isinstance<py::dict>(topology)) f.topology_doc = from_py(topology, "topology");
    return cli::unwrap(f.load(cli::print_warning));
  }
};

#define CHARM_CLUSTER_ARGS                                                                                             \
  py::arg("topology") = py::none(), py::arg("uniform") = py::none(), py::arg("ranks") = py::none(),                    \
  py::arg("bw_gbps") = py::none(), py::arg("tflops") = py::none(), py::arg("latency_us") = py::none(),                 \
  py::arg("hbm_gbps") = py::none(), py::arg("domains") = py::none(), py::arg("reserved_gb") = py::none()

/// Runs `f` with the command's error path: a usage error is a ValueError, a runtime failure a RuntimeError.
template <class F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const cli::UsageError& e) {
    throw py::value_error(e.error.message());
  } catch (const cli::RuntimeFailure& e) {
    throw std::runtime_error(e.message);
  }
}

// The bindings, in the order the module adds them.
void def_planning(py::module_& m);    // module_run.cpp
void def_simulation(py::module_& m);  // module_run.cpp
void def_search(py::module_& m);      // module_search.cpp

}  // namespace charm::python
