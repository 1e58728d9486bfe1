#include "scheduler/trace/trace.hpp"

#include <algorithm>
#include <string>
#include <tuple>

namespace charm::trace {

using namespace charm::ir;

Timeline Timeline::zeros(const Plan& plan) {
  Timeline t;
  t.start_s.assign(plan.size(), 0.0);
  t.end_s.assign(plan.size(), 0.0);
  t.flow_start_s.assign(plan.size(), 0.0);
  return t;
}

nlohmann::json chrome_trace(const Plan& plan, std::span<const double> start_s, std::span<const double> end_s,
                            std::span<const double> flow_start_s, double makespan_s, const nlohmann::json& other) {
  nlohmann::json ev = nlohmann::json::array();
  // A quotient plan (the simulator's symmetric runs) holds the ops of its representatives only: ranks [0, block).
  const int in_trace = plan.symmetry.active() ? std::min<int>(plan.symmetry.block, plan.ranks) : plan.ranks;
  for (int rk = 0; rk < in_trace; ++rk) {
    ev.push_back({{"ph", "M"},
                  {"name", "process_name"},
                  {"pid", rk},
                  {"tid", 0},
                  {"args", {{"name", "rank " + std::to_string(rk)}}}});
    ev.push_back(
        {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rk}, {"tid", 0}, {"args", {{"sort_index", rk}}}});
    for (int s = 0; s < kNumStreams; ++s)
      ev.push_back({{"ph", "M"},
                    {"name", "thread_name"},
                    {"pid", rk},
                    {"tid", s},
                    {"args", {{"name", std::string(to_string(Stream(s)))}}}});
  }
  const double us = 1e6;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const Op& o = plan.op(OpId(i));
    const double ts = start_s[i] * us, dur = (end_s[i] - start_s[i]) * us;
    nlohmann::json args = {{"op", i}};
    if (o.kind == OpKind::Compute)
      args["flops"] = o.flops;
    else
      args["bytes"] = o.bytes;
    if (o.kind == OpKind::Send || o.kind == OpKind::Recv) args["transfer_start_us"] = flow_start_s[i] * us;
    ev.push_back({{"ph", "X"},
                  {"name", op_label(plan, OpId(i))},
                  {"cat", std::string(to_string(o.kind))},
                  {"pid", o.rank},
                  {"tid", int(o.stream)},
                  {"ts", ts},
                  {"dur", dur},
                  {"args", args}});
    if (o.kind == OpKind::Send) {
      // The arrow starts inside the send's slice and ends inside the matching receive's slice.
      ev.push_back({{"ph", "s"},
                    {"name", "transfer"},
                    {"cat", "flow"},
                    {"id", i},
                    {"pid", o.rank},
                    {"tid", int(o.stream)},
                    {"ts", flow_start_s[i] * us}});
    }
  }
  // Receives: find each send's receive by (stream, src, dst, tag) once.
  std::vector<std::tuple<int, int, int, int, OpId>> sends, recvs;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const Op& o = plan.op(OpId(i));
    if (o.kind == OpKind::Send) sends.emplace_back(int(o.stream), o.rank, o.peer, o.tag, OpId(i));
    if (o.kind == OpKind::Recv) recvs.emplace_back(int(o.stream), o.peer, o.rank, o.tag, OpId(i));
  }
  std::sort(sends.begin(), sends.end());
  std::sort(recvs.begin(), recvs.end());
  for (std::size_t k = 0; k < std::min(sends.size(), recvs.size()); ++k) {
    const OpId s = std::get<4>(sends[k]), rv = std::get<4>(recvs[k]);
    const Op& o = plan.op(rv);
    ev.push_back({{"ph", "f"},
                  {"bp", "e"},
                  {"name", "transfer"},
                  {"cat", "flow"},
                  {"id", s},
                  {"pid", o.rank},
                  {"tid", int(o.stream)},
                  {"ts", end_s[std::size_t(rv)] * us}});
  }
  // What the trace holds: `ranks_in_trace` of the plan's `ranks`; a symmetric run's other ranks do what their
  // representative (rank r % ranks_in_trace) does, moved by the symmetry.
  nlohmann::json meta = {{"algo", plan.algo},
                         {"ranks", plan.ranks},
                         {"ranks_in_trace", in_trace},
                         {"symmetric", plan.symmetry.active()},
                         {"makespan_ms", makespan_s * 1e3}};
  if (other.is_object()) meta.update(other);
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"}, {"otherData", meta}};
}

}  // namespace charm::trace
