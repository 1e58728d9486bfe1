// charm run: execute a plan on the CPU with real attention math (backends
// threads and mpi), optionally check it against the fp64 reference and dump
// the tensors as .npy files.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <unistd.h>
#include <vector>

#include "runtime/buffer_store.hpp"
#include "runtime/check.hpp"
#include "runtime/executor.hpp"
#include "runtime/npy.hpp"
#include "runtime/reference.hpp"
#include "scheduler/trace/summary.hpp"
#include "scheduler/trace/trace.hpp"
#include "scheduler/validate/validator.hpp"
#include "tools/cli_common.hpp"
#include "tools/mpi_job.hpp"
#include "tools/plan_flags.hpp"
#include "tools/run_backends.hpp"
#ifdef CHARM_RT_HAVE_MPI
#include "runtime/mpi_context.hpp"
#endif

namespace charm::cli {
namespace {

struct RunOpts {
  PlanFlags plan;
  std::string backend = "threads";
  std::uint64_t seed = 0;
  bool check = false, json = false;
  rt::Faults faults;  // --inject-*: testing
  std::string dump, trace;
  double timeout_s = 300;
};

nlohmann::json err_json(const rt::CheckReport& r, double rt::TensorError::*field) {
  nlohmann::json j = nlohmann::json::object();
  const std::pair<const char*, const std::optional<rt::TensorError>*> all[] = {
      {"out", &r.out}, {"lse", &r.lse}, {"dq", &r.dq}, {"dk", &r.dk}, {"dv", &r.dv}};
  for (const auto& [name, e] : all) {
    if (!e->has_value())
      j[name] = nullptr;
    else if (std::isfinite((**e).*field))
      j[name] = (**e).*field;
    else
      j[name] = "inf";
  }
  return j;
}

/// The files a dump may hold: the tensors and meta.json.
const std::vector<std::string>& dump_files() {
  static const std::vector<std::string> names{"q.npy",   "k.npy",  "v.npy",  "dout.npy", "out.npy",
                                              "lse.npy", "dq.npy", "dk.npy", "dv.npy",   "meta.json"};
  return names;
}

/// Writes the dump as a whole or not at all: a failure (or an interrupt) takes away
/// the files written so far and the folders made for them, since a partial dump
/// would read as a complete one with tensors missing.
class DumpWriter {
 public:
  explicit DumpWriter(const std::string& dir) : dir_(dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::vector<fs::path> missing;
    for (fs::path p = fs::absolute(dir, ec).lexically_normal();
         !p.empty() && !fs::exists(p, ec) && p != p.parent_path(); p = p.parent_path())
      missing.push_back(p);
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (!fs::create_directory(*it, ec) && ec) {
        rollback();
        fail(Error{"--dump", fmt::format("cannot create {}: {}", dir, ec.message())});
      }
      made_.push_back(it->string());
      guards_.push_back(std::make_unique<RemoveOnInterrupt>(it->string(), /*folder=*/true));
    }
  }
  void write(const std::string& name, const std::string& bytes) {
    // Only the names checked before the run (check_command_files) may be written.
    CHARM_ASSERT(std::find(dump_files().begin(), dump_files().end(), name) != dump_files().end(),
                 "a dump file outside dump_files()");
    const std::string path = (std::filesystem::path(dir_) / name).string();
    try {
      write_file_atomic(path, bytes);
    } catch (...) {
      rollback();
      throw;
    }
    written_.push_back(path);
    guards_.push_back(std::make_unique<RemoveOnInterrupt>(path));
  }
  /// The dump is complete: keep it.
  void commit() {
    for (auto& g : guards_) g->release();
    written_.clear();
    made_.clear();
  }
  ~DumpWriter() { rollback(); }
  DumpWriter(const DumpWriter&) = delete;
  DumpWriter& operator=(const DumpWriter&) = delete;

 private:
  void rollback() {
    for (const auto& f : written_) ::unlink(f.c_str());
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) ::rmdir(it->c_str());
    written_.clear();
    made_.clear();
    guards_.clear();
  }
  std::string dir_;
  std::vector<std::string> written_, made_;
  std::vector<std::unique_ptr<RemoveOnInterrupt>> guards_;
};

void dump_tensors(const std::string& dir, const ir::Plan& plan, const RunOpts& o, const rt::GlobalTensors& in,
                  const rt::GlobalTensors& res) {
  DumpWriter dump(dir);
  const auto& w = plan.workload;
  const std::vector<std::int64_t> qshape{w.batch, w.seq, w.heads, w.head_dim};
  const std::vector<std::int64_t> kvshape{w.batch, w.seq, w.kv_heads, w.head_dim};
  const std::vector<std::int64_t> lshape{w.batch, w.heads, w.seq};
  nlohmann::json files = nlohmann::json::array();
  auto put = [&](const char* name, const std::vector<float>& t, const std::vector<std::int64_t>& shape) {
    if (t.empty()) return;
    dump.write(std::string(name) + ".npy", rt::npy_bytes(t, shape));
    files.push_back(std::string(name) + ".npy");
  };
  put("q", in.q, qshape);
  put("k", in.k, kvshape);
  put("v", in.v, kvshape);
  if (w.pass != ir::PassKind::Fwd) put("dout", in.dout, qshape);
  // A backward-only plan takes O and LSE as inputs: dump those.
  put("out", res.out.empty() ? in.out : res.out, qshape);
  put("lse", res.lse.empty() ? in.lse : res.lse, lshape);
  put("dq", res.dq, qshape);
  put("dk", res.dk, kvshape);
  put("dv", res.dv, kvshape);
  const nlohmann::json meta{{"schema", 1},
                            {"softmax_scale", 1.0 / std::sqrt(double(w.head_dim))},
                            {"causal", w.causal},
                            {"layout", std::string(ir::to_string(w.layout))},
                            {"order", "natural sequence order"},
                            {"dtype", std::string(ir::to_string(w.dtype))},
                            {"storage", "float32"},  // the .npy files; the values are rounded to dtype
                            {"batch", w.batch},
                            {"seq", w.seq},
                            {"heads", w.heads},
                            {"kv_heads", w.kv_heads},
                            {"head_dim", w.head_dim},
                            {"pass", std::string(ir::to_string(w.pass))},
                            {"algo", plan.algo},
                            {"ranks", plan.ranks},
                            {"domains", plan.domains},
                            {"backend", o.backend},
                            {"seed", o.seed},
                            {"files", files}};
  dump.write("meta.json", meta.dump(1) + "\n");
  dump.commit();
}

/// The check as a table: max_rel (max_abs over the reference's scale) is the figure compared with
/// the tolerance, and stands beside it.
std::string check_table(const rt::CheckReport& rep) {
  std::string s = fmt::format("# {:<6} {:>12} {:>10} {:>12} {:>10}\n", "tensor", "max_abs_err", "ref_scale",
                              "max_rel_err", "tolerance");
  const std::pair<const char*, const std::optional<rt::TensorError>*> all[] = {
      {"out", &rep.out}, {"lse", &rep.lse}, {"dq", &rep.dq}, {"dk", &rep.dk}, {"dv", &rep.dv}};
  for (const auto& [name, e] : all)
    if (e->has_value())
      s += fmt::format("  {:<6} {:>12.3e} {:>10.3g} {:>12.3e} {:>10.1e}{}\n", name, (*e)->max_abs, (*e)->scale,
                       (*e)->max_rel, rep.tolerance, (*e)->max_rel <= rep.tolerance ? "" : "  FAIL");
  return s;
}

/// Rank 0's part after a successful run: check, print, dump. Returns the exit code.
int report(const ir::Plan& plan, const RunOpts& o, const rt::GlobalTensors& in, const rt::RunResult& res,
           const nlohmann::json& extra = {}, const std::string& extra_text = {}) {
  const auto& w = plan.workload;
  std::optional<rt::CheckReport> rep;
  if (o.check) {
    const auto ref = rt::reference_attention(w, in, w.pass != ir::PassKind::Fwd);
    rep = rt::check_against(res.out, ref, w.dtype);
  }
  const bool ok = !rep || rep->ok();
  if (!o.dump.empty()) dump_tensors(o.dump, plan, o, in, res.out);
  const std::size_t op_order_peak = rt::op_order_peak_bytes(plan);
  if (o.json) {
    nlohmann::json j{{"schema", 1},
                     {"ok", ok},
                     {"algo", plan.algo},
                     {"backend", o.backend},
                     {"ranks", plan.ranks},
                     {"domains", plan.domains},
                     {"pass", std::string(ir::to_string(w.pass))},
                     {"time_ms", res.time_ms},
                     {"peak_buffer_bytes_per_rank", res.peak_bytes},
                     {"op_order_peak_buffer_bytes_per_rank", op_order_peak}};
    if (rep) {
      j["max_abs_err"] = err_json(*rep, &rt::TensorError::max_abs);
      j["max_rel_err"] = err_json(*rep, &rt::TensorError::max_rel);
      j["ref_scale"] = err_json(*rep, &rt::TensorError::scale);
      j["tolerance"] = rep->tolerance;
    } else {
      j["max_abs_err"] = nullptr;
      j["max_rel_err"] = nullptr;
    }
    // The simulator's figures from the measured op times (a GPU backend passes its own in `extra`).
    if (res.timeline.end_s.size() == plan.size() && !extra.contains("exposed_comm_ms"))
      j.update(trace::summary_json(trace::summarize(plan, res.timeline)));
    if (extra.is_object()) j.update(extra);
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format(
        "# charm run: {} backend={} ranks={} domains={} {} B={} S={} H={} Hkv={} D={}{} {} pass={} seed={}\n",
        plan.algo, o.backend, plan.ranks, plan.domains, ir::to_string(w.dtype), w.batch, w.seq, w.heads, w.kv_heads,
        w.head_dim, w.causal ? " " + w.mask_text() : "", ir::to_string(w.layout), ir::to_string(w.pass), o.seed);
    if (rep) std::cout << check_table(*rep);
    if (res.timeline.end_s.size() == plan.size() && extra_text.empty())
      std::cout << trace::summary_text(trace::summarize(plan, res.timeline));
    std::cout << extra_text;
    // The measured peak moves with the streams' interleaving from run to run; the op-order one is the plan's.
    std::cout << fmt::format("# time {:.3f} ms, peak buffers {:.2f} MiB per rank ({:.2f} one op at a time in plan "
                             "order){}\n",
                             res.time_ms, double(res.peak_bytes) / (1024.0 * 1024.0),
                             double(op_order_peak) / (1024.0 * 1024.0),
                             rep ? (ok ? ": check PASSED" : ": check FAILED (" + rep->worst() + ")") : "");
  }
  return ok ? 0 : kExitInvalid;
}

/// Refuses, before any tensor is allocated, a run whose tensors would not fit: the global
/// inputs and results in fp32 (Q, dO, O, dQ by query heads; K, V, dK, dV by kv heads), their
/// fp64 reference with --check, and the ranks' buffers (about 25 shards of Q per rank, fp32),
/// all of them in one process for the threads backend and one rank's share under MPI.
void check_run_memory(const sched::MemoryBudget& budget, const ir::Plan& plan, bool check, bool every_rank_here) {
  const auto& w = plan.workload;
  const double tokens = double(w.batch) * double(w.seq) * double(w.head_dim);
  double bytes = tokens * 4.0 * (4.0 * double(w.heads) + 4.0 * double(w.kv_heads)) * (check ? 3.0 : 1.0);
  bytes += tokens * double(w.heads) * 4.0 * 25.0 / (every_rank_here ? 1.0 : double(plan.ranks));
  check_budget(budget, bytes,
               fmt::format("the run's tensors (B={} S={} H={} D={})", w.batch, w.seq, w.heads, w.head_dim), "--seq");
}

/// The measured ops as a Chrome trace, in the simulator's schema (the same op ids and names),
/// so that a prediction and a measurement can be laid side by side.
void write_measured_trace(const std::string& path, const ir::Plan& plan, const rt::RunResult& res,
                          const std::string& backend) {
  if (path.empty()) return;
  write_file_atomic(path,
                    trace::chrome_trace(plan, res.timeline, {{"measured", true}, {"backend", backend}}).dump() + "\n");
}

#ifdef CHARM_RT_HAVE_MPI
/// What every process of an mpirun job must agree on before it runs: the plan (its digest)
/// and each flag that changes the work or its verdict.
rt::WorkFields work_fields(const ir::Plan& plan, const RunOpts& o) {
  const auto& w = plan.workload;
  return {{"--algo", plan.algo},
          {"--ranks", std::to_string(plan.ranks)},
          {"--domains", std::to_string(plan.domains)},
          {"--batch", std::to_string(w.batch)},
          {"--seq", std::to_string(w.seq)},
          {"--heads", std::to_string(w.heads)},
          {"--kv-heads", std::to_string(w.kv_heads)},
          {"--head-dim", std::to_string(w.head_dim)},
          {"--dtype", std::string(ir::to_string(w.dtype))},
          {"--causal", w.causal ? "on" : "off"},
          {"--layout", std::string(ir::to_string(w.layout))},
          {"--pass", std::string(ir::to_string(w.pass))},
          {"--seed", std::to_string(o.seed)},
          {"--check", o.check ? "on" : "off"},
          {"--timeout-s", fmt::format("{}", o.timeout_s)},
          {"--inject-stall", o.faults.drop_first_send ? "on" : "off"},
          {"--inject-drop-compute", o.faults.drop_first_remote_compute ? "on" : "off"},
          {"--inject-short-recv", o.faults.short_recv ? "on" : "off"},
          {"plan", fmt::format("{:016x}", rt::plan_fingerprint(plan))}};
}

/// How long a process that failed before the agreement waits for the others to reach it
/// (they may be building a large plan): then it says its own line and ends the job.
constexpr double kEarlyAgreementS = 120;

/// early_failure_handler for backends mpi and cuda: this process failed before MPI started
/// (a flag, a path), while the others wait in their first agreement (run_mpi's on the plan,
/// run_cuda's on the setup): it joins them with its error.
std::optional<int> agree_on_early_failure(const Error& e, int code) {
  if (rt::MpiContext::started()) return std::nullopt;
  auto ctx_e = init_mpi(kEarlyAgreementS);
  if (!ctx_e) return std::nullopt;
  auto& ctx = **ctx_e;
  auto a = ctx.agree(e, code, kEarlyAgreementS, "the plan");
  if (!a) abort_job(ctx, e, code);
  if (ctx.rank() == 0) std::fprintf(stderr, "charm: error: %s\n", a->status.error().message().c_str());
  std::fflush(stderr);
  return a->code;
}

const bool early_failure_registered = [] {
  early_failure_handler() = agree_on_early_failure;
  return true;
}();

/// The mpi backend once MPI is up: build the plan, agree, run, and rank 0 reports.
void run_mpi_job(rt::MpiContext& ctx, const RunOpts& o, const rt::RunOptions& ropt) {
  const double tmo = o.timeout_s;
  // Each process builds its plan; a bad flag on one of them reaches every one (the processes
  // of an MPMD job may have been given different flags), before any other collective.
  std::optional<ir::ValidatedPlan> plan;
  Status made;
  int made_code = 0;
  try {
    // Every process proves its own plan (the planner's, or the file's), in parallel.
    plan.emplace(o.plan.make_validated([&](const ir::Plan& p) {
      check_run_memory(o.plan.budget(), p, o.check, false);
      if (p.ranks != ctx.size())
        fail(Error{o.plan.from_file() ? "--plan" : "--ranks",
                   fmt::format("{} ranks {}, but mpirun started {} processes", p.ranks,
                               o.plan.from_file() ? "in the plan" : "asked for", ctx.size())});
    }));
  } catch (const UsageError& e) {
    made = e.error;
    made_code = kExitUsage;
  } catch (const RuntimeFailure& e) {
    made = Error{"", e.message};
    made_code = kExitRuntime;
  } catch (const std::bad_alloc&) {
    made = Error{"", "out of memory"};
    made_code = kExitRuntime;
  }
  auto a = ctx.agree(made, made_code, tmo, "the plan");
  if (!a) abort_job(ctx, a.error());
  if (!a->status) agreed_failure(ctx, *a);
  // The same work on every process, or one line from rank 0 and exit 2 on all: a rank with
  // another sequence length would receive into buffers of the wrong size.
  auto same = ctx.same_work(work_fields(**plan, o), tmo);
  if (!same) abort_job(ctx, same.error());
  if (!*same) agreed_failure(ctx, {*same, kExitUsage});
  const auto in = rt::plan_inputs((*plan)->workload, o.seed);
  auto res = ctx.run(*plan, in, ropt);
  if (!res) {
    if (ctx.failure_agreed()) agreed_failure(ctx, {res.error(), kExitRuntime});
    abort_job(ctx, res.error());
  }
  // Rank 0 checks and reports while the others wait for its verdict (exit code).
  auto code = ctx.rank0_decides(
      [&] {
        write_measured_trace(o.trace, **plan, *res, "mpi");
        return report(**plan, o, in, *res);
      },
      exit_code_of, tmo);
  if (!code) abort_job(ctx, code.error());
  exit_code() = *code;
}

void run_mpi(const RunOpts& o, const rt::RunOptions& ropt) {
  auto ctx_e = init_mpi(o.timeout_s);
  if (!ctx_e) throw RuntimeFailure{ctx_e.error().message()};
  auto ctx = std::move(*ctx_e);
  // An error that leaves here (rank 0's report: a dump that cannot be written) is said now,
  // while MPI is up, not by main after MPI_Finalize, when the job may already be ending.
  try {
    run_mpi_job(*ctx, o, ropt);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "charm: error: %s\n", e.error.message().c_str());
    std::fflush(stderr);
    throw QuietExit{kExitUsage};
  } catch (const RuntimeFailure& e) {
    std::fprintf(stderr, "charm: error: %s\n", e.message.c_str());
    std::fflush(stderr);
    throw QuietExit{kExitRuntime};
  }
}
#endif

/// Backend threads: a thread per stream of every rank, in this process.
void run_threads_backend(const RunOpts& o, const rt::RunOptions& ropt) {
  constexpr int kMaxThreadRanks = 1024;
  if (!o.plan.from_file() && o.plan.ranks > kMaxThreadRanks)
    fail(Error{"--ranks",
               fmt::format("the threads backend runs up to 6 threads per rank in one process; {} ranks is over its "
                           "{}-rank limit (use --backend mpi)",
                           o.plan.ranks, kMaxThreadRanks)});
  const auto plan = o.plan.make_validated([&](const ir::Plan& p) {
    if (p.ranks > kMaxThreadRanks)
      fail(Error{"--plan", fmt::format("the threads backend runs up to {} ranks; the plan has {} (use --backend mpi)",
                                       kMaxThreadRanks, p.ranks)});
    check_run_memory(o.plan.budget(), p, o.check, true);
  });
  const auto in = rt::plan_inputs(plan->workload, o.seed);
  auto res = rt::run_threads(plan, in, ropt);
  if (!res) throw RuntimeFailure{res.error().message()};
  write_measured_trace(o.trace, *plan, *res, "threads");
  exit_code() = report(*plan, o, in, *res);
}

/// Under mpirun the job is the processes: --ranks defaults to their number, and a backend that
/// runs every rank in one process would run the whole job N times.
void adopt_job_size(RunOpts& o, std::optional<Backend> backend, bool ranks_given) {
  const auto job = launched_job();
  if (!job || job->size <= 1) return;
  if (backend == Backend::Threads || backend == Backend::CudaLocal)
    fail(Error{"--backend", fmt::format("mpirun started {} processes, but --backend {} runs every rank in one process "
                                        "(each would run the whole job): use --backend mpi{}",
                                        job->size, o.backend, backend == Backend::CudaLocal ? " or cuda" : "")});
  if (!ranks_given && !o.plan.from_file()) o.plan.ranks = job->size;
}

/// A file another backend writes (--append-measurements: the cuda backends' measured time) is
/// refused, not silently left unwritten by this backend.
void refuse_other_backends_outputs(const RunOpts& o) {
  for (const auto& b : run_backends()) {
    if (std::find(b.names.begin(), b.names.end(), o.backend) != b.names.end()) continue;
    for (const auto& [flag, path] : b.outputs())
      if (!path.empty())
        fail(Error{flag, fmt::format("is written by --backend {} only; --backend {} would not write it",
                                     fmt::join(b.names, " or "), o.backend)});
  }
}

void register_run(CLI::App& app) {
  auto o = std::make_shared<RunOpts>();
  auto* sub = app.add_subcommand("run", "execute a plan on the CPU (threads or MPI) with real attention math");
  sub->add_option("--backend", o->backend, "threads | mpi (under mpirun -np RANKS; --ranks defaults to RANKS)")
      ->capture_default_str();
  o->plan.add(*sub, /*with_ranks=*/true, /*with_plan_file=*/true);
  sub->add_option("--seed", o->seed, "seed of the generated inputs")->capture_default_str();
  sub->add_flag("--check", o->check, "compare with the fp64 dense reference; exit 1 over tolerance");
  sub->add_option("--dump", o->dump, "write q k v dout out lse dq dk dv as .npy (natural order) and meta.json here");
  sub->add_option(
      "--trace", o->trace,
      "write a Chrome trace of the measured ops (every backend; the simulator's schema: same op ids in args.op)");
  sub->add_flag("--json", o->json, "JSON output");
  sub->add_option("--timeout-s", o->timeout_s, "watchdog: fail (exit 3) after this long without progress; 0 = off")
      ->capture_default_str();
  sub->add_flag("--inject-stall", o->faults.drop_first_send, "testing: drop the plan's first send")->group("");
  sub->add_flag("--inject-drop-compute", o->faults.drop_first_remote_compute, "testing: drop one block computation")
      ->group("");
  sub->add_flag("--inject-short-recv", o->faults.short_recv,
                "testing (mpi): rank 1 posts its first receive one float short")
      ->group("");
  for (auto& b : run_backends()) b.add_flags(*sub);
  sub->callback([o, sub] {
    const std::optional<Backend> backend = parse_enum(o->backend, kBackendNames);
    adopt_job_size(*o, backend, sub->count("--ranks") > 0);
    refuse_other_backends_outputs(*o);
    // Before the run, not after minutes of compute: where the dump and the trace go must take
    // files, and neither may replace the plan file.
    CommandFiles files{{{"--plan", o->plan.plan_file}}, {{"--trace", o->trace}}, {{"--dump", o->dump, dump_files()}}};
    for (const auto& b : run_backends())
      if (std::find(b.names.begin(), b.names.end(), o->backend) != b.names.end())
        for (auto& out : b.outputs()) files.outputs.push_back(std::move(out));
    check_command_files(files);
    for (const auto& b : run_backends())
      if (std::find(b.names.begin(), b.names.end(), o->backend) != b.names.end()) {
        RunRequest req{&o->plan, *backend, o->seed, o->check, o->json, o->faults, o->timeout_s, o->trace, {}};
        req.report = [o](const ir::Plan& plan, const rt::GlobalTensors& in, const rt::RunResult& res,
                         const nlohmann::json& extra,
                         const std::string& extra_text) { return report(plan, *o, in, res, extra, extra_text); };
        exit_code() = b.run(req);
        return;
      }
    if (backend != Backend::Threads && backend != Backend::Mpi) {
      // The backends this build has: threads and mpi always, the GPU ones when CUDA was found.
      std::string known = "threads, mpi";
      for (const auto& b : run_backends())
        for (const auto& n : b.names) known += ", " + n;
      fail(Error{"--backend", fmt::format("unknown backend '{}' (expected one of: {})", o->backend, known)});
    }
    if (!(o->timeout_s >= 0)) fail(Error{"--timeout-s", "must be >= 0"});
    // The timeline gives the run's summary (--json) and its trace.
    rt::RunOptions ropt{o->timeout_s, !o->trace.empty() || o->json, o->faults};
    if (backend == Backend::Threads) return run_threads_backend(*o, ropt);
#ifdef CHARM_RT_HAVE_MPI
    run_mpi(*o, ropt);
#else
    fail(Error{"--backend", "this charm was built without MPI (install libopenmpi-dev and rebuild)"});
#endif
  });
}

const Registrar run_registered{"run", register_run};

}  // namespace
}  // namespace charm::cli
