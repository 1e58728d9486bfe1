// charm run --backend cuda-local | cuda: the plan on GPUs (runtime/cuda).
// Same checks, text and JSON as the CPU backends, plus the simulator's timing
// fields measured with CUDA events and, with --trace, a Chrome trace in the simulator's schema.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "calibrate/measurements.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/trace/summary.hpp"
#include "scheduler/trace/trace.hpp"
#include "tools/cli_common.hpp"
#include "tools/mpi_job.hpp"
#include "tools/run_backends.hpp"
#ifdef CHARM_RT_HAVE_NCCL
#include "runtime/cuda/nccl_backend.hpp"
#include "runtime/mpi_context.hpp"
#endif

namespace charm::cli {
namespace {

struct CudaFlags {
  int device = 0;
  int warmup = 1;
  std::string tile_budget = "256M";
  std::string append_measurements;  // --append-measurements FILE: the run as a calibration row
};

/// The calibration row of this run, its time filled in after the run (charm calibrate reads it).
calib::Measurement measurement_of(const ir::Plan& plan) {
  const auto& names = sched::algorithm_names();
  if (std::find(names.begin(), names.end(), plan.algo) == names.end())
    fail(Error{"--append-measurements",
               fmt::format("the plan's algorithm '{}' is not one charm calibrate can plan", plan.algo)});
  calib::Measurement m;
  m.algo = plan.algo;
  m.workload = plan.workload;
  m.ranks = plan.ranks;
  m.domains = sched::uses_domains(plan.algo) ? plan.domains : 0;  // the others ignore it: an empty cell
  return m;
}

/// Appends the measured end-to-end time (the timed run's makespan) when asked, after a run
/// whose report succeeded; a failure to write is a runtime failure of its own.
void append_time(const std::string& path, calib::Measurement m, double time_ms) {
  if (path.empty()) return;
  m.time_ms = time_ms;
  if (auto s = calib::append_measurement(path, m); !s) throw RuntimeFailure{s.error().message()};
}

/// The measured op times as a timeline, seconds from the first op (a transfer starts when its group was issued).
trace::Timeline measured_timeline(const ir::Plan& plan, const rt::cuda::CudaRunResult& r) {
  trace::Timeline t = trace::Timeline::zeros(plan);
  for (std::size_t i = 0; i < plan.size() && i < r.start_ms.size() && i < r.end_ms.size(); ++i)
    t.record(ir::OpId(i), r.start_ms[i] * 1e-3, r.end_ms[i] * 1e-3);
  t.makespan_s = r.run.time_ms * 1e-3;
  return t;
}

void write_trace(const std::string& path, const ir::Plan& plan, const trace::Timeline& t) {
  write_file_atomic(
      path,
      trace::chrome_trace(plan, t, {{"measured", true}, {"backend", "cuda"}, {"timing", "cuda events"}}).dump() + "\n");
}

/// The simulator's timing fields, from the measured op times (trace::summarize, as every backend).
std::pair<nlohmann::json, std::string> timing(const trace::RunSummary& s, const rt::cuda::CudaRunResult& r,
                                              const std::string& device) {
  nlohmann::json j = trace::summary_json(s);
  j["device"] = device;
  j["timing"] = "cuda events";
  j["enqueue_ms"] = r.enqueue_ms;
  return {j, fmt::format("# device {}\n{}# host enqueue {:.3f} ms\n", device, trace::summary_text(s), r.enqueue_ms)};
}

/// The plan's inputs; a backward-only pass's forward results computed on `device`.
rt::GlobalTensors inputs_on(const ir::Workload& w, std::uint64_t seed, int device) {
  auto in = rt::cuda::device_plan_inputs(w, seed, device);
  if (!in) throw RuntimeFailure{in.error().message()};
  return std::move(*in);
}

/// Backend cuda-local: every rank of the plan on one GPU.
int run_on_one_gpu(const RunRequest& req, const CudaFlags& f, const ir::ValidatedPlan& valid,
                   const rt::cuda::CudaRunOptions& opt, const calib::Measurement& row) {
  const ir::Plan& plan = *valid;
  const auto in = inputs_on(plan.workload, req.seed, f.device);
  auto res = rt::cuda::run_cuda_local(valid, in, opt);
  if (!res) throw RuntimeFailure{res.error().message()};
  const auto dev = rt::cuda::device_description(f.device);
  const trace::Timeline t = measured_timeline(plan, *res);
  const auto [extra, text] = timing(trace::summarize(plan, t), *res, dev ? *dev : "unknown");
  if (!req.trace.empty()) write_trace(req.trace, plan, t);
  const int code = req.report(plan, in, res->run, extra, text);
  if (code == 0) append_time(f.append_measurements, row, res->run.time_ms);
  return code;
}

#ifdef CHARM_RT_HAVE_NCCL
/// Backend cuda: one GPU per rank, one process per rank under mpirun, NCCL between them.
int run_nccl_job(const RunRequest& req, const CudaFlags& f, const ir::ValidatedPlan& valid,
                 const rt::cuda::CudaRunOptions& opt, const calib::Measurement& row) {
  const ir::Plan& plan = *valid;
  auto ctx_e = init_mpi(req.timeout_s);
  if (!ctx_e) throw RuntimeFailure{ctx_e.error().message()};
  auto ctx = std::move(*ctx_e);
  // A process that failed before MPI started joins here with its error (early_failure_handler):
  // rank 0 says the lowest failing rank's line, flushed while every process is in MPI.
  if (const auto a = ctx->agree(Status{}, 0, req.timeout_s, "the setup"); !a) {
    std::fprintf(stderr, "charm: error: %s\n", a.error().message().c_str());
    ctx->abort(kExitRuntime);
  } else if (!a->status) {
    if (ctx->rank() == 0) std::fprintf(stderr, "charm: error: %s\n", a->status.error().message().c_str());
    std::fflush(stderr);
    throw QuietExit{a->code};
  }
  if (plan.ranks != ctx->size())
    fail(Error{"--ranks", fmt::format("{} ranks asked for, but mpirun started {} processes", plan.ranks, ctx->size())});
  // The same work on every process, or one line from rank 0 and exit 2 on all.
  {
    const auto same = ctx->same_work({{"--seed", std::to_string(req.seed)},
                                      {"--check", req.check ? "on" : "off"},
                                      {"--warmup", std::to_string(f.warmup)},
                                      {"--inject-stall", req.faults.drop_first_send ? "on" : "off"},
                                      {"plan", fmt::format("{:016x}", rt::plan_fingerprint(plan))}},
                                     req.timeout_s);
    if (!same) {
      std::fprintf(stderr, "charm: error: %s\n", same.error().message().c_str());
      ctx->abort(kExitRuntime);
    }
    if (!*same) throw UsageError{same->error()};
  }
  // Any GPU of this host computes the forward results of a backward-only pass.
  const auto gpus = rt::cuda::device_count();
  const auto in = inputs_on(plan.workload, req.seed, gpus && *gpus > 0 ? ctx->rank() % *gpus : 0);
  auto res = rt::cuda::run_cuda_nccl(valid, in, opt);
  if (!res) {
    // The watchdog already aborted the communicators; end every process with the runtime code.
    std::fprintf(stderr, "charm: error: %s\n", res.error().message().c_str());
    std::fflush(stderr);
    ctx->abort(kExitRuntime);
  }
  // Rank 0 checks and reports while the others wait for its verdict (exit code), watched.
  auto code = ctx->rank0_decides(
      [&] {
        int dev = 0;
        (void)cudaGetDevice(&dev);
        const auto desc = rt::cuda::device_description(dev);
        const trace::Timeline t = measured_timeline(plan, *res);
        const auto [extra, text] = timing(trace::summarize(plan, t), *res, desc ? *desc : "unknown");
        if (!req.trace.empty()) write_trace(req.trace, plan, t);
        const int rc = req.report(plan, in, res->run, extra, text);
        if (rc == 0) append_time(f.append_measurements, row, res->run.time_ms);
        return rc;
      },
      exit_code_of, req.timeout_s);
  if (!code) {
    std::fprintf(stderr, "charm: error: %s\n", code.error().message().c_str());
    ctx->abort(kExitRuntime);
  }
  return *code;
}
#endif

int run_cuda(const RunRequest& req, const CudaFlags& f) {
  // Without a device nothing else matters: one line, exit 2 (bad input for this machine).
  const std::string flag = fmt::format("--backend {}", enum_name(req.backend, kBackendNames));
  if (auto n = rt::cuda::device_count(); !n) fail(Error{flag, n.error().message()});
  if (f.warmup < 0) fail(Error{"--warmup", "must be >= 0"});
  const auto budget = unwrap(parse_size(f.tile_budget, "--tile-budget"));
  if (budget < (1 << 20)) fail(Error{"--tile-budget", "must be at least 1M"});
  rt::cuda::CudaRunOptions opt{req.timeout_s, f.warmup, f.device, std::size_t(budget), {}};
  opt.faults.drop_first_send = req.faults.drop_first_send;  // the GPU backends' one injected fault
  const auto plan = req.plan->make_validated();             // every process proves its own
  if (auto s = rt::cuda::supports(*plan); !s) fail(Error{flag, s.error().what});
  const calib::Measurement row = f.append_measurements.empty() ? calib::Measurement{} : measurement_of(*plan);
  if (req.backend == Backend::CudaLocal) return run_on_one_gpu(req, f, plan, opt, row);
#ifdef CHARM_RT_HAVE_NCCL
  return run_nccl_job(req, f, plan, opt, row);
#else
  fail(Error{"--backend", "this charm was built without NCCL or MPI: only cuda-local is available"});
#endif
}

const bool registered = [] {
  auto f = std::make_shared<CudaFlags>();
  run_backends().push_back(RunBackend{
      {"cuda-local", "cuda"},
      [f](CLI::App& sub) {
        auto* g = "GPU backends (cuda-local: every rank on one GPU; cuda: one GPU per rank under mpirun)";
        sub.add_option("--device", f->device, "cuda-local: the GPU to use")->capture_default_str()->group(g);
        sub.add_option("--warmup", f->warmup, "cuda backends: untimed runs before the timed one")
            ->capture_default_str()
            ->group(g);
        sub.add_option("--tile-budget", f->tile_budget, "cuda backends: score-tile memory per compute stream")
            ->capture_default_str()
            ->group(g);
        sub.add_option("--append-measurements", f->append_measurements,
                       "cuda backends: append the measured time as a row of charm calibrate's measurements CSV "
                       "(the header first when the file is new)")
            ->group(g);
      },
      [f](const RunRequest& req) { return run_cuda(req, *f); },
      [f] {
        return FlagPaths{{"--append-measurements", f->append_measurements}};
      }});
  return true;
}();

}  // namespace
}  // namespace charm::cli
