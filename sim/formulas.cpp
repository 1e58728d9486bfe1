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

// RM+, as the planner builds it (scheduler/planners/charm.cpp):
//   level 1: one KV exchange (Tkv) while the local block computes;
//   level i >= 2: m = 2^(i-2) rounds, a KV and a Q exchange each, on two
//   streams that run back to back; round 0 waits for the previous level's
//   computation (the Commwait of Algorithm 2);
//   a level computes the previous level's last-round items, then its own
//   rounds 0..m-2 as they arrive (Q item first, then KV item); the last
//   round's items are deferred;
//   computing a foreign Q item (bwd: also a KV item) returns a partial on the
//   out stream, one after the other; the run ends with the tail items and the
//   last return.
// Bounded buffers add three waits: a KV (Q) exchange waits until the item
// received two exchanges earlier on its stream is computed (two slots), and
// the computation of a Q (bwd: KV) item waits until the previous such item's
// partial has gone home (one partial slot each). With per-step costs equal on
// every rank, this recurrence is exact; without the waits its steady state is
// sum_i max(C_i, k_i Tc), k = 1, 1, 2^(i-1), when Tq = Tkv (docs/validation.md).
double rmplus_time(int n, Phase ph, const StepCosts& c) {
  if (n == 1) return c.t_comp;
  const bool bwd = ph == Phase::Bwd;
  const int L = log2i(n);
  struct Item { bool q; double arrival; std::size_t draw; };
  std::vector<double> kv_done, q_done;  // per received item: when its compute ends (its slot is free)
  double cursor = c.t_comp, out = 0;    // compute and out streams free (level 1 computes the local block)
  double q_part_free = 0, kv_part_free = 0;
  auto run = [&](const std::vector<Item>& items) {
    for (const Item& it : items) {
      const double part_free = it.q ? q_part_free : bwd ? kv_part_free : 0.0;
      cursor = std::max({cursor, it.arrival, part_free}) + c.t_comp;
      (it.q ? q_done : kv_done)[it.draw] = cursor;
      if (it.q) q_part_free = out = std::max(out, cursor) + c.t_out;             // partial (O, LSE) or dQ goes home
      else if (bwd) kv_part_free = out = std::max(out, cursor) + c.t_dkv;       // dK/dV partial goes home
    }
  };
  double barrier = 0, kv_free = 0, q_free = 0;
  auto receive = [](std::vector<double>& done, double& stream_free, double start, double t) {
    const std::size_t d = done.size();
    const double slot = d >= 2 ? done[d - 2] : 0.0;
    done.push_back(0.0);
    stream_free = std::max({stream_free, start, slot}) + t;
    return Item{false, stream_free, d};
  };
  std::vector<Item> deferred;
  for (int i = 1; i <= L; ++i) {
    const int m = i == 1 ? 1 : 1 << (i - 2);
    std::vector<std::vector<Item>> rounds(static_cast<std::size_t>(m));
    auto exchange = [&](int t) {
      const double start = t == 0 ? barrier : 0.0;
      auto& r = rounds[std::size_t(t)];
      if (i >= 2) {
        Item q = receive(q_done, q_free, start, c.t_q);
        q.q = true;
        r.push_back(q);
      }
      r.push_back(receive(kv_done, kv_free, start, c.t_kv));
    };
    exchange(0);
    run(deferred);
    for (int t = 1; t < m; ++t) {
      exchange(t);
      run(rounds[std::size_t(t - 1)]);
    }
    deferred = rounds.back();
    barrier = cursor;
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
