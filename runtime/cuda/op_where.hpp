#pragma once
// op_where: how PlanRunner's errors name an op (shared by the files that hold its members).

#include <fmt/format.h>

#include <string>

#include "scheduler/ir/plan.hpp"

namespace charm::rt::cuda {

inline std::string op_where(const ir::Plan& plan, ir::OpId id) {
  return fmt::format("rank {} op {} ({})", plan.op(id).rank, id, ir::op_label(plan, id));
}

}  // namespace charm::rt::cuda
