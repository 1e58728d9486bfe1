// charm sweep — CCR what-if sweeps: every algorithm over the cross product of
// topologies and workload lists, in parallel, to CSV / JSON / a gnuplot figure.
//
// Outputs are written only once the sweep is complete, each through a
// temporary file and a rename: Ctrl-C (SIGINT) or SIGTERM stops the workers
// and leaves no file behind, half-written or otherwise.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"
#include "sim/simulator.hpp"
#include "sim/sweep.hpp"
#include "sim/sweep_plot.hpp"
#include "tools/app/sweep.hpp"
#include "tools/cli_common.hpp"
#include "tools/gnuplot_run.hpp"
#include "tools/mpi_job.hpp"
#include "topologies/topology_json.hpp"

namespace charm::cli {
namespace {

namespace fs = std::filesystem;

// ---- Ctrl-C: the handler only raises a flag; the sweep polls it ----

std::atomic<bool> g_cancel{false};
volatile std::sig_atomic_t g_signal = 0;
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_signal(int sig) {
  g_signal = sig;
  g_cancel.store(true);
}

/// The signal that stopped the sweep (SIGINT when cancelled otherwise).
int stop_signal() { return g_signal != 0 ? int(g_signal) : SIGINT; }

/// Installs the handlers for the sweep's lifetime and puts the old ones back.
class SignalGuard {
 public:
  SignalGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

// ---- progress ----

class Progress {
 public:
  Progress(std::size_t passes, bool tty) : passes_(passes), tty_(tty) {}
  void update(std::size_t done, std::size_t total) {
    if (!tty_ || total == 0) return;
    const double el = elapsed();
    const double frac = double(done) / double(total);
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(frac * kWidth);
    const double rate = el > 0 ? double(done) / double(passes_) / el : 0;
    const std::string eta =
        done > 0 && done < total ? fmt::format("  eta {:.0f}s", el / double(done) * double(total - done)) : "";
    std::fprintf(stderr, "\r  sweep [%s%s] %3.0f%%  %zu/%zu configs  %.0f configs/s%s   ",
                 std::string(std::size_t(fill), '#').c_str(), std::string(std::size_t(kWidth - fill), '.').c_str(),
                 frac * 100, done / passes_, total / passes_, rate, eta.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
  void finish() {
    if (drawn_) std::fputs("\n", stderr);
  }
  [[nodiscard]] double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::size_t passes_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// ---- gnuplot ----

std::string find_on_path(const std::string& exe) {
  const char* path = std::getenv("PATH");
  if (!path) return {};
  const std::string dirs = path;
  for (std::size_t b = 0; b <= dirs.size();) {
    const std::size_t e = std::min(dirs.find(':', b), dirs.size());
    const std::string dir = e > b ? dirs.substr(b, e - b) : std::string(".");  // an empty entry is the current folder
    b = e + 1;
    const std::string p = dir + "/" + exe;
    if (::access(p.c_str(), X_OK) == 0 && !fs::is_directory(p)) return p;
  }
  return {};
}

/// Draws the figure. Returns false (after saying why on stderr) when it could not; the CSV stands regardless.
bool plot(const sim::SweepSpec& spec, const sim::SweepResult& res, const std::string& out,
          const std::string& script_out, double timeout_s) {
  const auto format = out.ends_with(".svg") ? sim::PlotFormat::Svg : sim::PlotFormat::Png;
  if (!script_out.empty()) write_file_atomic(script_out, sim::sweep_gnuplot_script(spec, res, out, format));
  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) {
    std::fprintf(
        stderr,
        "charm sweep: gnuplot is not on PATH, so %s was not drawn (install it: scripts/setup.sh, or apt-get install "
        "gnuplot-nox); the CSV is written.\n",
        out.c_str());
    return false;
  }
  // The figure comes back on gnuplot's stdout: the script names no file.
  const Drawing d = draw_with_gnuplot(gnuplot, sim::sweep_gnuplot_script(spec, res, "", format), timeout_s, g_cancel);
  if (!d.failure.empty()) {
    if (!g_cancel.load()) std::fprintf(stderr, "charm sweep: %s not written: %s\n", out.c_str(), d.failure.c_str());
    return false;
  }
  write_file_atomic(out, d.image);
  return true;
}

struct SweepOpts {
  // The workload's defaults are simulate's (WorkloadFlags).
  std::string topologies, batch = "1", seq = "4k", heads = "8", kv_heads, head_dim = "128";
  std::string tp, cp, domains;  // parallel axes (empty: one CP group on every GPU)
  std::string dtype = "bf16", layout = "contiguous", algos, pass = "fwd";
  bool causal = false;
  std::vector<std::string> sets;
  std::string out, json, plot, plot_script;
  bool json_stdout = false;
  int jobs = 0;  // omitted: every core
  double reserved_gb = 0;
  double timeout_s = 60;
  std::string max_memory;
};

/// What the flags ask for, checked: the spec, its files and hardware points, the worker threads.
struct SweepJob {
  sim::SweepSpec spec;
  std::vector<std::string> files;
  std::size_t points = 1;  // hardware points per topology (--set)
  int jobs = 1;
  /// What the files hold (FNV-1a of their JSON as read): under mpirun, one path may name
  /// different files on different hosts or working folders, and their rows must not merge.
  std::uint64_t topology_digest = 0;
};

std::uint64_t digest_of(const std::vector<app::SweepTopology>& docs) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& d : docs)
    for (const char c : d.doc.dump() + '\0') h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

void check_outputs(const SweepOpts& o) {
  if (!o.plot.empty() && !o.plot.ends_with(".png") && !o.plot.ends_with(".svg"))
    fail(Error{"--plot", fmt::format("'{}' must end in .png or .svg", o.plot)});
  // The script is the figure's: without --plot there is none to write, and the flag would be read past.
  if (!o.plot_script.empty() && o.plot.empty())
    fail(Error{"--plot-script", fmt::format("{}: is the gnuplot script of the --plot figure; give --plot FILE.png "
                                            "(or .svg) with it",
                                            o.plot_script)});
}

/// No output named: the CSV goes to stdout, as --json sends the JSON there.
bool csv_to_stdout(const SweepOpts& o) { return o.out.empty() && o.json.empty() && !o.json_stdout; }

SweepJob sweep_job(const SweepOpts& o, bool jobs_given) {
  SweepJob job;
  const std::vector<app::SetField> sets = unwrap(app::parse_sets(o.sets, job.points));
  job.files = split_list(o.topologies);
  std::vector<app::SweepTopology> docs;
  for (const auto& f : job.files) {
    auto doc = topo::read_topology_json(f);
    if (!doc) fail(Error{"--topology", doc.error().message()});
    docs.push_back({f, std::move(doc).value()});
  }
  job.topology_digest = digest_of(docs);
  job.spec = unwrap(app::sweep_topologies(docs, sets));
  for (const auto& w : job.spec.warnings) print_warning(w);
  app::SweepLists lists;
  lists.batch = unwrap(app::parse_list(o.batch, "--batch"));
  lists.seq = unwrap(app::parse_list(o.seq, "--seq"));
  lists.heads = unwrap(app::parse_list(o.heads, "--heads"));
  lists.head_dim = unwrap(app::parse_list(o.head_dim, "--head-dim"));
  if (!o.kv_heads.empty()) lists.kv_heads = unwrap(app::parse_list(o.kv_heads, "--kv-heads"));
  if (!o.tp.empty()) lists.tp = unwrap(app::parse_list(o.tp, "--tp"));
  if (!o.cp.empty()) lists.cp = unwrap(app::parse_list(o.cp, "--cp"));
  if (!o.domains.empty()) lists.domains = unwrap(app::parse_list(o.domains, "--domains"));
  lists.dtypes = split_list(o.dtype);
  lists.layouts = split_list(o.layout);
  lists.causal = o.causal;
  lists.algos = o.algos;
  lists.pass = o.pass;
  lists.reserved_gb = o.reserved_gb;
  unwrap(app::set_sweep_lists(job.spec, lists));
  check_outputs(o);
  // Now, not after an hour of simulation.
  FlagPaths inputs;
  for (const auto& f : job.files) inputs.emplace_back("--topology", f);
  check_command_files(
      {inputs, {{"--out", o.out}, {"--json-out", o.json}, {"--plot", o.plot}, {"--plot-script", o.plot_script}}, {}});
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Omitted: every core. Given, it is a count (no value stands for "every core").
  job.jobs = jobs_given ? o.jobs : hw;
  if (job.jobs < 1 || job.jobs > 1024) fail(Error{"--jobs", fmt::format("must be in [1, 1024], got {}", o.jobs)});
  if (!(o.timeout_s >= 0)) fail(Error{"--timeout-s", fmt::format("must be >= 0, got {}", o.timeout_s)});
  unwrap(app::check_sweep_fits(job.spec, job.files, memory_budget(o.max_memory)));
  return job;
}

void say_start(const SweepJob& job, int processes) {
  const auto& spec = job.spec;
  const std::string hardware =
      spec.set_fields.empty() ? "" : fmt::format(" x {} hardware point{}", job.points, job.points == 1 ? "" : "s");
  const std::string where = processes > 1
                                ? fmt::format("{} processes x {} job{}", processes, job.jobs, job.jobs == 1 ? "" : "s")
                                : fmt::format("{} job{}", job.jobs, job.jobs == 1 ? "" : "s");
  std::fprintf(stderr, "charm sweep: %zu configurations x %zu algorithms x %zu pass%s on %zu topolog%s%s, %s\n",
               spec.num_configs(), spec.algos.size(), spec.passes.size(), spec.passes.size() == 1 ? "" : "es",
               job.files.size(), job.files.size() == 1 ? "y" : "ies", hardware.c_str(), where.c_str());
  std::fflush(stderr);
}

/// The interrupted sweep's line; the exit code is 128 + the signal. Under mpirun a signal also
/// comes from mpirun itself when another process of the job died.
void say_interrupted(const SweepJob& job, std::size_t tasks_done, bool job_of_processes = false) {
  const int sig = stop_signal();
  const char* why = !job_of_processes ? ""
                    : sig == SIGTERM  ? " by SIGTERM (from mpirun: a process of the job died, or the job was stopped)"
                                      : " by a signal";
  std::fprintf(stderr, "charm sweep: interrupted%s after %zu of %zu configurations; no output written\n", why,
               tasks_done / job.spec.passes.size(), job.spec.num_configs());
  exit_code() = 128 + sig;
}

void say_skipped(const sim::SweepResult& res) {
  if (res.skipped == 0) return;
  std::fprintf(stderr, "charm sweep: skipped %zu (configuration, algorithm, pass) combinations the planner refuses:\n",
               res.skipped);
  std::size_t shown = 0;
  for (const auto& [what, n] : res.skip_reasons) {
    if (++shown > 6) {
      std::fprintf(stderr, "  ... and %zu more reasons (see --json-out)\n", res.skip_reasons.size() - 6);
      break;
    }
    std::fprintf(stderr, "  %6zu x %s\n", n, what.c_str());
  }
}

/// A complete sweep's outputs, each written atomically, and its summary lines.
void report(const SweepJob& job, const SweepOpts& o, const sim::SweepResult& res) {
  const auto& spec = job.spec;
  const std::size_t configs = spec.num_configs();
  // Nothing computed is a failure, not an empty table.
  if (res.rows.empty() && res.failures.empty())
    fail(Error{"--algos",
               fmt::format("no row: the planner refused every (configuration, algorithm, pass){}",
                           res.skip_reasons.empty() ? "" : "; the first reason: " + res.skip_reasons.begin()->first)});
  if (!o.out.empty()) write_file_atomic(o.out, sim::sweep_csv(spec, res));
  if (!o.json.empty()) write_file_atomic(o.json, sim::sweep_json(spec, res).dump(1) + "\n");
  const double rate = res.wall_s > 0 ? double(configs) / res.wall_s : 0;
  std::fprintf(
      stderr,
      "charm sweep: %zu rows (%zu skipped) from %zu configurations in %.2f s (%.0f configs/s, %zu simulations%s)\n",
      res.rows.size(), res.skipped, configs, res.wall_s, rate, res.simulations,
      res.shared > 0 ? fmt::format(", {} figures from an equal one", res.shared).c_str() : "");
  say_skipped(res);
  // With --json (or no output named: the CSV), stdout is the document alone; the "wrote" lines go to stderr.
  FILE* said = o.json_stdout || csv_to_stdout(o) ? stderr : stdout;
  if (o.json_stdout) std::fprintf(stdout, "%s\n", sim::sweep_json(spec, res).dump(1).c_str());
  if (csv_to_stdout(o)) std::fputs(sim::sweep_csv(spec, res).c_str(), stdout);
  if (!o.out.empty()) std::fprintf(said, "wrote %s (%zu rows)\n", o.out.c_str(), res.rows.size());
  if (!o.json.empty()) std::fprintf(said, "wrote %s\n", o.json.c_str());
  if (!o.plot.empty() && plot(spec, res, o.plot, o.plot_script, o.timeout_s))
    std::fprintf(said, "wrote %s\n", o.plot.c_str());
  if (g_cancel.load()) {
    std::fprintf(stderr, "charm sweep: interrupted while drawing; %s not written\n", o.plot.c_str());
    exit_code() = 128 + stop_signal();
    return;
  }
  if (!res.failures.empty()) {
    for (std::size_t i = 0; i < res.failures.size() && i < 3; ++i)
      std::fprintf(stderr, "charm sweep: simulation failed: %s\n", res.failures[i].c_str());
    std::fprintf(stderr, "charm sweep: %zu simulations failed (a simulator bug; their rows are missing)\n",
                 res.failures.size());
    exit_code() = kExitRuntime;
  }
}

/// The sweep in this process, on its worker threads.
void sweep_here(const SweepJob& job, const SweepOpts& o) {
  say_start(job, 1);
  Progress progress(job.spec.passes.size(), ::isatty(STDERR_FILENO) != 0);
  sim::SweepControl control;
  control.jobs = job.jobs;
  control.cancel = &g_cancel;
  control.progress = [&progress](std::size_t done, std::size_t total) { progress.update(done, total); };
  const sim::SweepResult res = sim::run_sweep(job.spec, control);
  progress.finish();
  if (res.cancelled || g_cancel.load()) return say_interrupted(job, res.tasks_done);
  report(job, o, res);
}

#ifdef CHARM_RT_HAVE_MPI
/// What every process of an mpirun sweep must agree on: each flag that changes the rows.
rt::WorkFields sweep_fields(const SweepJob& job, const SweepOpts& o) {
  return {{"--topology", o.topologies},
          {"topology", fmt::format("{:016x}", job.topology_digest)},
          {"--batch", o.batch},
          {"--seq", o.seq},
          {"--heads", o.heads},
          {"--kv-heads", o.kv_heads},
          {"--head-dim", o.head_dim},
          {"--tp", o.tp},
          {"--cp", o.cp},
          {"--domains", o.domains},
          {"--dtype", o.dtype},
          {"--layout", o.layout},
          {"--causal", o.causal ? "on" : "off"},
          {"--set", fmt::format("{}", fmt::join(o.sets, " "))},
          {"--algos", fmt::format("{}", fmt::join(job.spec.algos, ","))},
          {"--pass", o.pass},
          {"--reserved-gb", fmt::format("{}", o.reserved_gb)},
          {"configurations", std::to_string(job.spec.num_configs())}};
}

/// The sweep spread over the processes of an mpirun job: rank 0 hands out the tasks, every
/// process runs them on its threads, rank 0 assembles the rows in the single-process order and
/// writes every output while the others wait for its exit code.
void sweep_over_mpi(const SweepJob& job, const SweepOpts& o) {
  auto ctx_e = init_mpi(o.timeout_s);
  if (!ctx_e) throw RuntimeFailure{ctx_e.error().message()};
  auto& ctx = **ctx_e;
  const double tmo = o.timeout_s;
  // The first agreement: a process whose flags failed joins it from main's handler.
  auto a = ctx.agree({}, 0, tmo, "the sweep's flags");
  if (!a) abort_job(ctx, a.error());
  if (!a->status) agreed_failure(ctx, *a);
  auto same = ctx.same_work(sweep_fields(job, o), tmo);
  if (!same) abort_job(ctx, same.error());
  if (!*same) agreed_failure(ctx, {*same, kExitUsage});
  if (ctx.rank() == 0) say_start(job, ctx.size());
  const auto t0 = std::chrono::steady_clock::now();
  Progress progress(job.spec.passes.size(), ctx.rank() == 0 && ::isatty(STDERR_FILENO) != 0);
  rt::MpiContext::TaskShare share;
  share.total = sim::sweep_tasks(job.spec);
  share.jobs = job.jobs;
  // The k-th task handed out is sweep_task_to_run's k-th, so that a worker's chunk holds a configuration's
  // batches in a row for its PlanReuse (one per worker thread); this process's workers share one memo.
  sim::SimulationMemo memo;
  share.task = [&job, &memo](std::size_t k) {
    thread_local sim::PlanReuse reuse;
    return sim::encode_task(sim::run_sweep_task(job.spec, sim::sweep_task_to_run(job.spec, k), &reuse, &memo));
  };
  std::size_t tasks_done = 0;
  share.progress = [&](std::size_t done, std::size_t total) {
    tasks_done = done;
    progress.update(done, total);
  };
  share.cancel = &g_cancel;
  share.timeout_s = tmo;
  auto got = ctx.share_tasks(share);
  progress.finish();
  if (!got) {
    if (!g_cancel.load()) abort_job(ctx, got.error());
    // A signal (mpirun passes one on when a process of the job dies): rank 0 says it, and the
    // job ends at once, with no output. A rank 0 that was itself stopped stays quiet: another
    // process has said why.
    const bool signalled = got.error().kind == ErrorKind::Interrupted;
    exit_code() = signalled ? 128 + stop_signal() : kExitRuntime;
    if (ctx.rank() == 0 && signalled) say_interrupted(job, tasks_done, true);
    std::fflush(stderr);
    ctx.abort(exit_code());
  }
  auto code = ctx.rank0_decides(
      [&] {
        std::vector<std::optional<sim::SweepTaskOut>> outs(got->size());
        for (std::size_t k = 0; k < got->size(); ++k)
          outs[sim::sweep_task_to_run(job.spec, k)] = unwrap(sim::decode_task(job.spec, (*got)[k]));
        report(job, o,
               sim::sweep_result(job.spec, std::move(outs),
                                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
        return exit_code();
      },
      exit_code_of, tmo);
  if (!code) abort_job(ctx, code.error());
  exit_code() = *code;
}
#endif

void register_sweep(CLI::App& app) {
  auto o = std::make_shared<SweepOpts>();
  auto* sub = app.add_subcommand(
      "sweep", "what-if sweep: every algorithm over topologies x workload lists, speedup over ring vs CCR "
               "(CSV, JSON, gnuplot figure)");
  sub->footer(
      "Lists: 1,2,4 | 4k..128k*2 (x2 steps) | 64..256+64 (+64 steps) | 1..8, with size suffixes k, M, G.\n"
      "Example: charm sweep --topology topologies/l20-8-2numa.json,topologies/h20-8.json --batch 1,2,4 \\\n"
      "           --seq 8k..128k*2 --heads 8,16,32 --head-dim 64,128 --pass both --out sweep.csv --plot sweep.png\n"
      "Hardware: charm sweep --topology topologies/h100-2x8.json --batch 1 --seq 64k --heads 16 --head-dim 128 \\\n"
      "           --set inter.bandwidth_gbps=25,50,100 --set gpu.tflops.bf16=312,989 --out hw.csv --plot hw.png\n"
      "Over MPI: mpirun -np 4 charm sweep ... spreads the configurations over the processes (rank 0 hands\n"
      "           them out and writes the outputs: the same bytes as one process writes).");
  sub->add_option("--topology,-t", o->topologies, "topology JSON files, comma-separated")->required();
  sub->add_option("--batch,-b", o->batch, "batch sizes (list)")->capture_default_str();
  sub->add_option("--seq,-s", o->seq, "global sequence lengths (list)")->capture_default_str();
  sub->add_option("--heads", o->heads, "query heads (list)")->capture_default_str();
  sub->add_option("--head-dim", o->head_dim, "head dimensions (list)")->capture_default_str();
  sub->add_option("--tp", o->tp,
                  "tensor-parallel sizes (list): every CP group of a CP x TP layout on TP's share of the heads, "
                  "times of whole attention blocks (TP's collectives and the projections' GEMMs)");
  sub->add_option("--cp", o->cp, "context-parallel sizes (list; default with --tp: GPUs / TP; the rest is DP)");
  sub->add_option("--domains,-d", o->domains, "charm's and usp's domains (list; default: the topology's)");
  sub->add_option("--kv-heads", o->kv_heads,
                  "key/value heads (list; default: = heads; combinations that do not divide are skipped)");
  sub->add_option("--dtype", o->dtype, "bf16 | fp16 | fp32 (comma-separated for several)")->capture_default_str();
  sub->add_flag("--causal", o->causal, "causal mask");
  sub->add_option("--layout", o->layout, "contiguous | zigzag (comma-separated for several)")->capture_default_str();
  sub->add_option("--set", o->sets,
                  "sweep a number of the topology JSON: FIELD=LIST, e.g. inter.bandwidth_gbps=25,50,100 "
                  "(repeatable; each is a column, and the sets multiply)")
      ->allow_extra_args(false);
  sub->add_option("--algos", o->algos, "algorithms, comma-separated (default: all)");
  sub->add_option("--pass", o->pass, "fwd | bwd | both (both: one row per pass)")->capture_default_str();
  sub->add_option("--out,-o", o->out,
                  "CSV file, one row per configuration, algorithm and pass (no --out, --json-out or --json: the CSV "
                  "on stdout)");
  sub->add_option("--json-out", o->json, "write the rows as JSON to this file");
  sub->add_flag("--json", o->json_stdout, "JSON output: the rows on stdout, as --json-out writes them");
  sub->add_option(
      "--plot", o->plot,
      "draw speedup vs CCR, vs sequence length and vs each --set field, and run time, with gnuplot (.png or .svg)");
  sub->add_option("--plot-script", o->plot_script, "also keep the gnuplot script (data inline) to restyle the figure");
  sub->add_option("--jobs,-j", o->jobs, "worker threads (default: all cores; under mpirun, per process)");
  sub->add_option("--timeout-s", o->timeout_s,
                  "under mpirun: a process silent this long while it holds work is a stall (exit 3); "
                  "also the longest gnuplot may draw --plot; 0 = never")
      ->capture_default_str();
  sub->add_option("--reserved-gb", o->reserved_gb,
                  "GB per GPU the rest of the model holds, added to the attention buffers for the fits column")
      ->capture_default_str();
  add_max_memory(*sub, o->max_memory);

  sub->callback([o, sub] {
    const SweepJob job = sweep_job(*o, sub->count("--jobs") > 0);
    g_cancel.store(false);
    g_signal = 0;
    const SignalGuard guard;
#ifdef CHARM_RT_HAVE_MPI
    if (const auto launched = launched_job(); launched && launched->size > 1) return sweep_over_mpi(job, *o);
#endif
    sweep_here(job, *o);
  });
}

const Registrar sweep_registered{"sweep", register_sweep};

}  // namespace
}  // namespace charm::cli
