// charm bench-kernels --backend cpu|cuda --out FILE: single-device attention kernel times,
// the CSV `charm calibrate --kernels` fits (see calibrate/kernel_times.hpp).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>

#include "runtime/cpu_attention.hpp"
#include "tools/bench_kernels.hpp"
#include "tools/cli_common.hpp"

namespace charm::cli {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// A whole number in [1, max] (parse_size's forms: 4096, 4k); errors name the flag.
std::int64_t count_flag(const std::string& text, const std::string& flag, std::int64_t max) {
  const std::int64_t n = unwrap(parse_size(text, flag));
  if (n < 1 || n > max) fail(Error{flag, fmt::format("must be in [1, {}], got {}", max, n)});
  return n;
}

}  // namespace

Expected<double> time_cpu_kernel(const KernelBenchSpec& spec, const calib::KernelTime& row) {
  const auto& w = row.workload;
  const std::int64_t tq = row.q_tokens, tk = row.kv_tokens;
  rt::AttnShape a{w.batch, w.heads, w.kv_heads, w.head_dim, float(1.0 / std::sqrt(double(w.head_dim))), row.causal};
  const auto nq = std::size_t(w.batch * tq * w.heads * w.head_dim);
  const auto nk = std::size_t(w.batch * tk * w.kv_heads * w.head_dim);
  const auto nl = std::size_t(w.batch * w.heads * tq);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& x) {
    for (auto& e : x) e = normal(rng);
  };
  std::vector<float> q(nq), k(nk), v(nk), out(nq), lse(nl), dout(nq), delta(nl), dq(nq), dk(nk), dv(nk);
  fill(q);
  fill(k);
  fill(v);
  fill(dout);
  std::vector<std::int64_t> qpos(static_cast<std::size_t>(tq)), kpos(static_cast<std::size_t>(tk));
  // A causal block is the diagonal one (tq == tk); a full block's keys all come before its queries.
  for (std::int64_t i = 0; i < tk; ++i) kpos[std::size_t(i)] = i;
  for (std::int64_t i = 0; i < tq; ++i) qpos[std::size_t(i)] = row.causal ? i : tk + i;
  const bool fwd = w.pass == ir::PassKind::Fwd;
  if (!fwd) {  // the backward needs the forward's lse and delta
    rt::attention_fwd_block(a, q.data(), qpos, k.data(), v.data(), kpos, out.data(), lse.data());
    rt::bundle_delta(a, tq, dout.data(), out.data(), delta.data());
  }
  auto once = [&] {
    if (fwd)
      rt::attention_fwd_block(a, q.data(), qpos, k.data(), v.data(), kpos, out.data(), lse.data());
    else
      rt::attention_bwd_block(a, q.data(), dout.data(), lse.data(), delta.data(), qpos, k.data(), v.data(), kpos,
                              dq.data(), dk.data(), dv.data());
  };
  for (int i = 0; i < spec.warmup; ++i) once();
  std::vector<double> ms;
  for (int i = 0; i < spec.repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

namespace {

/// --backend: the kernels on the CPU (fp32) or on a GPU.
constexpr EnumName<bool> kOnGpu[] = {{"cpu", false}, {"cuda", true}};

struct BenchKernelsOpts {
  std::string backend = "cpu", out, pass = "both", tokens = "128,256,512,1024", mask = "full,causal";
  std::string batch = "1", heads = "8", kv_heads, head_dim = "64", dtype = "bf16";
  int repeats = 5, warmup = 1, device = 0;
};

/// The flags checked into what to time, and the backend's timer.
KernelBenchSpec bench_spec(const BenchKernelsOpts& o, KernelTimer& timer) {
  check_command_files({{}, {{"--out", o.out}}, {}});
  KernelBenchSpec spec;
  const auto on_gpu = parse_enum(o.backend, kOnGpu);
  if (!on_gpu) fail(Error{"--backend", fmt::format("must be cpu or cuda, got '{}'", o.backend)});
  timer = &time_cpu_kernel;
  spec.on_gpu = *on_gpu;
  if (spec.on_gpu) {
#ifdef CHARM_CLI_HAVE_CUDA
    timer = &time_cuda_kernel;
#else
    fail(Error{"--backend", "cuda: this charm was built without the CUDA toolkit"});
#endif
  }
  const auto pass = ir::parse_pass(o.pass);
  if (!pass) fail(Error{"--pass", fmt::format("must be fwd, bwd or both, got '{}'", o.pass)});
  if (*pass == ir::PassKind::Both)
    spec.passes = {ir::PassKind::Fwd, ir::PassKind::Bwd};
  else
    spec.passes = {*pass};
  for (const auto& m : split_list(o.mask)) {
    const auto causal = parse_enum(m, calib::kKernelMaskNames);
    if (!causal) fail(Error{"--mask", fmt::format("must be full or causal, got '{}'", m)});
    spec.causal.push_back(*causal);
  }
  if (spec.causal.empty()) fail(Error{"--mask", "names no mask"});
  for (const auto& t : split_list(o.tokens)) {
    spec.tokens.push_back(count_flag(t, "--tokens", std::int64_t{1} << 20));
  }
  if (spec.tokens.empty()) fail(Error{"--tokens", "names no size"});
  spec.batch = count_flag(o.batch, "--batch", 4096);
  spec.heads = count_flag(o.heads, "--heads", 4096);
  spec.kv_heads = o.kv_heads.empty() ? spec.heads : count_flag(o.kv_heads, "--kv-heads", 4096);
  if (spec.heads % spec.kv_heads != 0)
    fail(Error{"--kv-heads", fmt::format("{} does not divide --heads {}", spec.kv_heads, spec.heads)});
  spec.head_dim = count_flag(o.head_dim, "--head-dim", 1024);
  if (auto d = ir::parse_dtype(o.dtype); d)
    spec.dtype = *d;
  else
    fail(Error{"--dtype", d.error().what});
  if (o.repeats < 1 || o.repeats > 10000)
    fail(Error{"--repeats", fmt::format("must be in [1, 10000], got {}", o.repeats)});
  if (o.warmup < 0 || o.warmup > 10000) fail(Error{"--warmup", fmt::format("must be in [0, 10000], got {}", o.warmup)});
  spec.repeats = o.repeats;
  spec.warmup = o.warmup;
  spec.device = o.device;
  // The largest block's buffers, before any work: the CPU backend holds about ten of them.
  const std::int64_t tmax = *std::max_element(spec.tokens.begin(), spec.tokens.end());
  const double bytes = 10.0 * 4 * double(spec.batch) * double(tmax) * double(spec.heads) * double(spec.head_dim);
  if (bytes > 16e9)
    fail(Error{"--tokens",
               fmt::format("a block of {} tokens needs about {:.1f} GB of buffers; at most 16 GB", tmax, bytes / 1e9)});

  return spec;
}

/// Times every (pass, tokens, mask) row and writes the CSV.
void bench_kernels(const BenchKernelsOpts& o, const KernelBenchSpec& spec, KernelTimer timer) {
  std::string csv = "# charm bench-kernels --backend " + o.backend + ": median of " + std::to_string(spec.repeats) +
                    " timed calls per row\n" + calib::kernel_times_header() + "\n";
  const std::size_t total = spec.passes.size() * spec.tokens.size() * spec.causal.size();
  std::size_t done = 0;
  for (const auto pass : spec.passes)
    for (const auto t : spec.tokens)
      for (const bool causal : spec.causal) {
        calib::KernelTime row;
        row.workload.pass = pass;
        row.workload.batch = spec.batch;
        row.workload.heads = spec.heads;
        row.workload.kv_heads = spec.kv_heads;
        row.workload.head_dim = spec.head_dim;
        row.workload.dtype = spec.on_gpu ? spec.dtype : ir::DType::FP32;
        row.workload.seq = t;
        row.q_tokens = row.kv_tokens = t;
        row.causal = causal;
        row.time_ms = unwrap(timer(spec, row));
        csv += calib::kernel_time_row(row) + "\n";
        ++done;
        std::cerr << fmt::format("charm bench-kernels: {}/{}: {} {} tokens {}: {:.4g} ms\n", done, total,
                                 ir::to_string(pass), t, causal ? "causal" : "full", row.time_ms);
      }
  write_file_atomic(o.out, csv);
  std::cout << fmt::format("wrote {} kernel times to {}\n", total, o.out);
}

void register_bench_kernels(CLI::App& app) {
  auto o = std::make_shared<BenchKernelsOpts>();
  auto* sub = app.add_subcommand(
      "bench-kernels", "time the attention block kernels on one device and write the CSV calibrate --kernels fits");
  sub->add_option("--backend", o->backend, "cpu (this machine's cores, fp32) or cuda (one GPU)")->capture_default_str();
  sub->add_option("--out,-o", o->out, "kernel-times CSV to write")->required();
  sub->add_option("--pass", o->pass, "fwd, bwd or both")->capture_default_str();
  sub->add_option("--tokens", o->tokens, "comma-separated query (= key) tokens of a block")->capture_default_str();
  sub->add_option("--mask", o->mask, "full, causal or both (full,causal)")->capture_default_str();
  sub->add_option("--batch", o->batch, "batch")->capture_default_str();
  sub->add_option("--heads", o->heads, "query heads")->capture_default_str();
  sub->add_option("--kv-heads", o->kv_heads, "key/value heads (default: heads)");
  sub->add_option("--head-dim", o->head_dim, "head dimension")->capture_default_str();
  sub->add_option("--dtype", o->dtype, "bf16, fp16 or fp32 (cuda; the cpu kernels compute in fp32)")
      ->capture_default_str();
  sub->add_option("--repeats", o->repeats, "timed calls per row (the median is written)")->capture_default_str();
  sub->add_option("--warmup", o->warmup, "untimed calls first")->capture_default_str();
  sub->add_option("--device", o->device, "CUDA device (cuda)")->capture_default_str();
  sub->callback([o] {
    KernelTimer timer = nullptr;
    const KernelBenchSpec spec = bench_spec(*o, timer);
    bench_kernels(*o, spec, timer);
  });
}

const Registrar bench_kernels_registered{"bench-kernels", register_bench_kernels};

}  // namespace
}  // namespace charm::cli
