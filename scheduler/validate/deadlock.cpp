// The deadlock check (validator.hpp): the plan completes under NCCL point-to-point semantics.
// Its completion order (State::order) is the one the lifetime and coverage checks replay.
#include <fmt/format.h>

#include "scheduler/validate/check.hpp"

namespace charm::sched::checks {

namespace {

class Deadlock : Check {
 public:
  explicit Deadlock(State& s) : Check(s) {}

  // --------------------------------------------------------------- deadlock
  // Completion order under NCCL semantics; also the order the later checks replay.
  bool deadlock() {
    std::vector<std::uint32_t> pending_deps(n_);
    for (OpId id = 0; id < OpId(n_); ++id) pending_deps[std::size_t(id)] = std::uint32_t(p_.deps(id).size());
    const std::size_t lanes = s_.index->lanes();
    std::vector<std::uint32_t> head(lanes);  // per lane: the place of its first op not done
    for (std::size_t l = 0; l < lanes; ++l) head[l] = s_.index->lane_begin(l);
    std::vector<char> posted(n_, 0), done(n_, 0);
    s_.order.clear();
    s_.order.reserve(n_);
    // FIFO of lanes to look at; a lane is in it at most once, so a ring of
    // lanes + 1 slots never overflows.
    std::vector<std::uint32_t> work(lanes + 1);
    std::size_t work_head = 0, work_tail = 0;
    auto push_work = [&](std::size_t l) {
      work[work_tail] = std::uint32_t(l);
      work_tail = (work_tail + 1) % work.size();
    };
    for (std::size_t l = 0; l < lanes; ++l)
      if (head[l] < s_.index->lane_end(l)) push_work(l);
    std::vector<char> queued(lanes, 1);
    auto wake = [&](std::size_t l) {
      if (!queued[l]) {
        queued[l] = 1;
        push_work(l);
      }
    };
    auto complete = [&](OpId id) {
      done[std::size_t(id)] = 1;
      s_.order.push_back(id);
      for (OpId d : s_.index->dependents(id))
        if (--pending_deps[std::size_t(d)] == 0) wake(s_.index->lane_of(d));
      wake(s_.index->lane_of(id));
    };
    // Posts the ready members of the group [start, end); a send and its receive complete together.
    auto post_group = [&](std::uint32_t start, std::uint32_t end) {
      for (std::uint32_t k = start; k < end; ++k) {
        const OpId id = s_.index->at(k);
        if (done[std::size_t(id)] || posted[std::size_t(id)]) continue;
        const Op& o = p_.op(id);
        if (!is_comm(o)) {
          complete(id);
          continue;
        }
        posted[std::size_t(id)] = 1;
        const OpId m = s_.index->partner(id);
        if (posted[std::size_t(m)] && !done[std::size_t(m)]) {
          // Rendezvous: the send completes with its receive (send first in the order).
          if (o.kind == OpKind::Send) {
            complete(id);
            complete(m);
          } else {
            complete(m);
            complete(id);
          }
        }
      }
    };
    while (work_head != work_tail) {
      const std::size_t l = work[work_head];
      work_head = (work_head + 1) % work.size();
      queued[l] = 0;
      while (head[l] < s_.index->lane_end(l)) {
        const std::uint32_t start = head[l], end = s_.index->group_end_at(start);
        bool ready = true;
        for (std::uint32_t k = start; k < end && ready; ++k) ready = pending_deps[std::size_t(s_.index->at(k))] == 0;
        if (!ready) break;
        post_group(start, end);
        bool all = true;
        for (std::uint32_t k = start; k < end && all; ++k) all = done[std::size_t(s_.index->at(k))];
        if (!all) break;
        head[l] = end;
      }
    }
    if (s_.order.size() == n_) return true;
    report_deadlock(head, pending_deps);
    return false;
  }
  /// The ops at the head of the first stuck streams and what each waits for.
  void report_deadlock(const std::vector<std::uint32_t>& head, const std::vector<std::uint32_t>& pending_deps) {
    std::vector<OpId> stuck;
    std::string names;
    for (std::size_t l = 0; l < s_.index->lanes() && stuck.size() < 6; ++l) {
      if (head[l] >= s_.index->lane_end(l)) continue;
      const OpId id = s_.index->at(head[l]);
      const Op& o = p_.op(id);
      std::string why;
      if (pending_deps[std::size_t(id)] > 0)
        why = "waits for its dependencies";
      else if (is_comm(o))
        why = fmt::format("waits for rank {} to post the matching {}", o.peer,
                          o.kind == OpKind::Send ? "receive" : "send");
      else
        why = "waits for its group";
      stuck.push_back(id);
      names += fmt::format("{}{} {}", names.empty() ? "" : "; ", name(id), why);
    }
    fail("deadlock",
         fmt::format("{} of {} ops can never run under NCCL point-to-point semantics: {}", n_ - s_.order.size(), n_,
                     names),
         stuck);
  }
};

}  // namespace

bool check_deadlock(State& s) { return Deadlock(s).deadlock(); }

}  // namespace charm::sched::checks
