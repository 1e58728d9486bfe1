#include "sim/formulas.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "scheduler/planners/algorithms.hpp"

namespace charm::sim {

using namespace charm::ir;

StepCosts uniform_step_costs(const Workload& w_in, int n, Phase phase, double bw_gbps, double latency_us,
                             const ComputeModel& model) {
  Workload w = w_in;
  w.causal = false;  // the formulas count unmasked blocks (the paper's Figure 4 does too)
  const double bw = bw_gbps * 1e9, lat = latency_us * 1e-6;
  auto msg = [&](Bytes b) { return double(b) / bw + lat; };
  StepCosts c;
  c.t_kv = msg(w.kv_bytes(n));
  const bool fwd = phase == Phase::Fwd;
  c.t_q = msg(fwd ? w.q_bytes(n) : w.qbundle_bytes(n));
  c.t_out = msg(fwd ? w.out_bytes(n) : w.dq_bytes(n));
  c.t_dkv = fwd ? 0 : msg(w.dkv_bytes(n));
  c.t_dkv_home = fwd ? 0 : msg(w.dkv_bytes(n, /*activations_dtype=*/true));
  c.t_comp = model.compute_seconds(w.block_flops(phase, 0, n > 1 ? 1 : 0, n), phase, w);
  return c;
}

namespace {

double l(double z) { return std::max(z, 0.0); }

int log2i(int n) {
  int L = 0;
  while ((1 << L) < n) ++L;
  return L;
}

// Ring, forward: step s's exchange (s+1) starts with step s's compute once
// step s-1's compute is done: T = (n-1) max(Tc, Tkv) + Tc — Eq. 2.
// Backward: the KV ring is the same (a_s = arrival of step s's block,
// c_s = end of its compute); each block's dK/dV go into the rank's one partial
// slot, which is added to the running sum once the sum has arrived (A_s), and
// the sum moves on; the slot is free again once added (or, for step 0's
// partial, which is the first running sum, once sent):
//   c_s = max(a_s, c_{s-1}, f_{s-1}) + Tc,   a_{s+1} = max(a_s, c_{s-1}) + Tkv,
//   e_0 = c_0 + Tdkv, f_0 = e_0;   A_s = max(c_s, e_{s-1}), e_s = A_s + Tdkv, f_s = A_s,
//   T = e_{n-1}   (the last move reaches the owner).
double ring_time(int n, Phase ph, const StepCosts& c) {
  if (n == 1) return c.t_comp;
  if (ph == Phase::Fwd) return (n - 1) * std::max(c.t_comp, c.t_kv) + c.t_comp;
  double a = 0, c_prev = 0, e = 0, freed = 0;  // a_0, c_{-1}, e_{-1}, f_{-1}
  for (int s = 0; s < n; ++s) {
    const double cs = std::max({a, c_prev, freed}) + c.t_comp;
    a = std::max(a, c_prev) + c.t_kv;  // a_{s+1}
    c_prev = cs;
    if (s == 0) {
      e = cs + c.t_dkv;
      freed = e;
    } else {
      freed = std::max(cs, e);
      e = freed + c.t_dkv;
    }
  }
  return e;
}

// Merge: bulk-synchronous levels; level i moves 2^(i-1) blocks (C_i) while
// computing the blocks of level i-1 (k_1 = 1, k_i = 2^(i-2)); the last
// level's 2^(L-1) blocks are computed after it (Eq. 3-4 plus the tail).
// Backward adds the reduce-scatter of the dK/dV partials (recursive halving,
// 2^(i-1) partials at level i, n-1 in all), which waits for the tail.
double merge_time(int n, Phase ph, const StepCosts& c) {
  const int L = log2i(n);
  double t = 0;
  for (int i = 1; i <= L; ++i) {
    const double C = double(1 << (i - 1)) * c.t_kv;
    const double k = i <= 2 ? 1.0 : double(1 << (i - 2));
    t += std::max(C, k * c.t_comp);
  }
  t += double(L >= 1 ? 1 << (L - 1) : 1) * c.t_comp;
  if (ph == Phase::Bwd) t += double(n - 1) * c.t_dkv;
  return t;
}

// RM+, as the planner builds it (scheduler/planners/charm.cpp, one query set):
//   round 0 exchanges KV only; rounds r = 1 .. n/2-1 exchange KV and Q, each on
//   its own stream, back to back, a receive waiting for its slot: two KV slots
//   (KV round r waits until KV item r-2 is computed), one Q slot (Q item r-1
//   waits until Q item r-2 is computed);
//   the compute stream runs the local block, then the items in a fixed order:
//   KV item r just before Q item r + lag (lag 1 forward, 0 backward), the rest
//   at the end; a Q item (backward: also a KV item) waits until the partial of
//   the previous such item has gone home (one partial slot each);
//   every partial goes home on the out stream in compute order, its group
//   waiting for the fold of the previous arrival of its kind (one arrival slot
//   each); a fold sits on the compute stream after the computation that follows
//   the one whose partial came home, and waits for the arrival.
// Folds are memory-bound (free on the uniform topology); with per-step costs
// equal on every rank this recurrence is exact. Without the waits its steady
// state is sum_i max(C_i, k_i Tc), k = 1, 1, 2^(i-1), when Tq = Tkv (docs/validation.md).
double rmplus_time(int n, Phase ph, const StepCosts& c) {
  if (n == 1) return c.t_comp;
  const bool bwd = ph == Phase::Bwd;
  const int rounds = n / 2, items = rounds - 1, lag = bwd ? 0 : 1;
  std::vector<double> kv_arrival(std::size_t(rounds), 0), kv_done(std::size_t(rounds), 0);
  std::vector<double> q_arrival(std::size_t(std::max(items, 0)), 0), q_done(q_arrival);
  double kv_free = 0, q_free = 0, out_free = 0;
  int kv_sent = 0, q_sent = 0;  // exchanges issued so far, in stream order
  auto kv_exchange = [&](int r) {
    for (; kv_sent <= r; ++kv_sent) {
      const double slot = kv_sent >= 2 ? kv_done[std::size_t(kv_sent - 2)] : 0.0;
      kv_free = std::max(kv_free, slot) + c.t_kv;
      kv_arrival[std::size_t(kv_sent)] = kv_free;
    }
    return kv_arrival[std::size_t(r)];
  };
  auto q_exchange = [&](int s) {
    for (; q_sent <= s; ++q_sent) {
      const double slot = q_sent >= 1 ? q_done[std::size_t(q_sent - 1)] : 0.0;
      q_free = std::max(q_free, slot) + c.t_q;
      q_arrival[std::size_t(q_sent)] = q_free;
    }
    return q_arrival[std::size_t(s)];
  };
  // Per kind of partial (0: Q item's, 1: KV item's): when the last one is home
  // (its slot free) and when the last arrival was folded (the arrival slot free).
  double sent_home[2] = {0, 0}, folded[2] = {0, 0};
  struct Return {
    int kind;
    double end;
  };
  std::vector<Return> pending;  // returns whose folds come after the next computation
  double cursor = c.t_comp;     // the local block
  auto computed = [&](int kind, bool returns, double end) {
    cursor = end;
    for (const Return& r : pending) folded[r.kind] = cursor = std::max(cursor, r.end);
    pending.clear();
    if (!returns) return;
    const double t = kind == 0 ? c.t_out : c.t_dkv_home;
    out_free = std::max({out_free, end, folded[kind]}) + t;
    sent_home[kind] = out_free;
    pending.push_back({kind, out_free});
  };
  auto kv_item = [&](int r) {
    const double end = std::max({cursor, kv_exchange(r), bwd ? sent_home[1] : 0.0}) + c.t_comp;
    kv_done[std::size_t(r)] = end;
    computed(1, bwd, end);
  };
  auto q_item = [&](int s) {
    const double end = std::max({cursor, q_exchange(s), sent_home[0]}) + c.t_comp;
    q_done[std::size_t(s)] = end;
    computed(0, true, end);
  };
  int next_kv = 0;
  for (int s = 0; s < items; ++s) {
    while (next_kv < rounds && next_kv + lag <= s) kv_item(next_kv++);
    q_item(s);
  }
  while (next_kv < rounds) kv_item(next_kv++);
  for (const Return& r : pending) cursor = std::max(cursor, r.end);
  return cursor;
}

}  // namespace

ClosedForm closed_form(const std::string& algo, int n, Phase ph, const StepCosts& c) {
  ClosedForm f;
  f.ccr = c.t_kv > 0 ? c.t_comp / c.t_kv : 0;
  const int L = log2i(n);
  const double busy = double(n) * c.t_comp;
  double paper_o = 0;
  const sched::Algorithm* row = sched::find_algorithm(algo);
  switch (row != nullptr ? row->closed_form : sched::Algorithm::ClosedForm::None) {
  case sched::Algorithm::ClosedForm::Ring:
    f.time_s = ring_time(n, ph, c);
    paper_o = double(n - 1) * l(c.t_kv - c.t_comp);  // Eq. 2
    break;
  case sched::Algorithm::ClosedForm::Merge:
    f.time_s = merge_time(n, ph, c);
    for (int i = 1; i <= L; ++i)  // Eq. 4
      paper_o += l(double(1 << (i - 1)) * c.t_kv - double(1 << std::max(i - 2, 0)) * c.t_comp);
    break;
  case sched::Algorithm::ClosedForm::RmPlus:
    f.time_s = rmplus_time(n, ph, c);
    for (int i = 1; i <= L; ++i)  // Eq. 5-6 as printed
      paper_o += l(double(1 << std::max(i - 2, 0)) * std::max(c.t_q, c.t_kv) - double(1 << (i - 1)) * c.t_comp);
    break;
  case sched::Algorithm::ClosedForm::None:
    return f;
  }
  f.available = true;
  f.exposed_s = f.time_s - busy;
  f.paper_exposed_s = paper_o;
  f.paper_time_s = busy + paper_o;
  return f;
}

}  // namespace charm::sim
