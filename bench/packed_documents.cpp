// Packed documents: the balanced layout's solver against TransformerEngine's THD layout on random document sets.
//
//   packed_documents [SETS] [SEED] [HEADS] [KV_HEADS] [--csv FILE]
//
// For 16 ranks (h100-2x8) and 64 ranks (the same cluster generated with 8 nodes): SETS random document sets,
// lengths log-uniform in [512, 64k] tokens rounded to a multiple of 2 x ranks (THD's padding unit, so THD
// applies without padding), summing to a total drawn from 128k to 1M (a multiple of 2 x ranks x 1024). Each set
// is solved for the ring, both passes, HEADS query and KV_HEADS kv heads (default 8 and 8) of 128, bf16; the line per
// set gives the balanced layout's simulated time, THD's, their ratio and the solve time. The summary gives the mean and
// worst ratio and the median and slowest solve (bench/RESULTS.md, "Packed documents").
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "sim/chunk_solver.hpp"
#include "topologies/topology_json.hpp"

namespace {

using namespace charm;

topo::Topology cluster(int nodes) {
  auto doc = topo::read_topology_json(std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json");
  if (!doc) throw std::runtime_error(doc.error().message());
  (*doc)["nodes"] = nodes;
  (*doc)["name"] = fmt::format("h100-{}x8", nodes);
  auto t = topo::parse_topology(*doc, fmt::format("h100-{}x8", nodes));
  if (!t) throw std::runtime_error(t.error().message());
  return *t;
}

ir::Workload random_set(std::mt19937_64& rng, int ranks, std::int64_t heads, std::int64_t kv_heads) {
  ir::Workload w;
  w.heads = heads;
  w.kv_heads = kv_heads;
  w.head_dim = 128;
  w.causal = true;
  w.layout = ir::Layout::Balanced;
  w.pass = ir::PassKind::Both;
  const std::int64_t unit = 2 * ranks, block = unit * 1024;
  w.seq = std::uniform_int_distribution<std::int64_t>(131072 / block, 1048576 / block)(rng) * block;
  std::uniform_real_distribution<double> len(std::log(512.0), std::log(65536.0));
  for (std::int64_t left = w.seq; left > 0;) {
    const std::int64_t l = std::min(left, std::max(unit, std::int64_t(std::exp(len(rng))) / unit * unit));
    w.documents.push_back(l);
    left -= l;
  }
  return w;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int sets = argc > 1 ? std::atoi(argv[1]) : 100;
  const std::uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 52;
  const std::int64_t heads = argc > 3 ? std::atoll(argv[3]) : 8, kv_heads = argc > 4 ? std::atoll(argv[4]) : heads;
  std::ofstream csv;
  if (argc > 6 && std::string(argv[5]) == "--csv") {
    csv.open(argv[6]);
    csv << "ranks,set,seq,documents,balanced_ms,thd_ms,contiguous_ms,ratio,candidate,solve_ms\n";
  }
  for (const int ranks : {16, 64}) {
    const topo::Topology t = cluster(ranks / 8);
    std::mt19937_64 rng(seed + std::uint64_t(ranks));
    std::vector<double> ratios, solve_ms;
    int above = 0;
    for (int i = 0; i < sets; ++i) {
      const ir::Workload w = random_set(rng, ranks, heads, kv_heads);
      auto s = sim::solve_chunk_map({"ring", w, ranks, ranks / 8}, t);
      if (!s) {
        std::fprintf(stderr, "set %d: %s\n", i, s.error().message().c_str());
        return 1;
      }
      const double ratio = s->best.makespan_s / s->thd->makespan_s;
      ratios.push_back(ratio);
      solve_ms.push_back(s->solve_ms);
      above += ratio > 1;
      if (csv.is_open())
        csv << fmt::format("{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{},{:.1f}\n", ranks, i, w.seq, w.documents.size(),
                           s->best.makespan_s * 1e3, s->thd->makespan_s * 1e3, s->contiguous.makespan_s * 1e3, ratio,
                           s->candidate, s->solve_ms);
    }
    double mean = 0;
    for (double r : ratios) mean += r / double(ratios.size());
    std::printf(
        "H=%lld/%lld, %d ranks on %s, %d sets: balanced/THD mean %.3f (%.1f%% below), worst %.3f, best %.3f, above THD "
        "%d; solve median %.0f ms, max %.0f ms\n",
        static_cast<long long>(heads), static_cast<long long>(kv_heads), ranks, t.name.c_str(), sets, mean,
        100 * (1 - mean), *std::max_element(ratios.begin(), ratios.end()),
        *std::min_element(ratios.begin(), ratios.end()), above, median(solve_ms),
        *std::max_element(solve_ms.begin(), solve_ms.end()));
  }
  return 0;
}
