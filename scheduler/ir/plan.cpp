#include "scheduler/ir/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

namespace charm::ir {

namespace {
template <class E, std::size_t N>
Expected<E> parse_enum(std::string_view s, const std::array<E, N>& all, const char* what) {
  for (E e : all)
    if (to_string(e) == s) return e;
  std::string names;
  for (E e : all) names += fmt::format("{}{}", names.empty() ? "" : ", ", to_string(e));
  return Error{"", fmt::format("unknown {} '{}' (expected one of: {})", what, s, names)};
}
constexpr std::array kOpKinds{OpKind::Compute, OpKind::Send,       OpKind::Recv,
                              OpKind::Merge,   OpKind::Accumulate, OpKind::Copy};
constexpr std::array kStreams{Stream::Compute, Stream::Kv, Stream::Q, Stream::Out, Stream::Cross, Stream::Dkv};
constexpr std::array kBufKinds{BufKind::Q,       BufKind::Kv, BufKind::Out, BufKind::Dout,
                               BufKind::QBundle, BufKind::Dq, BufKind::Dkv};
static_assert(kBufKinds.size() == kNumBufKinds);
constexpr std::array kBufInits{BufInit::None, BufInit::Input, BufInit::Zero};
}  // namespace

std::string_view to_string(OpKind k) {
  switch (k) {
  case OpKind::Compute:
    return "compute";
  case OpKind::Send:
    return "send";
  case OpKind::Recv:
    return "recv";
  case OpKind::Merge:
    return "merge";  // the op kind, not the algorithm
  case OpKind::Accumulate:
    return "accumulate";
  case OpKind::Copy:
    return "copy";
  }
  return "?";
}
std::string_view to_string(Stream s) {
  switch (s) {
  case Stream::Compute:
    return "compute";
  case Stream::Kv:
    return "kv";
  case Stream::Q:
    return "q";
  case Stream::Out:
    return "out";
  case Stream::Cross:
    return "cross";
  case Stream::Dkv:
    return "dkv";
  }
  return "?";
}
std::string_view to_string(BufKind k) {
  switch (k) {
  case BufKind::Q:
    return "q";
  case BufKind::Kv:
    return "kv";
  case BufKind::Out:
    return "out";
  case BufKind::Dout:
    return "dout";
  case BufKind::QBundle:
    return "qbundle";
  case BufKind::Dq:
    return "dq";
  case BufKind::Dkv:
    return "dkv";
  }
  return "?";
}
std::string_view to_string(BufInit i) {
  switch (i) {
  case BufInit::None:
    return "none";
  case BufInit::Input:
    return "input";
  case BufInit::Zero:
    return "zero";
  }
  return "?";
}
Expected<OpKind> parse_op_kind(std::string_view s) { return parse_enum(s, kOpKinds, "op kind"); }
Expected<Stream> parse_stream(std::string_view s) { return parse_enum(s, kStreams, "stream"); }
Expected<BufKind> parse_buf_kind(std::string_view s) { return parse_enum(s, kBufKinds, "buffer kind"); }
Expected<BufInit> parse_buf_init(std::string_view s) { return parse_enum(s, kBufInits, "buffer init"); }

void Plan::reserve(std::size_t ops, std::size_t deps, std::size_t buffers) {
  ops_.reserve(ops);
  dep_begin_.reserve(ops + 1);
  dep_ids_.reserve(deps);
  buffers_.reserve(buffers);
}

OpId Plan::add_op(const Op& op, std::span<const OpId> deps) {
  const auto id = static_cast<OpId>(ops_.size());
  ops_.push_back(op);
  dep_ids_.insert(dep_ids_.end(), deps.begin(), deps.end());
  dep_begin_.push_back(static_cast<std::uint32_t>(dep_ids_.size()));
  return id;
}

BufferId Plan::add_buffer(const Buffer& b) {
  // Parents come first, so root() always ends (loaders check this for files).
  CHARM_ASSERT(b.parent == kNone || (b.parent >= 0 && std::size_t(b.parent) < buffers_.size()),
               "a view's parent is an earlier buffer");
  CHARM_ASSERT(b.reuse == kNone || (b.reuse >= 0 && std::size_t(b.reuse) < buffers_.size()),
               "a reused buffer is an earlier buffer");
  buffers_.push_back(b);
  return static_cast<BufferId>(buffers_.size() - 1);
}

void Plan::set_deps(OpId id, std::span<const OpId> deps) {
  const auto i = static_cast<std::size_t>(id);
  std::vector<OpId> copy(deps.begin(), deps.end());
  const auto b = dep_begin_[i], e = dep_begin_[i + 1];
  dep_ids_.erase(dep_ids_.begin() + b, dep_ids_.begin() + e);
  dep_ids_.insert(dep_ids_.begin() + b, copy.begin(), copy.end());
  const auto delta = static_cast<std::int64_t>(copy.size()) - static_cast<std::int64_t>(e - b);
  for (std::size_t k = i + 1; k < dep_begin_.size(); ++k)
    dep_begin_[k] = static_cast<std::uint32_t>(static_cast<std::int64_t>(dep_begin_[k]) + delta);
}

void Plan::erase_ops(std::span<const OpId> ids) {
  std::vector<char> gone(ops_.size(), 0);
  for (OpId id : ids) gone[static_cast<std::size_t>(id)] = 1;
  std::vector<OpId> remap(ops_.size(), kNone);
  OpId next = 0;
  for (std::size_t i = 0; i < ops_.size(); ++i)
    if (!gone[i]) remap[i] = next++;
  // Rebuilt in place: everything but the ops and their deps (the header, buffers, results) stays.
  const std::vector<Op> old_ops = std::move(ops_);
  const std::vector<std::uint32_t> old_begin = std::move(dep_begin_);
  const std::vector<OpId> old_deps = std::move(dep_ids_);
  ops_.clear();
  dep_begin_.assign(1, 0);
  dep_ids_.clear();
  std::vector<OpId> d;
  for (std::size_t i = 0; i < old_ops.size(); ++i) {
    if (gone[i]) continue;
    d.clear();
    for (auto k = old_begin[i]; k < old_begin[i + 1]; ++k)
      if (const OpId to = remap[static_cast<std::size_t>(old_deps[k])]; to != kNone) d.push_back(to);
    add_op(old_ops[i], d);
  }
}

namespace {
/// k with b == a * 2^k, if there is one.
std::optional<int> power_of_two_ratio(std::int64_t a, std::int64_t b) {
  if (a <= 0 || b <= 0) return std::nullopt;
  int k = 0;
  for (; a < b && b % (2 * a) == 0; a *= 2) ++k;
  for (; b < a && a % (2 * b) == 0; b *= 2) --k;
  return a == b ? std::optional<int>(k) : std::nullopt;
}
}  // namespace

bool Plan::can_scale_batch(std::int64_t batch) const { return power_of_two_ratio(workload.batch, batch).has_value(); }

void Plan::scale_batch(std::int64_t batch) {
  const auto k = power_of_two_ratio(workload.batch, batch);
  CHARM_ASSERT(k.has_value(), "scale_batch needs a power-of-two ratio of batches");
  if (*k == 0) return;
  auto scale = [&](Bytes& b) {
    if (*k > 0) {
      b <<= *k;
    } else {
      CHARM_ASSERT(b % (Bytes{1} << -*k) == 0, "a byte count of a plan is a multiple of its batch");
      b >>= -*k;
    }
  };
  for (Op& o : ops_)
    if (o.kind == OpKind::Compute)
      o.flops = std::ldexp(o.flops, *k);
    else
      scale(o.bytes);
  for (Buffer& b : buffers_) scale(b.bytes);
  workload.batch = batch;
}

std::size_t Plan::memory_bytes() const {
  return ops_.capacity() * sizeof(Op) + dep_begin_.capacity() * sizeof(std::uint32_t) +
         dep_ids_.capacity() * sizeof(OpId) + buffers_.capacity() * sizeof(Buffer) +
         results_.capacity() * sizeof(RankResults);
}

Region Plan::region(const Buffer& b) const {
  const auto hk = static_cast<std::int32_t>(workload.kv_heads);
  return {b.owner,      b.owner + b.owners,
          b.head_begin, b.heads == 0 ? hk : b.head_begin + b.heads,
          b.part_begin, b.parts == 0 ? parts : b.part_begin + b.parts};
}

BufferId Plan::root(BufferId id) const {
  while (buffer(id).parent != kNone) id = buffer(id).parent;
  return id;
}

BufferId Plan::storage(BufferId b) const {
  BufferId id = root(b);
  while (buffer(id).reuse != kNone) id = buffer(id).reuse;
  return id;
}

bool Plan::has_regions() const {
  if (parts != 1) return true;
  for (const Buffer& b : buffers_)
    if (b.owners != 1 || b.heads != 0 || b.parts != 0 || b.parent != kNone) return true;
  return false;
}

std::string buffer_label(const Plan& plan, BufferId b) {
  // Labels also name buffers of broken plans (validator messages): never trust ids here.
  if (b < 0 || std::size_t(b) >= plan.buffers().size()) return "?";
  const Buffer& x = plan.buffer(b);
  if (x.owners == 1 && x.heads == 0 && x.parts == 0) return fmt::format("{}{}", to_string(x.kind), x.owner);
  return fmt::format("{}{}", to_string(x.kind), region_suffix(plan.region(b), plan.workload, plan.parts));
}

std::string op_label(const Plan& plan, OpId id) {
  const Op& op = plan.op(id);
  auto buf = [&](BufferId b) { return buffer_label(plan, b); };
  auto ranged = [&](BufferId b) {
    return b >= 0 && std::size_t(b) < plan.buffers().size() &&
           (plan.buffer(b).owners != 1 || plan.buffer(b).heads != 0 || plan.buffer(b).parts != 0);
  };
  switch (op.kind) {
  case OpKind::Compute:
    if (ranged(op.buf[0]) || ranged(op.buf[1]))
      return fmt::format("{} {}*{} {}", to_string(op.phase), buf(op.buf[0]), buf(op.buf[1]), to_string(op.mask));
    return fmt::format("{} Q{}*KV{} {}", to_string(op.phase), op.q_owner, op.kv_owner, to_string(op.mask));
  case OpKind::Send:
  case OpKind::Recv:
    return fmt::format("{} {} {} {} #{}", to_string(op.kind), buf(op.buf[0]), op.kind == OpKind::Send ? "->" : "<-",
                       op.peer, op.tag);
  case OpKind::Merge:
  case OpKind::Accumulate:
    return fmt::format("{} {}", to_string(op.kind), buf(op.buf[0]));
  case OpKind::Copy:
    return op.buf[3] != kNone ? fmt::format("pack {}", buf(op.buf[3]))
                              : fmt::format("copy {} -> {}", buf(op.buf[0]), buf(op.buf[1]));
  }
  return "?";
}

}  // namespace charm::ir
