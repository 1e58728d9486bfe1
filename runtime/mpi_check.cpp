#include "runtime/mpi_check.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <thread>
#include <vector>

namespace charm::rt {

int mpi_world_rank() {
  int init = 0, fin = 0;
  if (MPI_Initialized(&init) != MPI_SUCCESS || !init) return -1;
  if (MPI_Finalized(&fin) != MPI_SUCCESS || fin) return -1;
  int r = -1;
  if (MPI_Comm_rank(MPI_COMM_WORLD, &r) != MPI_SUCCESS) return -1;
  return r;
}

const std::string& mpi_host() {
  static const std::string name = [] {
    std::array<char, MPI_MAX_PROCESSOR_NAME + 1> buf{};
    int len = 0;
    if (MPI_Get_processor_name(buf.data(), &len) == MPI_SUCCESS && len > 0)
      return std::string(buf.data(), std::size_t(len));
    std::array<char, 256> h{};
    if (gethostname(h.data(), h.size() - 1) == 0) return std::string(h.data());
    return std::string("unknown-host");
  }();
  return name;
}

Error mpi_error(int code, const char* call) {
  // The call as written, without its arguments: "MPI_Bcast(&v, 1, ...)" names MPI_Bcast.
  std::string name(call);
  if (const auto p = name.find('('); p != std::string::npos) name.resize(p);
  char msg[MPI_MAX_ERROR_STRING + 1] = {};
  int len = 0;
  std::string text = MPI_Error_string(code, msg, &len) == MPI_SUCCESS ? std::string(msg, std::size_t(len))
                                                                      : fmt::format("MPI error code {}", code);
  return Error{"mpi", fmt::format("{} failed on rank {} (host {}): {}", name, mpi_world_rank(), mpi_host(), text)};
}

Status mpi_wait(MPI_Request& req, double timeout_s, const std::string& what, std::mutex* mu) {
  const auto t0 = std::chrono::steady_clock::now();
  auto backoff = std::chrono::microseconds(20);
  for (;;) {
    int flag = 0, rc = 0;
    {
      std::unique_lock<std::mutex> lk =
          mu != nullptr ? std::unique_lock<std::mutex>(*mu) : std::unique_lock<std::mutex>();
      rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) {
      Error e = mpi_error(rc, "MPI_Test");
      e.what += " (waiting for " + what + ")";
      return e;
    }
    if (flag) return {};
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (timeout_s > 0 && waited > timeout_s)
      return Error{"", fmt::format("stall: rank {} waited {:.1f} s for {}: a peer did not take part (stopped, dead, or "
                                   "running other work)",
                                   mpi_world_rank(), timeout_s, what)};
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(2000));
  }
}

Expected<Agreed> mpi_agree(MPI_Comm comm, const Status& mine, int code, double timeout_s, const std::string& what) {
  int rank = 0, size = 1;
  CHARM_MPI_TRY(MPI_Comm_rank(comm, &rank));
  CHARM_MPI_TRY(MPI_Comm_size(comm, &size));
  // The lowest failing rank, or `size` when every rank is fine.
  int failing = mine.ok() ? size : rank, lowest = size;
  MPI_Request req = MPI_REQUEST_NULL;
  CHARM_MPI_TRY(MPI_Iallreduce(&failing, &lowest, 1, MPI_INT, MPI_MIN, comm, &req));
  if (auto s = mpi_wait(req, timeout_s, "the other ranks to agree on " + what); !s) return s.error();
  Agreed out;
  if (lowest >= size) return out;
  // The failing rank's exit code, field, where and what, in one message: [code, field, len(where), len(what)]
  // + text.
  const Error& e = mine.error();
  std::string text = rank == lowest ? e.where + e.what : std::string();
  std::array<int, 4> head{code, int(e.field), int(std::min<std::size_t>(e.where.size(), INT_MAX / 4)),
                          int(std::min<std::size_t>(e.what.size(), INT_MAX / 4))};
  CHARM_MPI_TRY(MPI_Ibcast(head.data(), int(head.size()), MPI_INT, lowest, comm, &req));
  if (auto s = mpi_wait(req, timeout_s, "the message of failing rank " + std::to_string(lowest)); !s) return s.error();
  text.resize(std::size_t(head[2]) + std::size_t(head[3]));
  if (!text.empty()) {
    CHARM_MPI_TRY(MPI_Ibcast(text.data(), int(text.size()), MPI_CHAR, lowest, comm, &req));
    if (auto s = mpi_wait(req, timeout_s, "the message of failing rank " + std::to_string(lowest)); !s)
      return s.error();
  }
  out.code = head[0];
  Error agreed{text.substr(0, std::size_t(head[2])), text.substr(std::size_t(head[2]))};
  agreed.field = Field(head[1]);
  out.status = std::move(agreed);
  return out;
}

}  // namespace charm::rt
