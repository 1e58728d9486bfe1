#include "sim/formulas.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

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
// c_s = end of its compute); each block's dK/dV go into a fresh partial that
// is added to the running sum once the sum has arrived, and the sum moves on:
//   c_s = max(a_s, c_{s-1}) + Tc,   a_{s+1} = max(a_s, c_{s-1}) + Tkv,
//   e_s = max(c_s, e_{s-1}) + Tdkv, T = e_{n-1}   (the last move reaches the owner).
double ring_time(int n, Phase ph, const StepCosts& c) {
  if (n == 1) return c.t_comp;
  if (ph == Phase::Fwd) return (n - 1) * std::max(c.t_comp, c.t_kv) + c.t_comp;
  double a = 0, c_prev = 0, e = 0;  // a_0, c_{-1}, e_{-1}
  for (int s = 0; s < n; ++s) {
    const double start = std::max(a, c_prev);
    const double cs = start + c.t_comp;
    a = start + c.t_kv;  // a_{s+1}
    c_prev = cs;
    e = std::max(cs, e) + c.t_dkv;
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

// RM+, as the planner builds it (scheduler/planners/charm.cpp):
//   level 1: one KV exchange (Tkv) while the local block computes;
//   level i >= 2: m = 2^(i-2) rounds; round t's KV arrives at s_i + (t+1)Tkv
//   and its Q at s_i + (t+1)Tq (two streams, each back to back);
//   a level computes the previous level's last-round items, then its own
//   rounds 0..m-2 as they arrive (Q item first, then KV item); the last
//   round's items are deferred; the next level's exchanges start at
//   s_{i+1} = max(s_i + m Tkv, s_i + m Tq, end of this level's computation);
//   computing a foreign Q item (bwd: also a KV item) returns a partial on the
//   out stream, one after the other; the run ends with the tail items and the
//   last return. With per-step costs equal on every rank, this recurrence is
//   exact; its steady state is sum_i max(C_i, k_i Tc) with k = 1, 1, 2^(i-1)
//   when Tq = Tkv, and a deferred Q item may start before the barrier when
//   Tq < Tkv (see docs/validation.md).
double rmplus_time(int n, Phase ph, const StepCosts& c) {
  if (n == 1) return c.t_comp;
  const bool bwd = ph == Phase::Bwd;
  const int L = log2i(n);
  struct Item { bool q; double arrival; };
  double cursor = 0, out = 0;  // compute stream and out stream free times
  auto run = [&](const std::vector<Item>& items) {
    for (const Item& it : items) {
      cursor = std::max(cursor, it.arrival) + c.t_comp;
      if (it.q) out = std::max(out, cursor) + c.t_out;         // partial (O, LSE) or dQ goes home
      else if (bwd) out = std::max(out, cursor) + c.t_dkv;     // dK/dV partial goes home
    }
  };
  std::vector<Item> deferred;  // level 1 computes the local block (no return)
  cursor = c.t_comp;
  double s = 0;
  for (int i = 1; i <= L; ++i) {
    const int m = i == 1 ? 1 : 1 << (i - 2);
    std::vector<std::vector<Item>> rounds(static_cast<std::size_t>(m));
    for (int t = 0; t < m; ++t) {
      if (i >= 2) rounds[std::size_t(t)].push_back({true, s + (t + 1) * c.t_q});
      rounds[std::size_t(t)].push_back({false, s + (t + 1) * c.t_kv});
    }
    run(deferred);
    for (int t = 0; t + 1 < m; ++t) run(rounds[std::size_t(t)]);
    deferred = rounds.back();
    s = std::max({s + m * c.t_kv, i >= 2 ? s + m * c.t_q : 0.0, cursor});
  }
  run(deferred);
  return std::max(cursor, out);
}

} // namespace

ClosedForm closed_form(const std::string& algo, int n, Phase ph, const StepCosts& c) {
  ClosedForm f;
  f.ccr = c.t_kv > 0 ? c.t_comp / c.t_kv : 0;
  const int L = log2i(n);
  const double busy = double(n) * c.t_comp;
  double paper_o = 0;
  if (algo == "ring" || algo == "ring-zigzag") {
    f.time_s = ring_time(n, ph, c);
    paper_o = double(n - 1) * l(c.t_kv - c.t_comp);  // Eq. 2
  } else if (algo == "merge") {
    f.time_s = merge_time(n, ph, c);
    for (int i = 1; i <= L; ++i)  // Eq. 4
      paper_o += l(double(1 << (i - 1)) * c.t_kv - double(1 << std::max(i - 2, 0)) * c.t_comp);
  } else if (algo == "rm+") {
    f.time_s = rmplus_time(n, ph, c);
    for (int i = 1; i <= L; ++i)  // Eq. 5-6 as printed
      paper_o += l(double(1 << std::max(i - 2, 0)) * std::max(c.t_q, c.t_kv) - double(1 << (i - 1)) * c.t_comp);
  } else {
    return f;
  }
  f.available = true;
  f.exposed_s = f.time_s - busy;
  f.paper_exposed_s = paper_o;
  f.paper_time_s = busy + paper_o;
  return f;
}

} // namespace charm::sim
