#pragma once
// Dense attention in fp64 over the global tensors: the judge of every plan.
// Natural sequence order, causal mask key pos <= query pos, scale 1/sqrt(D).

#include "runtime/global_tensors.hpp"

namespace charm::rt {

struct Reference {
  std::vector<double> out, lse;    // [B, S, H, D], [B, H, S]
  std::vector<double> dq, dk, dv;  // filled when backward was asked for
};

/// Forward always; backward (from in.dout and the fp64 forward) when `backward`.
[[nodiscard]] Reference reference_attention(const ir::Workload& w, const GlobalTensors& in, bool backward);

}  // namespace charm::rt
