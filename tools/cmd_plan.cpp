// charm commlist | plan | validate | show
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <limits>
#include <sstream>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/comm_list.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"
#include "tools/cli_common.hpp"
#include "tools/plan_flags.hpp"

namespace charm::cli {
namespace {

void register_commlist(CLI::App& app) {
  struct Opts {
    int ranks = 8;
    bool json = false;
    std::string max_memory;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("commlist", "print GenerateCommList (paper Algorithm 1) for every rank");
  sub->add_option("--ranks,-n", o->ranks, "group size (a power of two)")->required();
  sub->add_flag("--json", o->json, "JSON output");
  add_max_memory(*sub, o->max_memory);
  sub->callback([o] {
    if (!sched::is_power_of_two(o->ranks) || o->ranks > (1 << 20))
      fail(Error{"--ranks",
                 fmt::format("GenerateCommList needs a power-of-two group size up to 2^20, got {}", o->ranks)});
    // Every rank lists every other rank once: ranks^2 entries, about 8 bytes each as text, 60 in JSON.
    check_budget(memory_budget(o->max_memory), double(o->ranks) * double(o->ranks) * (o->json ? 60 : 8),
                 fmt::format("the lists of {} ranks", o->ranks), "--ranks");
    nlohmann::json lists = nlohmann::json::array();
    for (int r = 0; r < o->ranks; ++r) {
      const auto levels = sched::generate_comm_list(r, o->ranks);
      if (o->json) {
        nlohmann::json lv = nlohmann::json::array();
        for (const auto& l : levels) lv.push_back({{"kv", l.kv}, {"q", l.q}});
        lists.push_back({{"rank", r}, {"levels", lv}});
      } else {
        std::string line = fmt::format("rank {:>4}:", r);
        for (std::size_t i = 0; i < levels.size(); ++i)
          line += fmt::format("  L{} kv={} q={}", i + 1, fmt::join(levels[i].kv, ","), fmt::join(levels[i].q, ","));
        std::cout << line << "\n";
      }
    }
    if (o->json) std::cout << nlohmann::json{{"ranks", o->ranks}, {"lists", lists}}.dump() << "\n";
  });
}

void register_plan(CLI::App& app) {
  struct Opts {
    PlanFlags plan;
    std::string out, dot, listing, gpus;
    bool no_validate = false;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("plan", "compile an algorithm into a plan (DAG) and write it as JSON");
  o->plan.add(*sub);
  sub->add_option("--out,-o", o->out, "plan JSON file")->required();
  sub->add_option("--dot", o->dot, "also write Graphviz DOT");
  sub->add_option("--listing", o->listing, "also write the per-rank text listing");
  sub->add_flag("--no-validate", o->no_validate, "skip validation of the plan");
  sub->add_option("--gpus", o->gpus,
                  "record where the ranks run: rank r on the r-th GPU listed (e.g. 0,2,4,6); simulate places the plan "
                  "so on its topology");
  sub->callback([o] {
    check_output_paths({{"--out", o->out}, {"--dot", o->dot}, {"--listing", o->listing}});
    // The JSON copy of a plan takes about 2 kB an op (nlohmann's tree and the text; measured
    // 1.6 GB for a 785k-op ring plan).
    auto plan = o->plan.make(2000, "the plan and its JSON");
    if (!o->gpus.empty()) {
      plan.gpus = unwrap(parse_gpu_list(o->gpus, "--gpus", 1 << 24, "a GPU index"));
      if (plan.gpus.size() != std::size_t(plan.ranks))
        fail(Error{"--gpus", fmt::format("lists {} GPUs; the plan has {} ranks", plan.gpus.size(), plan.ranks)});
    }
    if (!o->no_validate) {
      auto rep = sched::validate(plan);
      if (!rep.ok()) throw RuntimeFailure{"internal: the planner produced an invalid plan: " + rep.summary(plan)};
    }
    write_file_atomic(o->out, ir::plan_to_json(plan).dump(1) + "\n");
    if (!o->dot.empty()) {
      std::ostringstream os;
      ir::write_dot(plan, os);
      write_file_atomic(o->dot, os.str());
    }
    if (!o->listing.empty()) {
      std::ostringstream os;
      ir::write_listing(plan, os);
      write_file_atomic(o->listing, os.str());
    }
    std::cout << fmt::format("wrote {}: {} {} ranks={} domains={} ops={}\n", o->out, plan.algo,
                             to_string(plan.workload.pass), plan.ranks, plan.domains, plan.size());
  });
}

void register_validate(CLI::App& app) {
  struct Opts {
    std::string file;
    bool all = false;
    std::string max_memory;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("validate", "check a plan: acyclic, matched, deadlock-free, hazard-free, complete");
  sub->add_option("plan", o->file, "plan JSON file")->required();
  sub->add_flag("--all", o->all, "list every violation found, not just the first");
  add_max_memory(*sub, o->max_memory);
  sub->callback([o] {
    check_plan_file_budget(memory_budget(o->max_memory), o->file, "plan");
    auto plan = unwrap(ir::load_plan(o->file));
    sched::ValidateOptions opt;
    if (o->all) opt.max_violations = std::numeric_limits<std::size_t>::max();  // every one, as the flag says
    auto rep = sched::validate(plan, opt);
    std::cout << rep.summary(plan) << "\n";
    if (!rep.ok()) {
      if (o->all)
        for (std::size_t i = 1; i < rep.violations.size(); ++i)
          std::cout << fmt::format("invalid: [{}] {}\n", rep.violations[i].rule, rep.violations[i].message);
      exit_code() = kExitInvalid;
    }
  });
}

void register_show(CLI::App& app) {
  struct Opts {
    std::string file;
    int rank = -1;
    std::string max_memory;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("show", "print a plan's per-rank listing");
  sub->add_option("plan", o->file, "plan JSON file")->required();
  sub->add_option("--rank", o->rank, "only this rank");
  add_max_memory(*sub, o->max_memory);
  sub->callback([o, sub] {
    check_plan_file_budget(memory_budget(o->max_memory), o->file, "plan");
    auto plan = unwrap(ir::load_plan(o->file));
    // -1 stands for "every rank" inside; given, it names a rank.
    if ((sub->count("--rank") > 0 && o->rank < 0) || o->rank >= plan.ranks)
      fail(Error{"--rank", fmt::format("must be in [0, {}) for this plan, got {}", plan.ranks, o->rank)});
    ir::write_listing(plan, std::cout, o->rank);
  });
}

const Registrar commlist_registered{"commlist", register_commlist};
const Registrar plan_registered{"plan", register_plan};
const Registrar validate_registered{"validate", register_validate};
const Registrar show_registered{"show", register_show};

}  // namespace
}  // namespace charm::cli
