#include "scheduler/ir/shard_documents.hpp"

#include <algorithm>

namespace charm::ir {

namespace {
/// A shard's tokens as parts of documents, by document, then position.
std::vector<ShardDocuments::Part> by_document(const std::vector<Workload::Range>& shard,
                                              const std::vector<std::int64_t>& starts) {
  std::vector<ShardDocuments::Part> out;
  for (const Workload::Range& r : shard) {
    const std::int64_t end = r.begin + r.count;
    auto d = std::size_t(std::upper_bound(starts.begin(), starts.end() - 1, r.begin) - starts.begin() - 1);
    for (std::int64_t p = r.begin; p < end; p = starts[++d]) {
      const std::int64_t stop = std::min(end, starts[d + 1]);
      out.push_back({d, {p, stop - p}});
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.document != b.document ? a.document < b.document : a.range.begin < b.range.begin;
  });
  return out;
}
}  // namespace

ShardDocuments::ShardDocuments(const Workload& w, int ranks)
    : w_(&w), ranks_(ranks), parts_(std::size_t(std::max(ranks, 0))), cut_(std::size_t(std::max(ranks, 0)), 0) {
  starts_.push_back(0);
  for (const std::int64_t len : w.documents) starts_.push_back(starts_.back() + len);
  if (starts_.size() == 1) starts_.push_back(w.seq);
  thd_cut_ = w.thd_blocks();
  if (w.layout == Layout::Balanced && w.causal && w.window == 0) {  // a chunk map equal to THD's cut
    const auto thd = thd_chunk_map(w, ranks);
    thd_cut_ = !thd.empty() && w.chunk_map == thd;
  }
}

const std::vector<ShardDocuments::Part>& ShardDocuments::parts(int rank) const {
  const auto r = std::size_t(rank);
  if (!cut_[r]) {
    parts_[r] = by_document(w_->shard_ranges(rank, ranks_), starts_);
    cut_[r] = 1;
  }
  return parts_[r];
}

double ShardDocuments::pairs(int q_rank, int kv_rank) const {
  if (thd_cut_) return thd_block_pairs(w_->documents, q_rank, kv_rank, ranks_);
  const std::vector<Part>& qs = parts(q_rank);
  const std::vector<Part>& ks = parts(kv_rank);
  double sum = 0;
  std::size_t j = 0;
  for (std::size_t i = 0; i < qs.size();) {
    const std::size_t d = qs[i].document;
    while (j < ks.size() && ks[j].document < d) ++j;
    std::size_t end = i;
    while (end < qs.size() && qs[end].document == d) ++end;
    for (std::size_t k = j; k < ks.size() && ks[k].document == d; ++k)
      for (std::size_t q = i; q < end; ++q) {
        const Workload::Range a = qs[q].range, b = ks[k].range;
        sum += band_pairs(a.begin, a.begin + a.count, b.begin, b.begin + b.count, w_->window);
      }
    i = end;
  }
  return sum;
}

}  // namespace charm::ir
