// Packed documents and sliding windows: the mask's pair counts against brute force, every planner
// (both layouts) run for real on threads against the dense fp64 reference under the same mask,
// and the plan's compute equal to the visible pairs' FLOPs.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <random>
#include <string>
#include <vector>

#include "runtime/check.hpp"
#include "runtime/executor.hpp"
#include "runtime/reference.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"

namespace charm::rt {
namespace {

/// Brute force: query q sees key k iff k <= q, both in one document, and q - k < window.
double brute_pairs(const ir::Workload& w, std::int64_t qa, std::int64_t qb, std::int64_t ka, std::int64_t kb) {
  std::vector<std::int64_t> doc(std::size_t(w.seq), 0);
  std::int64_t p = 0;
  for (std::size_t d = 0; d < w.documents.size(); ++d)
    for (std::int64_t i = 0; i < w.documents[d]; ++i) doc[std::size_t(p++)] = std::int64_t(d);
  double n = 0;
  for (std::int64_t q = qa; q < qb; ++q)
    for (std::int64_t k = ka; k < kb; ++k)
      n += k <= q && doc[std::size_t(q)] == doc[std::size_t(k)] && (w.window == 0 || q - k < w.window);
  return n;
}

TEST(Masks, PairCountsEqualBruteForce) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    ir::Workload w;
    w.seq = 96;
    w.causal = true;
    if (trial % 3 != 1) {
      for (std::int64_t left = w.seq; left > 0;) {
        const std::int64_t len = std::min<std::int64_t>(left, 1 + std::int64_t(rng() % 40));
        w.documents.push_back(len);
        left -= len;
      }
    }
    if (trial % 3 != 0) w.window = 1 + std::int64_t(rng() % 50);
    std::int64_t r[4];
    for (auto& x : r) x = std::int64_t(rng() % 97);
    const std::int64_t qa = std::min(r[0], r[1]), qb = std::max(r[0], r[1]);
    const std::int64_t ka = std::min(r[2], r[3]), kb = std::max(r[2], r[3]);
    ASSERT_EQ(w.pairs_in(qa, qb, ka, kb), brute_pairs(w, qa, qb, ka, kb))
        << w.mask_text() << " q [" << qa << ", " << qb << ") k [" << ka << ", " << kb << ")";
  }
}

TEST(Masks, SpellingsAndTheirErrors) {
  ir::Workload w;
  w.seq = 512;
  ASSERT_TRUE(ir::apply_mask(w, "document:100,412").ok());
  EXPECT_TRUE(w.causal);
  EXPECT_EQ(w.mask_text(), "document:100,412");
  EXPECT_TRUE(w.check(4).ok());
  ASSERT_TRUE(ir::apply_mask(w, "document:100,400").ok());
  EXPECT_EQ(w.check(4).error().message(), "--mask: the document lengths sum to 500, not the sequence length 512");
  ASSERT_TRUE(ir::apply_mask(w, "sliding:64").ok());
  EXPECT_EQ(w.mask_text(), "sliding:64");
  EXPECT_TRUE(w.documents.empty());
  EXPECT_EQ(ir::apply_mask(w, "sliding:0").error().message(), "--mask: '0' in 'sliding:0' is not a token count >= 1");
  EXPECT_FALSE(ir::apply_mask(w, "window:4").ok());
}

struct Case {
  std::string algo;
  int ranks = 4, domains = 1;
  ir::Layout layout = ir::Layout::Contiguous;
  bool documents = true;  // else a sliding window
};

ir::Workload workload_of(const Case& c) {
  ir::Workload w;
  w.batch = 1;
  w.seq = 512;
  w.heads = 4;
  w.kv_heads = 4;
  w.head_dim = 16;
  w.dtype = ir::DType::FP32;
  w.causal = true;
  w.layout = c.layout;
  w.pass = c.algo.starts_with("tasp") ? ir::PassKind::Fwd : ir::PassKind::Both;  // TASP is forward only
  // 8 packed documents of mixed lengths; on the zigzag layout each is split into 2N chunks (TransformerEngine's
  // THD layout), so each is a multiple of 16 tokens, as TE pads them.
  if (c.documents && c.layout == ir::Layout::Zigzag)
    w.documents = {96, 32, 80, 64, 16, 128, 48, 48};
  else if (c.documents)
    w.documents = {100, 20, 92, 64, 1, 127, 60, 48};
  else
    w.window = 100;
  return w;
}

class MaskExact : public ::testing::TestWithParam<Case> {};

TEST_P(MaskExact, MatchesDenseReferenceAndCostsTheVisiblePairs) {
  const Case& c = GetParam();
  const ir::Workload w = workload_of(c);
  auto plan = sched::make_plan({c.algo, w, c.ranks, c.domains});
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const auto valid = sched::validated(*plan);
  ASSERT_TRUE(valid.ok()) << valid.error().message();
  // Compute: 4 B H D per visible pair forward, 2.5 times that backward (FlashAttention's count).
  double pairs = 0;
  for (std::int64_t q = 0; q < w.seq; ++q) pairs += double(q - w.first_visible(q) + 1);
  double fwd = 0, bwd = 0;
  for (const auto& o : plan->ops())
    if (o.kind == ir::OpKind::Compute) (o.phase == ir::Phase::Fwd ? fwd : bwd) += o.flops;
  const double per_pair = 4.0 * double(w.batch * w.heads * w.head_dim);
  const bool backward = w.pass != ir::PassKind::Fwd;
  EXPECT_EQ(fwd, per_pair * pairs);
  EXPECT_EQ(bwd, backward ? 2.5 * per_pair * pairs : 0.0);
  const GlobalTensors in = make_inputs(w, 7);
  const Reference ref = reference_attention(w, in, backward);
  auto res = run_threads(*valid, in, RunOptions{60});
  ASSERT_TRUE(res.ok()) << res.error().message();
  const auto chk = check_against(res->out, ref, w.dtype);
  const std::pair<const char*, const std::optional<TensorError>*> all[] = {
      {"out", &chk.out}, {"lse", &chk.lse}, {"dq", &chk.dq}, {"dk", &chk.dk}, {"dv", &chk.dv}};
  for (const auto& [name, e] : all) {
    if (!backward && name != std::string("out") && name != std::string("lse")) continue;
    ASSERT_TRUE(e->has_value()) << name << " was not produced";
    EXPECT_LE((*e)->max_rel, 1e-5) << name << " max_abs " << (*e)->max_abs;
  }
}

/// Every algorithm, on both layouts where it takes either (charm on two domain counts, usp over 2 x 2).
std::vector<Case> cases() {
  std::vector<Case> v;
  for (const bool docs : {true, false})
    for (const std::string& algo : sched::algorithm_names())
      for (const auto layout : {ir::Layout::Contiguous, ir::Layout::Zigzag}) {
        if (algo.ends_with("-zigzag") && layout != ir::Layout::Zigzag) continue;
        v.push_back({algo, 4, algo == "charm" || algo == "usp" ? 2 : 1, layout, docs});
        if (algo == "charm") v.push_back({algo, 8, 2, layout, docs});
      }
  return v;
}

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string a = c.algo;
  for (char& ch : a) ch = ch == '-' ? '_' : ch == '+' ? 'p' : ch;
  return a + "_n" + std::to_string(c.ranks) + "_d" + std::to_string(c.domains) +
         (c.layout == ir::Layout::Zigzag ? "_zigzag" : "_contig") + (c.documents ? "_documents" : "_sliding");
}

INSTANTIATE_TEST_SUITE_P(Masks, MaskExact, ::testing::ValuesIn(cases()), name_of);

/// The small packed-documents workload of the random-set tests (fp32, both passes) on `layout`; the documents are
/// the test's.
ir::Workload small_packed(ir::Layout layout) {
  ir::Workload w;
  w.heads = w.kv_heads = 2;
  w.head_dim = 8;
  w.dtype = ir::DType::FP32;
  w.causal = true;
  w.layout = layout;
  w.pass = ir::PassKind::Both;
  return w;
}

/// `algo`'s plan of `w` validated and run on threads, every output within 1e-5 of the dense fp64 reference.
void expect_exact_on_threads(const std::string& algo, const ir::Workload& w, int ranks, int domains,
                             std::uint64_t seed) {
  auto plan = sched::make_plan({algo, w, ranks, domains});
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const auto valid = sched::validated(*plan);
  ASSERT_TRUE(valid.ok()) << valid.error().message();
  const GlobalTensors in = make_inputs(w, seed);
  const Reference ref = reference_attention(w, in, true);
  auto res = run_threads(*valid, in, RunOptions{60});
  ASSERT_TRUE(res.ok()) << res.error().message();
  const auto chk = check_against(res->out, ref, w.dtype);
  for (const auto* e : {&chk.out, &chk.dq, &chk.dk, &chk.dv}) {
    ASSERT_TRUE(e->has_value());
    ASSERT_LE((*e)->max_rel, 1e-5);
  }
}

// TransformerEngine's THD layout (each packed document zigzag on its own) is exact on random document sets:
// 200 sets of 1 to 12 documents (multiples of 2N tokens, as TE pads them), ring and charm, forward and
// backward together, each plan validated and run on threads against the dense fp64 reference; every rank
// holds the same visible pairs of each document, so the compute is balanced to the pair.
TEST(ThdLayout, RandomDocumentSetsAreExactAndBalanced) {
  std::mt19937 rng(52);
  for (int trial = 0; trial < 200; ++trial) {
    const bool charm = trial % 2 == 1;
    const int ranks = charm ? 8 : 4, domains = charm ? 2 : 1;
    ir::Workload w = small_packed(ir::Layout::Zigzag);
    const int docs = 1 + int(rng() % 12);
    for (int d = 0; d < docs; ++d) w.documents.push_back(2 * ranks * (1 + std::int64_t(rng() % 6)));
    w.seq = 0;
    for (const auto len : w.documents) w.seq += len;
    SCOPED_TRACE(fmt::format("trial {} {} on {}: {}", trial, charm ? "charm" : "ring", ranks, w.mask_text()));
    double first = -1;
    for (int q = 0; q < ranks; ++q) {
      double mine = 0;
      for (int k = 0; k < ranks; ++k) mine += w.visible_pairs(q, k, ranks);
      if (first < 0) first = mine;
      ASSERT_EQ(mine, first) << "rank " << q;
    }
    ASSERT_NO_FATAL_FAILURE(expect_exact_on_threads(charm ? "charm" : "ring", w, ranks, domains, trial));
  }
}

/// A random chunk map: the sequence cut in units of `unit` tokens, dealt to the ranks in a random order
/// (S/n tokens each), each rank's units in position order, neighbours joined.
std::vector<std::vector<ir::Workload::Range>> random_chunk_map(std::int64_t seq, int ranks, std::int64_t unit,
                                                               std::mt19937& rng) {
  std::vector<std::int64_t> units(std::size_t(seq / unit));
  for (std::size_t i = 0; i < units.size(); ++i) units[i] = std::int64_t(i) * unit;
  std::shuffle(units.begin(), units.end(), rng);
  const std::size_t per = units.size() / std::size_t(ranks);
  std::vector<std::vector<ir::Workload::Range>> map(static_cast<std::size_t>(ranks));
  for (std::size_t r = 0; r < map.size(); ++r) {
    std::sort(units.begin() + std::ptrdiff_t(r * per), units.begin() + std::ptrdiff_t((r + 1) * per));
    for (std::size_t i = r * per; i < (r + 1) * per; ++i) {
      auto& chunks = map[r];
      if (!chunks.empty() && chunks.back().begin + chunks.back().count == units[i])
        chunks.back().count += unit;
      else
        chunks.push_back({units[i], unit});
    }
  }
  return map;
}

// The balanced layout takes any chunk map, and on it the ring forwards a shard only as far as its last reader
// (and its dK/dV sum goes home from there): 200 random document sets on random chunk maps, ring and charm,
// forward and backward together, each plan validated and run on threads against the dense fp64 reference. Half
// the sets run on the contiguous cut, which keeps documents whole where they fit (the ring stops early), half on
// units dealt to the ranks in a random order.
TEST(BalancedLayout, RandomChunkMapsAreExact) {
  std::mt19937 rng(5252);
  for (int trial = 0; trial < 200; ++trial) {
    const bool charm = trial % 2 == 1;
    const int ranks = charm ? 8 : 4, domains = charm ? 2 : 1;
    ir::Workload w = small_packed(ir::Layout::Balanced);
    const std::int64_t unit = 1 + std::int64_t(rng() % 8);
    w.seq = unit * ranks * (2 + std::int64_t(rng() % 6));
    for (std::int64_t left = w.seq; left > 0;) {
      const std::int64_t len = std::min<std::int64_t>(left, 1 + std::int64_t(rng() % std::uint64_t(w.seq / 2)));
      w.documents.push_back(len);
      left -= len;
    }
    // Half the trials: the contiguous cut (documents whole where they fit, so the ring stops early); half: dealt units.
    if (trial % 4 < 2) {
      w.chunk_map.assign(std::size_t(ranks), {});
      for (int r = 0; r < ranks; ++r) w.chunk_map[std::size_t(r)] = {{r * (w.seq / ranks), w.seq / ranks}};
    } else {
      w.chunk_map = random_chunk_map(w.seq, ranks, unit, rng);
    }
    SCOPED_TRACE(fmt::format("trial {} {} on {}: {}", trial, charm ? "charm" : "ring", ranks, w.mask_text()));
    ASSERT_NO_FATAL_FAILURE(expect_exact_on_threads(charm ? "charm" : "ring", w, ranks, domains, trial));
  }
}

// The ring on the balanced layout sends a shard exactly as far as its furthest reader, and no further: on the
// contiguous cut of documents that each fit one shard, no KV moves at all, and a document over two shards moves
// its first shard's KV one hop.
TEST(BalancedLayout, TheRingStopsAtTheLastReader) {
  ir::Workload w;
  w.seq = 64;
  w.heads = w.kv_heads = 1;
  w.head_dim = 8;
  w.causal = true;
  w.layout = ir::Layout::Balanced;
  w.pass = ir::PassKind::Both;
  w.documents = {16, 16, 32};  // 4 ranks of 16 tokens: the third document spans ranks 2 and 3
  for (int r = 0; r < 4; ++r) w.chunk_map.push_back({{16 * r, 16}});
  auto plan = sched::make_plan({"ring", w, 4, 1});
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  ASSERT_TRUE(sched::validate(*plan).ok());
  std::vector<std::string> sends;
  for (ir::OpId id = 0; id < ir::OpId(plan->size()); ++id)
    if (plan->op(id).kind == ir::OpKind::Send) sends.push_back(ir::op_label(*plan, id));
  // Forward: kv2 -> 3. Backward: kv2 -> 3 again, and rank 3's dK/dV of rank 2's keys home (rank 2 keeps its own).
  ASSERT_EQ(sends.size(), 3u) << fmt::format("{}", fmt::join(sends, "; "));
  for (const auto& s : sends)
    EXPECT_TRUE(s.find("2 -> 3") != std::string::npos || s.find("dkv2 -> 2") != std::string::npos) << s;
}

}  // namespace
}  // namespace charm::rt
