// charm._core: the `charm` command's plan, validate, simulate, compare, advise and sweep as Python
// functions. Each takes the command's flags as keyword arguments (--head-dim is head_dim, --pass is
// pass_) and calls the library the command calls: the cluster and the workload as the app's values
// (app::Cluster, app::WorkloadSpec: the same defaults, checks and messages as the flags that fill them), plans
// by app/plans.hpp, sim::simulate_request, sim::advise, sim::run_sweep. It links no CLI11. Results are the command's
// --json documents as dicts; compare and sweep give one flat dict per row, every row with the same keys. A usage error
// (cli::fail, an Error value) is a ValueError whose text is the line the command prints after "charm: error: "; a
// simulator failure (the command's exit 3) is a RuntimeError. A wrongly typed argument is a TypeError naming its
// keyword; every argument is read before the work releases the GIL (docs/errors.md, the Python module).
//
// This file holds the module definition; module_support.hpp declares what its parts share: module_args.cpp
// (argument readers, JSON <-> Python), module_run.cpp (plan, validate, simulate, compare) and
// module_search.cpp (advise, sweep, frameworks), each with its bindings.
#include <pybind11/pybind11.h>

#include "python/module_support.hpp"

PYBIND11_MODULE(_core, m) {
  using namespace charm::python;
  m.doc() = "CHARM+ planner and simulator: the charm command's library calls (see the charm package's docstring)";
  m.attr("__version__") = CHARM_VERSION;
  def_planning(m);
  def_simulation(m);
  def_search(m);
}
