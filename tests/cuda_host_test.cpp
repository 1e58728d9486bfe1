// Host-side pieces of the GPU executor that need no device: the device buffer
// layout against the plan's byte counts, the timeline summary on hand-made
// intervals (arithmetic in the comments), the up-front plan check, and the
// runner's region-plan decisions (views, wire bytes, region copies, compute
// blocks and masks) against the CPU executor's on ulysses, usp and tasp plans.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/buffer_store.hpp"
#include "runtime/cuda/device_plan.hpp"
#include "runtime/region_copy.hpp"
#include "scheduler/planners/planners.hpp"

#include "runtime/cuda/cublas_loader.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/cuda/device_layout.hpp"
#ifdef CHARM_RT_HAVE_NCCL
#include "runtime/cuda/nccl_backend.hpp"
#endif

namespace charm::rt::cuda {
namespace {

ir::Workload small() {
  ir::Workload w;
  w.batch = 2;
  w.seq = 512;
  w.heads = 8;
  w.kv_heads = 2;
  w.head_dim = 64;
  w.dtype = ir::DType::BF16;
  return w;
}

TEST(DeviceLayout, MatchesPlanBytesExceptFp32OutputInMemory) {
  const auto w = small();
  const int n = 4;
  const auto ss = ShardShape::of(w, n);
  auto bytes = [&](ir::BufKind k) { return DeviceLayout::of(k, ss, w.dtype).bytes; };
  // Every section here is a multiple of 256 bytes, so no padding.
  EXPECT_EQ(bytes(ir::BufKind::Q), w.q_bytes(n));
  EXPECT_EQ(bytes(ir::BufKind::Kv), w.kv_bytes(n));
  EXPECT_EQ(bytes(ir::BufKind::Dout), w.do_bytes(n));
  EXPECT_EQ(bytes(ir::BufKind::QBundle), w.qbundle_bytes(n));
  EXPECT_EQ(bytes(ir::BufKind::Dq), w.dq_bytes(n));
  EXPECT_EQ(bytes(ir::BufKind::Dkv), w.dkv_bytes(n));
  // Out keeps O in fp32 in memory: 2 bytes more per element of O than the plan's bf16 O;
  // on the wire O is bf16, the plan's count.
  EXPECT_EQ(bytes(ir::BufKind::Out), w.out_bytes(n) + w.q_bytes(n));
  EXPECT_EQ(DeviceLayout::of(ir::BufKind::Out, ss, w.dtype, true).bytes, w.out_bytes(n));
  EXPECT_EQ(DeviceLayout::of(ir::BufKind::Out, ss, ir::DType::FP32, true).bytes,
            DeviceLayout::of(ir::BufKind::Out, ss, ir::DType::FP32).bytes);
}

TEST(DeviceLayout, SectionsAreAlignedAndInCpuOrder) {
  ir::Workload w = small();
  w.seq = 12;  // 3 tokens per rank: sections of odd sizes
  w.head_dim = 3;
  w.dtype = ir::DType::FP16;
  const auto ss = ShardShape::of(w, 4);
  const auto l = DeviceLayout::of(ir::BufKind::QBundle, ss, w.dtype);
  ASSERT_EQ(l.sections.size(), 4u);
  EXPECT_EQ(l.host_elems(), ss.elems(ir::BufKind::QBundle));
  for (const auto& s : l.sections) EXPECT_EQ(s.offset % DeviceLayout::kAlign, 0u);
  EXPECT_FALSE(l.sections[0].f32);
  EXPECT_FALSE(l.sections[1].f32);
  EXPECT_TRUE(l.sections[2].f32);
  EXPECT_TRUE(l.sections[3].f32);
  EXPECT_GE(l.bytes, l.sections[3].offset + std::size_t(l.sections[3].elems) * 4);
}

// Region plans (Ulysses, USP, TASP) pass the check that runs before any device or MPI
// call; a buffer that breaks the region rules is refused there, named.
TEST(Supports, RegionPlansPassAndBrokenRegionsAreRefused) {
  ir::Plan plan;
  plan.algo = "tasp";
  plan.workload = small();
  plan.ranks = 4;
  plan.parts = 2;
  plan.results().assign(4, {});
  ir::Buffer b;
  b.rank = 1;
  b.owner = 1;
  b.kind = ir::BufKind::Kv;
  b.part_begin = 0;
  b.parts = 1;
  b.bytes = ir::region_bytes(plan.workload, plan.ranks, plan.parts, b.kind, plan.region(b));
  (void)plan.add_buffer(b);
  ASSERT_TRUE(plan.has_regions());
  EXPECT_TRUE(supports(plan).ok()) << supports(plan).error().message();
  plan.parts = 3;  // 128 tokens a shard: 3 parts do not divide them
  const auto s = supports(plan);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("do not divide"), std::string::npos) << s.error().message();
}

// ---------------------------------------------------------------------------
// Region plans: the runner's host decisions (device_plan.hpp) against the CPU
// executor's for the same plans (ulysses, usp, tasp at small sizes).

struct RegionCase {
  std::string algo;
  int ranks = 4, domains = 1;
  ir::PassKind pass = ir::PassKind::Both;
  ir::DType dtype = ir::DType::BF16;
  ir::Layout layout = ir::Layout::Zigzag;
};

std::string case_name(const testing::TestParamInfo<RegionCase>& i) {
  std::string s = i.param.algo + "_n" + std::to_string(i.param.ranks) + "d" + std::to_string(i.param.domains) + "_" +
                  std::string(ir::to_string(i.param.pass)) + "_" + std::string(ir::to_string(i.param.dtype)) + "_" +
                  std::string(ir::to_string(i.param.layout));
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

ir::Plan region_plan(const RegionCase& c) {
  sched::PlanRequest req;
  req.algo = c.algo;
  req.ranks = c.ranks;
  req.domains = c.domains;
  // Every section a multiple of 256 bytes (64 tokens x 2 heads per block and up), so that the
  // device sizes are the plan's bytes exactly.
  req.workload.batch = 2;
  req.workload.seq = 1024;
  req.workload.heads = 8;
  req.workload.kv_heads = 4;
  req.workload.head_dim = 32;
  req.workload.dtype = c.dtype;
  req.workload.causal = true;
  req.workload.layout = c.layout;
  req.workload.pass = c.pass;
  auto plan = sched::make_plan(req);
  EXPECT_TRUE(bool(plan)) << plan.error().message();
  return plan ? std::move(*plan) : ir::Plan{};
}

std::vector<char> all_local(const ir::Plan& p) { return std::vector<char>(std::size_t(p.ranks), 1); }

// A buffer's CPU storage (fp32, sections back to back) as the device holds it: each element
// at its section's place, 4 bytes (fp32) or 2 (a half dtype's: the value as an integer).
std::vector<unsigned char> to_device(const std::vector<float>& cpu, const DeviceBuffer& d, ir::DType t) {
  std::vector<unsigned char> out(d.bytes(), 0xAB);
  std::size_t at = 0;
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x)
    for (const Section& s : d.layout.sections)
      for (std::int64_t i = 0; i < s.elems; ++i, ++at) {
        unsigned char* p = out.data() + d.block_at(x) + s.offset;
        if (s.f32 || t == ir::DType::FP32) {
          std::memcpy(p + 4 * std::size_t(i), &cpu[at], 4);
        } else {
          const auto v = static_cast<std::uint16_t>(static_cast<std::int64_t>(cpu[at]) & 0xffff);
          std::memcpy(p + 2 * std::size_t(i), &v, 2);
        }
      }
  return out;
}

void apply(const std::vector<Copy2D>& copies, const std::vector<unsigned char>& src, std::vector<unsigned char>& dst) {
  for (const Copy2D& c : copies) {
    ASSERT_LE(c.width, c.src_pitch);
    ASSERT_LE(c.width, c.dst_pitch);
    ASSERT_LE(c.src + (c.height - 1) * c.src_pitch + c.width, src.size());
    ASSERT_LE(c.dst + (c.height - 1) * c.dst_pitch + c.width, dst.size());
    for (std::size_t r = 0; r < c.height; ++r)
      std::memcpy(dst.data() + c.dst + r * c.dst_pitch, src.data() + c.src + r * c.src_pitch, c.width);
  }
}

// The device copy of region rs into rd against the CPU's copy_region, element by element.
void expect_same_copy(const ir::Workload& w, int ranks, int parts, ir::BufKind kind, const ir::Region& rs,
                      const ir::Region& rd) {
  auto dev = [&](const ir::Region& r) {
    DeviceBuffer d;
    d.region = r;
    d.block = ShardShape::of_region(w, ranks, parts, r);
    d.layout = DeviceLayout::of(kind, d.block, w.dtype);
    return d;
  };
  const DeviceBuffer s = dev(rs), d = dev(rd);
  std::vector<float> src(std::size_t(s.layout.host_elems() * rs.owners()));
  std::vector<float> dst(std::size_t(d.layout.host_elems() * rd.owners()), 7.0f);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = float(1 + i % 60000);
  const auto dev_src = to_device(src, s, w.dtype);
  auto dev_dst = to_device(dst, d, w.dtype);
  ASSERT_TRUE(copy_region(w, ranks, parts, kind, rs, src, rd, dst).ok());
  apply(region_copies(w, ranks, parts, kind, s, d), dev_src, dev_dst);
  EXPECT_TRUE(dev_dst == to_device(dst, d, w.dtype))
      << ir::to_string(kind) << " " << ir::to_string(w.dtype) << " " << ir::region_suffix(rs, w, parts) << " -> "
      << ir::region_suffix(rd, w, parts);
}

TEST(RegionCopies, MatchTheCpuCopyForEveryKindAndDtype) {
  ir::Workload w;
  w.batch = 2;
  w.seq = 4 * 4 * 3;  // 4 ranks, 4 parts of 3 tokens
  w.heads = 8;
  w.kv_heads = 4;
  w.head_dim = 3;
  const ir::Region whole{0, 4, 0, 4, 0, 4}, shard{2, 3, 0, 4, 0, 4};
  const ir::Region cut[] = {{2, 3, 1, 3, 0, 4}, {2, 3, 0, 4, 1, 3}, {1, 3, 2, 3, 3, 4}, {0, 4, 3, 4, 0, 2}};
  for (auto t : {ir::DType::FP32, ir::DType::BF16})
    for (auto k : {ir::BufKind::Q, ir::BufKind::Kv, ir::BufKind::Out, ir::BufKind::Dout, ir::BufKind::QBundle,
                   ir::BufKind::Dq, ir::BufKind::Dkv}) {
      w.dtype = t;
      for (const auto& r : cut) {
        expect_same_copy(w, 4, 4, k, whole, r);  // slice out
        expect_same_copy(w, 4, 4, k, r, whole);  // place back
        if (shard.contains(r)) {
          expect_same_copy(w, 4, 4, k, shard, r);
          expect_same_copy(w, 4, 4, k, r, shard);
        }
      }
    }
}

class RegionPlans : public testing::TestWithParam<RegionCase> {};

// Every view is its owners' sub-span of its root, at the CPU store's place (in blocks), and
// every block has the CPU's elements.
TEST_P(RegionPlans, ViewsSitWhereTheCpuStoreHasThem) {
  const ir::Plan plan = region_plan(GetParam());
  ASSERT_TRUE(plan.has_regions());
  auto dev = DeviceBuffers::of(plan, all_local(plan));
  ASSERT_TRUE(bool(dev)) << dev.error().message();
  int views = 0;
  for (ir::RankId r = 0; r < plan.ranks; ++r) {
    BufferStore store(plan, r, [](const ir::Buffer&, std::span<float>) { return Status{}; });
    for (ir::BufferId b = 0; b < ir::BufferId(plan.buffers().size()); ++b) {
      if (plan.buffer(b).rank != r) continue;
      const DeviceBuffer& d = (*dev)[b];
      const RegionLayout cpu = region_layout(plan, b);
      ASSERT_EQ(d.layout.host_elems(), cpu.block_elems) << ir::buffer_label(plan, b);
      const ir::BufferId p = plan.buffer(b).parent;
      if (p == ir::kNone) {
        EXPECT_EQ(d.root, b);
        EXPECT_EQ(d.offset, 0u);
        continue;
      }
      ++views;
      auto mine = store.get(b), root = store.get(p);
      ASSERT_TRUE(mine && root);
      const std::int64_t cpu_off = mine->data() - root->data();
      ASSERT_EQ(cpu_off % cpu.block_elems, 0);
      EXPECT_EQ(d.root, p);
      EXPECT_EQ(d.offset % (*dev)[p].layout.bytes, 0u);
      EXPECT_EQ(std::int64_t(d.offset / (*dev)[p].layout.bytes), cpu_off / cpu.block_elems)
          << ir::buffer_label(plan, b);
      EXPECT_LE(d.offset + d.bytes(), (*dev)[p].bytes());
    }
  }
  if (GetParam().algo.rfind("tasp", 0) != 0) {
    EXPECT_GT(views, 0);
  }
}

// Under mpirun a process holds one rank: its buffers sit where they sit with every rank
// local (offsets are per root), the others are not there, and no root of another rank
// gets a wire area.
TEST_P(RegionPlans, OneLocalRankHasTheSameLayout) {
  const ir::Plan plan = region_plan(GetParam());
  auto all = DeviceBuffers::of(plan, all_local(plan));
  ASSERT_TRUE(bool(all)) << all.error().message();
  for (ir::RankId r = 0; r < plan.ranks; ++r) {
    std::vector<char> one(std::size_t(plan.ranks), 0);
    one[std::size_t(r)] = 1;
    auto mine = DeviceBuffers::of(plan, one);
    ASSERT_TRUE(bool(mine)) << mine.error().message();
    for (ir::BufferId b = 0; b < ir::BufferId(plan.buffers().size()); ++b) {
      const DeviceBuffer &m = (*mine)[b], &a = (*all)[b];
      if (plan.buffer(b).rank != r) {
        EXPECT_EQ(m.root, ir::kNone);
        EXPECT_FALSE(mine->wire_root[std::size_t(b)]);
        continue;
      }
      EXPECT_EQ(m.root, a.root);
      EXPECT_EQ(m.offset, a.offset);
      EXPECT_EQ(m.bytes(), a.bytes());
      EXPECT_EQ(m.wire_offset, a.wire_offset);
      EXPECT_EQ(mine->wire_root[std::size_t(b)], all->wire_root[std::size_t(b)]);
    }
  }
}

// What travels is what the plan counts: a partial O in the dtype (the wire form of Out), the
// other kinds as stored; each transfer's two sides agree.
TEST_P(RegionPlans, WireBytesAreThePlansBytes) {
  const ir::Plan plan = region_plan(GetParam());
  auto dev = DeviceBuffers::of(plan, all_local(plan));
  ASSERT_TRUE(bool(dev)) << dev.error().message();
  const ir::PlanIndex idx(plan);
  int staged = 0;
  for (ir::OpId id = 0; id < ir::OpId(plan.size()); ++id) {
    if (plan.op(id).kind != ir::OpKind::Send) continue;
    const ir::BufferId sb = std::get<ir::SendArgs>(ir::args(plan.op(id))).src;
    const ir::OpId recv = idx.partner(id);
    ASSERT_NE(recv, ir::kNone);
    const ir::BufferId rb = std::get<ir::RecvArgs>(ir::args(plan.op(recv))).dst;
    const DeviceBuffer &s = (*dev)[sb], &d = (*dev)[rb];
    EXPECT_EQ(s.wire_bytes(), std::size_t(plan.buffer(sb).bytes)) << ir::buffer_label(plan, sb);
    EXPECT_EQ(s.wire_bytes(), d.wire_bytes());
    const bool out = plan.buffer(sb).kind == ir::BufKind::Out;
    EXPECT_EQ(s.staged, out && plan.workload.dtype != ir::DType::FP32);
    if (s.staged) {
      ++staged;
      EXPECT_TRUE(dev->wire_root[std::size_t(s.root)]);
      EXPECT_TRUE(dev->wire_root[std::size_t(d.root)]);
      EXPECT_LE(d.wire_offset + d.wire_bytes(), (*dev)[d.root].wire_bytes());
    }
  }
  if (plan.workload.dtype != ir::DType::FP32 && plan.algo.rfind("tasp", 0) != 0) {
    EXPECT_GT(staged, 0);
  }
}

// Each copy op's 2-D copies move what the CPU executor's copy_region moves.
TEST_P(RegionPlans, CopyOpsMoveWhatTheCpuMoves) {
  const ir::Plan plan = region_plan(GetParam());
  int copies = 0;
  for (ir::OpId id = 0; id < ir::OpId(plan.size()); ++id) {
    const auto args = ir::args(plan.op(id));
    const auto* a = std::get_if<ir::CopyArgs>(&args);  // a plain copy, not a pack
    if (a == nullptr) continue;
    ++copies;
    expect_same_copy(plan.workload, plan.ranks, plan.parts, plan.buffer(a->src).kind, plan.region(a->src),
                     plan.region(a->dst));
  }
  EXPECT_GT(copies, 0);
}

// Each compute runs the (q owner, kv owner) blocks the CPU executor runs (those with a visible
// pair), each with the visible key counts of its tokens.
TEST_P(RegionPlans, ComputeBlocksAndMasksAreTheCpus) {
  const ir::Plan plan = region_plan(GetParam());
  auto dev = DeviceBuffers::of(plan, all_local(plan));
  ASSERT_TRUE(bool(dev)) << dev.error().message();
  const auto& w = plan.workload;
  MaskTable masks(w, plan.ranks, plan.parts);
  const std::int64_t tp = w.seq / plan.ranks / plan.parts;
  std::size_t blocks = 0;
  for (ir::OpId id = 0; id < ir::OpId(plan.size()); ++id) {
    if (plan.op(id).kind != ir::OpKind::Compute) continue;
    auto c = compute_blocks(plan, id, *dev, masks);
    ASSERT_TRUE(bool(c)) << c.error().message();
    const auto bufs = ir::args(plan.op(id));
    const ir::BufferId q = std::holds_alternative<ir::ComputeFwdArgs>(bufs)
                               ? std::get<ir::ComputeFwdArgs>(bufs).q
                               : std::get<ir::ComputeBwdArgs>(bufs).qbundle;
    const ir::BufferId kv = std::holds_alternative<ir::ComputeFwdArgs>(bufs) ? std::get<ir::ComputeFwdArgs>(bufs).kv
                                                                             : std::get<ir::ComputeBwdArgs>(bufs).kv;
    const ir::Region rq = plan.region(q), rk = plan.region(kv);
    EXPECT_EQ(c->dims.tq, tp * rq.parts());
    EXPECT_EQ(c->dims.tk, tp * rk.parts());
    EXPECT_EQ(c->dims.kv_heads, rq.heads());
    EXPECT_EQ(c->dims.heads, rq.heads() * (w.heads / w.kv_heads));
    std::size_t k = 0;
    for (ir::RankId x = rq.owner_begin; x < rq.owner_end; ++x)
      for (ir::RankId y = rk.owner_begin; y < rk.owner_end; ++y) {
        const auto qa = token_positions(w, x, plan.ranks), ka = token_positions(w, y, plan.ranks);
        const std::vector<std::int64_t> qp(qa.begin() + tp * rq.part_begin, qa.begin() + tp * rq.part_end);
        const std::vector<std::int64_t> kp(ka.begin() + tp * rk.part_begin, ka.begin() + tp * rk.part_end);
        std::vector<int> want;
        bool any = false;
        for (std::int64_t p : qp) {
          int n = 0;
          for (std::int64_t kpos : kp) n += (!w.causal || kpos <= p) ? 1 : 0;
          want.push_back(n);
          any = any || n > 0;
        }
        if (!any) continue;
        ASSERT_LT(k, c->blocks.size());
        EXPECT_EQ(c->blocks[k].x, x);
        EXPECT_EQ(c->blocks[k].y, y);
        const std::vector<int> got(masks.counts().begin() + std::ptrdiff_t(c->blocks[k].mask),
                                   masks.counts().begin() + std::ptrdiff_t(c->blocks[k].mask + want.size()));
        EXPECT_EQ(got, want) << "op " << id << " block Q" << x << "*KV" << y;
        ++k;
      }
    EXPECT_EQ(k, c->blocks.size()) << "op " << id;
    blocks += k;
  }
  EXPECT_GT(blocks, 0u);
}

std::vector<RegionCase> region_cases() {
  std::vector<RegionCase> v;
  for (auto p : {ir::PassKind::Fwd, ir::PassKind::Bwd, ir::PassKind::Both}) {
    v.push_back({"ulysses", 4, 1, p});
    v.push_back({"usp", 4, 2, p});
  }
  v.push_back({"ulysses", 2, 1, ir::PassKind::Both, ir::DType::FP32, ir::Layout::Contiguous});
  v.push_back({"usp", 8, 2, ir::PassKind::Both, ir::DType::FP16});
  v.push_back({"tasp", 4, 1, ir::PassKind::Fwd});
  v.push_back({"tasp", 8, 1, ir::PassKind::Fwd, ir::DType::FP16, ir::Layout::Contiguous});
  v.push_back({"tasp-zigzag", 4, 1, ir::PassKind::Fwd, ir::DType::FP32});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, RegionPlans, testing::ValuesIn(region_cases()), case_name);

}  // namespace
}  // namespace charm::rt::cuda

// cuBLAS is opened on first use, not linked (its start-up cost would fall on every command):
// the toolkit this build found is where the loader finds it, and no GPU is needed to load it.
TEST(CublasLoader, OpensTheToolkitsLibraryWithoutAGpu) {
  const auto st = charm::rt::cuda::blas::load();
  ASSERT_TRUE(st) << st.error().message();
  const std::string text =
      charm::rt::cuda::blas::status_string(CUBLAS_STATUS_NOT_SUPPORTED);  // the library's own words
  EXPECT_FALSE(text.empty());
  EXPECT_NE(text, "cuBLAS not loaded");
}
