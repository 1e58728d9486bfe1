#include "scheduler/chakra/chakra.hpp"

#include <fmt/format.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "et.pb.h"  // generated from scheduler/chakra/et.proto in the build tree
#include "scheduler/ir/plan_index.hpp"
#include "scheduler/ir/plan_io.hpp"

namespace charm::chakra {

namespace {

using ir::Op;
using ir::OpId;
using ir::OpKind;

void add_attr(Node& n, const std::string& name, std::int64_t v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_int64_val(v);
}
void add_attr_u64(Node& n, const std::string& name, std::uint64_t v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_uint64_val(v);
}
void add_attr_i32(Node& n, const std::string& name, std::int32_t v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_int32_val(v);
}
void add_attr_bool(Node& n, const std::string& name, bool v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_bool_val(v);
}
void add_attr_str(Node& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_string_val(v);
}

/// Bytes of the distinct buffers an op names.
std::uint64_t touched_bytes(const ir::Plan& plan, const Op& op) {
  if (op.kind != OpKind::Compute) return std::uint64_t(op.bytes);
  std::uint64_t b = 0;
  for (int k = 0; k < 4; ++k) {
    const ir::BufferId id = op.buf[k];
    if (id == ir::kNone || std::find(op.buf, op.buf + k, id) != op.buf + k) continue;
    b += std::uint64_t(plan.buffer(id).bytes);
  }
  return b;
}

/// The op's data dependencies as exported (see the header) and its stream predecessors.
void dependencies(const ir::Plan& plan, const ir::PlanIndex& idx, OpId id, std::vector<OpId>& data,
                  std::vector<OpId>& ctrl) {
  data.clear();
  ctrl.clear();
  for (const OpId d : plan.deps(id))
    for (const OpId m : idx.group(d)) data.push_back(m);
  const std::uint32_t first = idx.group_begin(id);
  if (first > idx.lane_begin(idx.lane_of(id)))
    for (const OpId m : idx.group(idx.at(first - 1))) ctrl.push_back(m);
  data.insert(data.end(), ctrl.begin(), ctrl.end());
  for (auto* v : {&data, &ctrl}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
}

Node node_of(const ir::Plan& plan, const ir::PlanIndex& idx, OpId id, const ExportOptions& o, std::vector<OpId>& data,
             std::vector<OpId>& ctrl) {
  const Op& op = plan.op(id);
  Node n;
  n.set_id(std::uint64_t(id));
  n.set_name(ir::op_label(plan, id));
  dependencies(plan, idx, id, data, ctrl);
  for (const OpId d : data) n.add_data_deps(std::uint64_t(d));
  for (const OpId c : ctrl) n.add_ctrl_deps(std::uint64_t(c));
  add_attr_bool(n, "is_cpu_op", false);
  add_attr_str(n, "charm_stream", std::string(ir::to_string(op.stream)));
  add_attr_str(n, "charm_kind", std::string(ir::to_string(op.kind)));
  if (ir::is_comm(op)) {
    const bool send = op.kind == OpKind::Send;
    n.set_type(send ? COMM_SEND_NODE : COMM_RECV_NODE);
    add_attr_i32(n, "comm_src", send ? op.rank : op.peer);
    add_attr_i32(n, "comm_dst", send ? op.peer : op.rank);
    add_attr(n, "comm_size", std::int64_t(op.bytes));
    add_attr_i32(n, "comm_tag", std::int32_t(wire_tag(op)));
  } else {
    n.set_type(COMP_NODE);
    add_attr(n, "num_ops", std::int64_t(std::llround(op.flops)));
    add_attr_u64(n, "tensor_size", touched_bytes(plan, op));
    if (o.seconds) n.set_duration_micros(std::uint64_t(std::llround(std::max(0.0, o.seconds(id)) * 1e6)));
  }
  return n;
}

/// Rank `rank`'s file: its ops in id order, the order they were planned in (Chakra's feeder
/// resolves a parent that comes later in the file, too).
Status write_rank(const ir::Plan& plan, const ir::PlanIndex& idx, const std::vector<OpId>& ops, int rank,
                  const std::string& path, const ExportOptions& o) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Error{Field::Chakra, fmt::format("cannot write {}: {}", tmp, std::strerror(errno))};
    bool ok = true;
    {
      google::protobuf::io::OstreamOutputStream stream(&out);  // flushes into `out` as it goes out of scope
      GlobalMetadata meta;
      meta.set_version("0.0.4");
      for (const auto& [k, v] : {std::pair<std::string, std::string>{"schema", "charm plan"},
                                 {"algo", plan.algo},
                                 {"ranks", std::to_string(plan.ranks)},
                                 {"rank", std::to_string(rank)},
                                 {"workload", ir::workload_to_json(plan.workload).dump()}}) {
        auto* a = meta.add_attr();
        a->set_name(k);
        a->set_string_val(v);
      }
      ok = google::protobuf::util::SerializeDelimitedToZeroCopyStream(meta, &stream);
      std::vector<OpId> data, ctrl;
      for (const OpId id : ops) {
        ok = google::protobuf::util::SerializeDelimitedToZeroCopyStream(node_of(plan, idx, id, o, data, ctrl), &stream);
        if (!ok) break;
      }
    }
    out.flush();
    if (!ok || !out) {
      std::remove(tmp.c_str());
      return Error{Field::Chakra, fmt::format("cannot write {}", tmp)};
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return Error{Field::Chakra, fmt::format("cannot write {}: {}", path, std::strerror(err))};
  }
  return {};
}

}  // namespace

std::string et_path(const std::string& dir, const std::string& prefix, int rank) {
  return (std::filesystem::path(dir) / fmt::format("{}.{}.et", prefix, rank)).string();
}

std::int64_t wire_tag(const Op& op) { return std::int64_t(op.tag) * ir::kNumStreams + std::int64_t(op.stream); }

Status write_chakra(const ir::Plan& plan, const std::string& dir, const ExportOptions& o) {
  if (plan.symmetry.active())
    return Error{Field::Chakra, "the plan holds one class of ranks (a quotient plan): export the full plan"};
  for (std::size_t i = 0; i < plan.size(); ++i)
    if (ir::is_comm(plan.op(OpId(i))) && wire_tag(plan.op(OpId(i))) > INT32_MAX)
      return Error{Field::Chakra, fmt::format("op {} has tag {}: past what a Chakra comm_tag (int32) holds on the wire",
                                              i, plan.op(OpId(i)).tag)};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error{Field::Chakra, fmt::format("cannot create {}: {}", dir, ec.message())};
  const ir::PlanIndex idx(plan);
  std::vector<std::vector<OpId>> by_rank(std::size_t(plan.ranks));
  for (std::size_t i = 0; i < plan.size(); ++i) by_rank[std::size_t(plan.op(OpId(i)).rank)].push_back(OpId(i));
  for (int r = 0; r < plan.ranks; ++r)
    if (auto st = write_rank(plan, idx, by_rank[std::size_t(r)], r, et_path(dir, o.prefix, r), o); !st) return st;
  return {};
}

}  // namespace charm::chakra
