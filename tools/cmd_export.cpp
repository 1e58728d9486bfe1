// charm export --chakra DIR PLAN.json: a plan file (charm plan -o) as Chakra execution traces,
// one file per rank (DIR/PREFIX.RANK.et), for ASTRA-sim and the tools built on Chakra. With a
// topology, every compute node carries the time the simulator's compute model gives it.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <filesystem>

#include "tools/cli_common.hpp"
#if CHARM_HAVE_CHAKRA
#include "scheduler/chakra/chakra.hpp"
#include "scheduler/ir/plan_io.hpp"
#include "sim/evaluate.hpp"
#include "sim/varlen_tiles.hpp"
#include "topologies/topology_json.hpp"
#endif

namespace charm::cli {
namespace {

#if CHARM_HAVE_CHAKRA

/// The files of `dir` that the export writes (PREFIX.RANK.et, and PREFIX.RANK.et.tmp on its way)
/// and that exist now: only a file that exists can be an input the export would replace.
std::vector<std::string> existing_outputs(const std::string& dir, const std::string& prefix, int ranks) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix + ".", 0) != 0) continue;
    int rank = -1;
    const char* digits = name.data() + prefix.size() + 1;
    std::from_chars(digits, name.data() + name.size(), rank);
    const std::string et = fmt::format("{}.{}.et", prefix, rank);
    if (rank >= 0 && rank < ranks && (name == et || name == et + ".tmp")) names.push_back(name);
  }
  return names;
}

void register_export(CLI::App& app) {
  struct Opts {
    std::string plan, chakra, prefix = "charm", topology;  // the tool's name, not the algorithm
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand(
      "export", "a plan file as Chakra execution traces (one protobuf file per rank) for ASTRA-sim and its tools");
  sub->footer("Example: charm plan --algo charm --ranks 16 --domains 2 --seq 64k --heads 16 --head-dim 128 -o p.json\n"
              "         charm export --chakra et/ p.json -t topologies/h100-2x8.json\n"
              "         (ASTRA-sim: --workload-configuration=et/charm)");
  sub->add_option("plan", o->plan, "plan JSON (charm plan -o)")->required();
  sub->add_option("--chakra", o->chakra, "folder for the traces: FOLDER/PREFIX.RANK.et")->required();
  sub->add_option("--prefix", o->prefix, "file name prefix")->capture_default_str();
  sub->add_option("--topology,-t", o->topology,
                  "topology JSON: compute nodes carry the compute model's time (duration_micros); without it, 0");
  sub->callback([o] {
    if (o->prefix.empty() || o->prefix.find('/') != std::string::npos)
      fail(Error{"--prefix", fmt::format("'{}' must be a file name, not empty and without '/'", o->prefix)});
    if (std::error_code ec; std::filesystem::exists(o->chakra, ec) && !std::filesystem::is_directory(o->chakra, ec))
      fail(Error{"--chakra",
                 fmt::format("{} is a file, not a folder: the traces go into a folder, one file per rank", o->chakra)});
    FlagPaths inputs{{"plan", o->plan}};
    if (!o->topology.empty()) inputs.emplace_back("--topology", o->topology);
    check_command_files({inputs, {}, {{"--chakra", o->chakra, {}}}});
    const ir::Plan plan = unwrap(ir::load_plan(o->plan));
    check_command_files({inputs, {}, {{"--chakra", o->chakra, existing_outputs(o->chakra, o->prefix, plan.ranks)}}});
    chakra::ExportOptions opt;
    opt.prefix = o->prefix;
    std::optional<topo::Topology> t;
    std::optional<sim::ComputeModel> model;
    std::optional<sim::DocumentShards> shards;  // the plan's shards cut by document, for its varlen blocks
    if (!o->topology.empty()) {
      auto loaded = topo::load_topology(o->topology);
      if (!loaded) fail(Error{"--topology", loaded.error().message()});
      t.emplace(std::move(loaded).value());
      model.emplace(sim::compute_model_for(*t, plan.workload));
      shards.emplace(plan.workload, plan.group_ranks());
      opt.seconds = [&](ir::OpId id) { return model->op_seconds(plan.op(id), plan.workload, &*shards); };
    }
    if (auto st = chakra::write_chakra(plan, o->chakra, opt); !st) throw RuntimeFailure{st.error().message()};
    std::printf("wrote %d Chakra traces (%zu nodes) to %s: %s .. %s\n", plan.ranks, plan.size(), o->chakra.c_str(),
                std::filesystem::path(chakra::et_path(o->chakra, o->prefix, 0)).filename().c_str(),
                std::filesystem::path(chakra::et_path(o->chakra, o->prefix, plan.ranks - 1)).filename().c_str());
  });
}

#else

/// Built without protobuf: the command exists so that it can say what is missing.
void register_export(CLI::App& app) {
  auto* sub = app.add_subcommand("export", "a plan file as Chakra execution traces (needs protobuf: not built)");
  sub->allow_extras();
  sub->callback([] {
    fail(Error{"export", "this charm was built without protobuf; install libprotobuf-dev and protobuf-compiler "
                         "(scripts/setup.sh) and rebuild"});
  });
}

#endif

const Registrar export_registered{"export", register_export};

}  // namespace
}  // namespace charm::cli
