// charm export --chakra: ring, charm and usp plans (forward and backward, 16 ranks) written as
// Chakra execution traces and read back by a decoder of the protobuf wire format written here
// from Chakra's published schema (field numbers as documented, not from our .proto): every op
// is a node of its rank's file, with its peer, bytes, tag and FLOPs, and its dependencies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "scheduler/chakra/chakra.hpp"
#include "scheduler/ir/plan_index.hpp"
#include "scheduler/planners/planners.hpp"
#include "test_util.hpp"

namespace charm::test {
namespace {

// ---- a protobuf wire reader: varints, 64-bit, length-delimited, 32-bit ----

struct Field {
  std::uint32_t number = 0, wire = 0;
  std::uint64_t varint = 0;
  std::string bytes;  // wire type 2
};

class Wire {
 public:
  explicit Wire(std::string_view s) : s_(s) {}
  [[nodiscard]] bool done() const { return at_ >= s_.size(); }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; at_ < s_.size(); shift += 7) {
      const auto b = std::uint8_t(s_[at_++]);
      v |= std::uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ADD_FAILURE() << "a varint runs past the end";
    return v;
  }
  std::string take(std::size_t n) {
    EXPECT_LE(at_ + n, s_.size());
    std::string out(s_.substr(at_, n));
    at_ += n;
    return out;
  }
  Field field() {
    Field f;
    const std::uint64_t key = varint();
    f.number = std::uint32_t(key >> 3);
    f.wire = std::uint32_t(key & 7);
    if (f.wire == 0)
      f.varint = varint();
    else if (f.wire == 2)
      f.bytes = take(varint());
    else if (f.wire == 1)
      f.bytes = take(8);
    else if (f.wire == 5)
      f.bytes = take(4);
    else
      ADD_FAILURE() << "wire type " << f.wire;
    return f;
  }

 private:
  std::string_view s_;
  std::size_t at_ = 0;
};

/// Chakra's Node: id 1, name 2, type 3, ctrl_deps 4, data_deps 5, duration_micros 7, attr 10;
/// AttributeProto: name 1, int32_val 7, int64_val 9, uint64_val 13, bool_val 27, string_val 29.
struct Node {
  std::uint64_t id = 0, type = 0, duration = 0;
  std::string name;
  std::vector<std::uint64_t> ctrl, data;
  std::map<std::string, std::int64_t> ints;
  std::map<std::string, std::string> strings;
};

void repeated(const Field& f, std::vector<std::uint64_t>& into) {
  if (f.wire == 0) {
    into.push_back(f.varint);
    return;
  }
  Wire packed(f.bytes);  // proto3 packs repeated scalars
  while (!packed.done()) into.push_back(packed.varint());
}

/// An AttributeProto: its name, and its value as an integer or as text.
struct Attr {
  std::string name, text;
  std::int64_t value = 0;
  bool is_text = false;
};
Attr attr_of(const std::string& bytes) {
  Attr at;
  Wire a(bytes);
  while (!a.done()) {
    const Field f = a.field();
    if (f.number == 1)
      at.name = f.bytes;
    else if (f.number == 7 || f.number == 9 || f.number == 13 || f.number == 27)
      at.value = std::int64_t(f.varint);
    else if (f.number == 29)
      at.text = f.bytes, at.is_text = true;
  }
  return at;
}

Node node_of(const std::string& msg) {
  Node n;
  Wire w(msg);
  while (!w.done()) {
    const Field f = w.field();
    switch (f.number) {
    case 1:
      n.id = f.varint;
      break;
    case 2:
      n.name = f.bytes;
      break;
    case 3:
      n.type = f.varint;
      break;
    case 4:
      repeated(f, n.ctrl);
      break;
    case 5:
      repeated(f, n.data);
      break;
    case 7:
      n.duration = f.varint;
      break;
    case 10: {
      const Attr a = attr_of(f.bytes);
      if (a.is_text)
        n.strings[a.name] = a.text;
      else
        n.ints[a.name] = a.value;
      break;
    }
    default:
      break;
    }
  }
  return n;
}

/// A file: a length-delimited GlobalMetadata (version 1, attr 2), then length-delimited Nodes.
std::vector<Node> read_et(const std::string& path, std::map<std::string, std::string>& meta) {
  std::ifstream in(path, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Wire w(all);
  std::vector<Node> nodes;
  bool first = true;
  while (!w.done()) {
    const std::string msg = w.take(w.varint());
    if (first) {
      Wire m(msg);
      while (!m.done()) {
        const Field f = m.field();
        if (f.number == 1) meta["version"] = f.bytes;
        if (f.number != 2) continue;
        const Attr a = attr_of(f.bytes);
        meta[a.name] = a.text;
      }
      first = false;
      continue;
    }
    nodes.push_back(node_of(msg));
  }
  return nodes;
}

constexpr std::uint64_t kComp = 4, kSend = 5, kRecv = 6;

struct Case {
  std::string algo;
  ir::PassKind pass;
};

class Chakra : public ::testing::TestWithParam<Case> {};

TEST_P(Chakra, EveryOpPeerByteAndDependencyReadsBack) {
  ir::Workload w;
  w.batch = 1;
  w.seq = 16384;
  w.heads = 16;
  w.kv_heads = 16;
  w.head_dim = 64;
  w.pass = GetParam().pass;
  auto made = sched::make_plan({GetParam().algo, w, 16, 2});
  ASSERT_TRUE(made) << made.error().message();
  const ir::Plan& plan = *made;
  const std::string dir = charm::test::temp_path("chakra");
  std::filesystem::remove_all(dir);
  chakra::ExportOptions opt;
  opt.seconds = [](ir::OpId id) { return 1e-6 * double(id % 7); };  // a duration to read back
  ASSERT_TRUE(chakra::write_chakra(plan, dir, opt));

  const ir::PlanIndex idx(plan);
  std::size_t seen = 0;
  // (src, dst, tag) -> bytes, for each direction: every send meets one receive of its size.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::int64_t> sends, recvs;
  for (int r = 0; r < plan.ranks; ++r) {
    std::map<std::string, std::string> meta;
    const auto nodes = read_et(chakra::et_path(dir, "charm", r), meta);
    EXPECT_EQ(meta["version"], "0.0.4");
    EXPECT_EQ(meta["algo"], plan.algo);
    EXPECT_EQ(meta["rank"], std::to_string(r));
    for (const Node& n : nodes) {
      ASSERT_LT(n.id, plan.size());
      const ir::OpId id = ir::OpId(n.id);
      const ir::Op& op = plan.op(id);
      ASSERT_EQ(op.rank, r) << n.name;
      ++seen;
      EXPECT_EQ(n.duration, ir::is_comm(op) ? 0u : std::uint64_t(id % 7)) << n.name;
      // The dependencies: the op's own, the issue groups they belong to, and the group before it
      // on its stream (ops of one stream run in id order).
      std::set<std::uint64_t> want_data, want_ctrl;
      for (const ir::OpId d : plan.deps(id))
        for (const ir::OpId m : idx.group(d)) want_data.insert(std::uint64_t(m));
      for (ir::OpId p = id - 1; p >= 0; --p) {
        const ir::Op& q = plan.op(p);
        if (q.rank != op.rank || q.stream != op.stream) continue;
        const bool same_group = op.group != ir::kNone && q.group == op.group && ir::is_comm(q) && ir::is_comm(op);
        if (same_group) continue;  // a member of its own group: issued with it
        for (const ir::OpId m : idx.group(p)) want_ctrl.insert(std::uint64_t(m));
        break;
      }
      want_data.insert(want_ctrl.begin(), want_ctrl.end());
      EXPECT_EQ(std::set<std::uint64_t>(n.data.begin(), n.data.end()), want_data) << n.name;
      EXPECT_EQ(n.data.size(), want_data.size()) << n.name << ": no dependency twice";
      EXPECT_EQ(std::set<std::uint64_t>(n.ctrl.begin(), n.ctrl.end()), want_ctrl) << n.name;
      EXPECT_EQ(n.ints.at("is_cpu_op"), 0);
      if (ir::is_comm(op)) {
        const bool send = op.kind == ir::OpKind::Send;
        EXPECT_EQ(n.type, send ? kSend : kRecv) << n.name;
        EXPECT_EQ(n.ints.at("comm_src"), send ? op.rank : op.peer);
        EXPECT_EQ(n.ints.at("comm_dst"), send ? op.peer : op.rank);
        EXPECT_EQ(n.ints.at("comm_size"), std::int64_t(op.bytes));
        const auto key = std::tuple{n.ints.at("comm_src"), n.ints.at("comm_dst"), n.ints.at("comm_tag")};
        EXPECT_TRUE((send ? sends : recvs).emplace(key, n.ints.at("comm_size")).second)
            << n.name << ": a (src, dst, tag) used twice";
      } else {
        EXPECT_EQ(n.type, kComp) << n.name;
        EXPECT_EQ(n.ints.at("num_ops"), std::int64_t(std::llround(op.flops))) << n.name;
        EXPECT_GT(n.ints.at("tensor_size"), 0) << n.name;
        EXPECT_EQ(n.strings.at("charm_kind"), std::string(ir::to_string(op.kind)));
      }
    }
  }
  EXPECT_EQ(seen, plan.size());
  EXPECT_EQ(sends, recvs) << "every send matches one receive of its size";
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Plans, Chakra,
                         ::testing::Values(Case{"ring", ir::PassKind::Fwd}, Case{"ring", ir::PassKind::Bwd},
                                           Case{"charm", ir::PassKind::Fwd}, Case{"charm", ir::PassKind::Bwd},
                                           Case{"usp", ir::PassKind::Fwd}, Case{"usp", ir::PassKind::Bwd}),
                         [](const auto& p) {
                           return p.param.algo + (p.param.pass == ir::PassKind::Fwd ? "_fwd" : "_bwd");
                         });

TEST(Chakra, AQuotientPlanIsRefused) {
  ir::Workload w;
  w.seq = 16384;
  auto made = sched::make_plan({"ring", w, 16, 1}, sched::plan_symmetry({"ring", w, 16, 1}));
  ASSERT_TRUE(made) << made.error().message();
  if (!made->symmetry.active()) GTEST_SKIP() << "ring has no symmetry here";
  EXPECT_FALSE(chakra::write_chakra(*made, charm::test::temp_path("chakra_q")));
}

}  // namespace
}  // namespace charm::test
