// The pass driver: inputs per rank, the forward schedule, the backward bundle
// and the backward schedule, for every algorithm.

#include "scheduler/planners/planners.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "scheduler/planners/comm_list.hpp"
#include "scheduler/planners/schedules.hpp"

namespace charm::sched {

using namespace charm::ir;

const std::vector<std::string>& algorithm_names() {
  static const std::vector<std::string> names{"ring", "ring-zigzag", "merge", "rm+", "charm", "allgather-kv"};
  return names;
}

Status check_request(const PlanRequest& req) {
  const auto& names = algorithm_names();
  if (std::find(names.begin(), names.end(), req.algo) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return Error{"--algo", fmt::format("unknown algorithm '{}' (expected one of: {})", req.algo, list)};
  }
  if (req.ranks < 1 || req.ranks > (1 << 20)) return Error{"--ranks", fmt::format("must be in [1, 1048576], got {}", req.ranks)};
  if (req.domains < 1 || req.ranks % req.domains != 0)
    return Error{"--domains", fmt::format("{} domains do not divide {} ranks", req.domains, req.ranks)};
  if (req.algo == "ring-zigzag" && req.workload.layout != Layout::Zigzag)
    return Error{"--layout", "ring-zigzag runs on the zigzag layout (pass --layout zigzag or use ring)"};
  if ((req.algo == "merge" || req.algo == "rm+") && !is_power_of_two(req.ranks))
    return Error{"--ranks", fmt::format("{} needs a power-of-two rank count, got {}", req.algo, req.ranks)};
  if (req.algo == "charm" && !is_power_of_two(req.ranks / req.domains))
    return Error{"--domains", fmt::format("charm needs a power-of-two number of ranks per domain, got {} ranks / {} domains = {}",
                                          req.ranks, req.domains, req.ranks / req.domains)};
  if (req.algo != "charm" && req.domains != 1) {
    // Domains only change the charm schedule; the others ignore them.
  }
  return req.workload.check(req.ranks);
}

Expected<Plan> make_plan(const PlanRequest& req_in) {
  PlanRequest req = req_in;
  if (req.algo == "ring-zigzag" && req.workload.layout == Layout::Contiguous) req.workload.layout = Layout::Zigzag;
  if (auto s = check_request(req); !s) return s.error();
  const int n = req.ranks;
  const auto N = std::size_t(n);
  PlanBuilder b(req.algo, req.workload, n, req.domains);
  std::vector<detail::RankState> st(N);
  for (std::size_t r = 0; r < N; ++r) {
    st[r].q = b.buffer(RankId(r), BufKind::Q, RankId(r), BufInit::Input);
    st[r].kv = b.buffer(RankId(r), BufKind::Kv, RankId(r), BufInit::Input);
  }
  const auto pass = req.workload.pass;
  const std::string& a = req.algo;
  if (pass != PassKind::Bwd) {
    b.set_phase(Phase::Fwd);
    if (a == "ring" || a == "ring-zigzag") detail::ring_forward(b, st);
    else if (a == "merge") detail::merge_forward(b, st);
    else if (a == "allgather-kv") detail::allgather_forward(b, st);
    else if (a == "rm+") detail::charm_forward(b, st, 1);
    else detail::charm_forward(b, st, req.domains);
  }
  if (pass != PassKind::Fwd) {
    b.set_phase(Phase::Bwd);
    for (std::size_t r = 0; r < N; ++r) {
      const BufferId dout = b.buffer(RankId(r), BufKind::Dout, RankId(r), BufInit::Input);
      BufferId out = b.results(RankId(r)).out;
      if (pass == PassKind::Bwd) {
        out = b.buffer(RankId(r), BufKind::Out, RankId(r), BufInit::Input);
        b.results(RankId(r)).out = out;
      }
      st[r].qbundle = b.buffer(RankId(r), BufKind::QBundle, RankId(r), BufInit::None);
      b.pack(st[r].q, dout, out, st[r].qbundle);
    }
    if (a == "ring" || a == "ring-zigzag") detail::ring_backward(b, st);
    else if (a == "merge") detail::merge_backward(b, st);
    else if (a == "allgather-kv") detail::allgather_backward(b, st);
    else if (a == "rm+") detail::charm_backward(b, st, 1);
    else detail::charm_backward(b, st, req.domains);
  }
  return std::move(b).finish();
}

} // namespace charm::sched
