#include "runtime/faults.hpp"

#include <functional>

namespace charm::rt {

namespace {
/// Drops the first op of `plan` that `pick` chooses, if any.
void drop_first(ir::Plan& plan, const std::function<bool(const ir::Op&)>& pick) {
  for (ir::OpId id = 0; id < static_cast<ir::OpId>(plan.size()); ++id)
    if (pick(plan.op(id))) {
      const ir::OpId ids[] = {id};
      plan.erase_ops(ids);
      return;
    }
}
}  // namespace

ir::Plan broken_copy(const ir::Plan& plan, const Faults& faults) {
  ir::Plan broken = plan;
  if (faults.drop_first_send) drop_first(broken, [](const ir::Op& op) { return op.kind == ir::OpKind::Send; });
  if (faults.drop_first_remote_compute)
    drop_first(broken, [](const ir::Op& op) { return op.kind == ir::OpKind::Compute && op.q_owner != op.kv_owner; });
  return broken;
}

}  // namespace charm::rt
