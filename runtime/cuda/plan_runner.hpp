#pragma once
// PlanRunner: the host side of the GPU executor, shared by cuda-local and cuda.
//
// The host walks the plan once and enqueues everything; it never waits for
// the GPU while doing so. Ops of one (rank, stream) go to one CUDA stream in
// id order; an op waits for its dependencies on other streams through their
// end events. The host enqueues an op only after every dependency is enqueued,
// because waiting on an event that has not been recorded yet is a no-op in
// CUDA: the walk is a topological order, found by sweeping the streams until
// nothing moves. If something is left then, the plan cannot run (deadlock),
// which is reported with the op that is stuck.
//
// Send/Recv groups (consecutive comm ops with one group id):
//   with an IssueGroup hook (NCCL): deps, then the hook issues the whole group
//     (ncclGroupStart ... ncclGroupEnd) on the stream.
//   without one (cuda-local, all ranks here): the group is opened (deps waited,
//     start events recorded); a Recv is a copy on the receiver's stream once its
//     Send's group is open (stream waits the sender's start event); the group
//     closes when its receives are copied and its sends' receives are too (the
//     sender's stream waits for those copies: the source may be reused after).
//     This is NCCL's rendezvous, so a plan that runs under NCCL runs here.
//
// Region plans (Ulysses, USP, TASP) run as on the CPU executor: a root buffer
// is one allocation, a view its owners' sub-span (device_plan.hpp); a compute
// runs its visible (q owner, kv owner) blocks, merge, accumulate and pack go
// owner block by owner block, and a copy between regions is a list of 2-D
// copies (cudaMemcpy2DAsync). A partial O travels in the dtype, as the plan
// counts it: a Send of an Out buffer converts its fp32 O into the root's wire
// area first, a Recv converts back after (locally: one rounding copy).
//
// After enqueueing, wait() polls the end events (and the hook's error check)
// against the watchdog's deadline.

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "runtime/cuda/block_attention.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/cuda/cuda_raii.hpp"
#include "runtime/cuda/device_layout.hpp"
#include "runtime/cuda/device_plan.hpp"
#include "scheduler/ir/op_args.hpp"
#include "scheduler/ir/plan_index.hpp"

namespace charm::rt::cuda {

class PlanRunner {
 public:
  struct Hooks {
    /// Issues the Send/Recv ops `group` (one rank, one stream) on `stream`; unset: local copies.
    std::function<Status(std::span<const ir::OpId> group, cudaStream_t stream)> issue_group;
    /// Called while waiting: an error (e.g. ncclCommGetAsyncError) ends the run.
    std::function<Status()> poll;
    /// Called when the watchdog gives up or poll fails (e.g. ncclCommAbort on every communicator).
    std::function<void()> abort;
  };

  /// Allocates the buffers, streams, events and kernels of `local_ranks` on the current device.
  [[nodiscard]] static Expected<std::unique_ptr<PlanRunner>>
  create(const ir::Plan& plan, std::vector<ir::RankId> local_ranks, const CudaRunOptions& opt, Hooks hooks);
  ~PlanRunner();
  PlanRunner(const PlanRunner&) = delete;
  PlanRunner& operator=(const PlanRunner&) = delete;

  /// (Re)initialises every buffer: inputs from `in`, accumulators empty. Synchronises.
  [[nodiscard]] Status init_buffers(const GlobalTensors& in);
  /// Enqueues the whole plan and waits for it (watchdog). Times are then in start_ms()/end_ms().
  [[nodiscard]] Status run();
  /// A local rank's results (after run()).
  [[nodiscard]] Expected<RankOutputs> outputs(ir::RankId rank);

  [[nodiscard]] const std::vector<double>& start_ms() const { return start_ms_; }
  [[nodiscard]] const std::vector<double>& end_ms() const { return end_ms_; }
  [[nodiscard]] double makespan_ms() const { return makespan_ms_; }
  [[nodiscard]] double enqueue_ms() const { return enqueue_ms_; }
  [[nodiscard]] std::size_t rank_bytes(ir::RankId r) const { return rank_bytes_[std::size_t(r)]; }
  /// What Send or Recv `id` moves: its buffer (a view: its span of the root), or the buffer's
  /// span of the root's wire area when the wire form differs (Out in a half dtype).
  struct Transfer {
    void* ptr = nullptr;
    std::size_t bytes = 0;
  };
  [[nodiscard]] Expected<Transfer> transfer(ir::OpId id) const;

 private:
  struct Lane {
    ir::RankId rank = 0;
    ir::Stream stream = ir::Stream::Compute;
    Stream cs;
    std::span<const ir::OpId> ops;                      // its lane of the index, in stream order
    std::size_t next = 0;                               // first op not yet enqueued
    bool open = false;                                  // local mode: the group at `next` is open
    std::size_t done = 0;                               // wait(): ops whose end event completed
    std::vector<std::unique_ptr<BlockAttention>> attn;  // one per block shape of its Compute ops
  };

  PlanRunner(const ir::Plan& plan, Hooks hooks) : plan_(plan), idx_(plan), hooks_(std::move(hooks)) {}
  // create(), step by step.
  [[nodiscard]] Status set_local_ranks(const std::vector<ir::RankId>& local_ranks);
  void build_lanes();
  [[nodiscard]] Status create_streams(const CudaRunOptions& opt);
  [[nodiscard]] Status allocate_buffers();
  [[nodiscard]] Status plan_computes();
  [[nodiscard]] Status create_kernels(Lane& l, const CudaRunOptions& opt);
  // One function per local op kind (ir::decode has checked the slots' buffers and kinds).
  [[nodiscard]] Status compute_fwd(ir::OpId id, const ir::ComputeFwdArgs& a);
  [[nodiscard]] Status compute_bwd(ir::OpId id, const ir::ComputeBwdArgs& a);
  [[nodiscard]] Status merge(Lane& l, ir::OpId id, const ir::MergeArgs& a);
  [[nodiscard]] Status accumulate(Lane& l, ir::OpId id, const ir::AccumulateArgs& a);
  [[nodiscard]] Status pack(Lane& l, ir::OpId id, const ir::PackArgs& a);
  [[nodiscard]] Status copy(Lane& l, ir::OpId id, const ir::CopyArgs& a);
  /// Checks every buffer is on this process and, for ops that go block by block, that the
  /// buffers hold one region.
  [[nodiscard]] Status local_buffers(ir::OpId id, std::initializer_list<ir::BufferId> bufs) const;
  [[nodiscard]] Status same_region(ir::OpId id, ir::BufferId a, ir::BufferId b, const char* what) const;
  /// Device address of buffer b's start, of owner x's block's section, of its wire form.
  [[nodiscard]] char* base(ir::BufferId b) const;
  [[nodiscard]] char* section(ir::BufferId b, ir::RankId x, int sec) const;
  [[nodiscard]] char* wire_section(ir::BufferId b, ir::RankId x, int sec) const;
  [[nodiscard]] float* f32(ir::BufferId b, ir::RankId x, int sec) const {
    return reinterpret_cast<float*>(section(b, x, sec));
  }
  [[nodiscard]] void* dat(ir::BufferId b, ir::RankId x, int sec) const {
    return static_cast<void*>(section(b, x, sec));
  }
  /// Partial O to and from the wire form, owner block by owner block (Out in a half dtype).
  [[nodiscard]] Status convert_wire(ir::BufferId b, bool to_wire, cudaStream_t s);
  /// Local mode: receive `rb` from `sb` (same kind and region) on stream s.
  [[nodiscard]] Status local_transfer(ir::OpId id, ir::BufferId sb, ir::BufferId rb, cudaStream_t s);
  /// NCCL mode: the wire conversions before (sends) or after (receives) a group.
  [[nodiscard]] Status stage_group(std::span<const ir::OpId> group, bool before, cudaStream_t s);
  [[nodiscard]] std::size_t group_end(const Lane& l) const;
  [[nodiscard]] bool deps_enqueued(ir::OpId id) const;
  [[nodiscard]] Status wait_deps(const Lane& l, ir::OpId id);
  [[nodiscard]] Expected<bool> step(Lane& l);
  [[nodiscard]] Expected<bool> step_local_group(Lane& l, std::size_t end);
  [[nodiscard]] Status run_local(Lane& l, ir::OpId id);
  [[nodiscard]] Status wait_all();
  [[nodiscard]] std::string stuck_message(bool enqueue) const;

  const ir::Plan& plan_;
  ir::PlanIndex idx_;
  Hooks hooks_;
  CudaRunOptions opt_;
  std::vector<char> local_;  // by rank
  DeviceBuffers dev_;        // where each buffer lives
  std::vector<Lane> lanes_;
  std::vector<DeviceMem<char>> buffers_;         // by BufferId; roots of this process only
  std::vector<DeviceMem<char>> wire_;            // by BufferId; roots with a wire area
  std::vector<ComputeBlocks> blocks_;            // by OpId; local Compute ops
  std::vector<BlockAttention*> attn_;            // by OpId; the kernels of a Compute op's block shape
  std::vector<std::vector<float>> host_inputs_;  // by BufferId, cached fp32 inputs
  DeviceMem<float> staging_;                     // fp32 upload area
  std::size_t staging_elems_ = 0;
  DeviceMem<int> vis_;                              // visible key counts of every block (MaskTable::counts)
  std::vector<Event> start_ev_, end_ev_, copy_ev_;  // by OpId (null where unused)
  Event t0_;
  std::vector<char> enqueued_, opened_, copied_;
  std::vector<double> start_ms_, end_ms_;
  std::vector<std::size_t> rank_bytes_;
  double makespan_ms_ = 0, enqueue_ms_ = 0;
  bool poisoned_ = false;  // the GPU may hold work that never finishes: skip the teardown that would wait for it
};

}  // namespace charm::rt::cuda
