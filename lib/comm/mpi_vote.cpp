// MpiCommunicator's host exchanges that give up after a timeout instead of
// aborting the job (mpi_communicator.hpp): the checkpoint commit vote runs
// them on the writer thread, off the step's critical path, where a slow
// writer on another rank must fail one save, not the run.
#include <algorithm>
#include <climits>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/poll_wait.hpp"
#include "core/util.hpp"
#include "runtime/watchdog.hpp"

namespace st {

bool MpiCommunicator::thread_multiple() {
  int provided = 0;
  ST_MPI_CHECK(MPI_Query_thread(&provided));
  return provided >= MPI_THREAD_MULTIPLE;
}

// Polls (core/poll_wait.hpp) with a growing sleep (50 us to 5 ms): a
// background wait leaves the cores to training. On expiry the members are
// asked whether they are alive (a silent one aborts the job, named); when
// all answer, false.
bool MpiCommunicator::wait_patiently(MPI_Request* r, double timeout_s, const char* what) {
  const double t0 = wall_time();
  const std::string doing = std::string(what) + " on group '" + name_ + "'";
  bool gave_up = false;
  PollPolicy p;
  p.spins = 0;
  p.sleep_s = 50e-6;
  p.sleep_frac = 0.05;
  p.sleep_max_s = 5e-3;
  p.answer_every_s = 0;
  poll_wait(
      [&] {
        int flag = 0;
        ST_MPI_CHECK(MPI_Test(r, &flag, MPI_STATUS_IGNORE));
        return flag != 0 || gave_up;
      },
      [&] {
        watchdog::poll(doing);
        if (wall_time() - t0 > timeout_s) {
          watchdog::on_timeout(comm_, doing, name_, timeout_s, false);
          gave_up = true;
        }
      },
      p);
  return !gave_up;
}

bool MpiCommunicator::try_all_reduce_min(int* v, double timeout_s, const char* what) {
  MPI_Request r;
  ST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MIN, comm_, &r));
  return wait_patiently(&r, timeout_s, what);
}

bool MpiCommunicator::try_gather(const std::string& mine, std::vector<std::string>* all, int root,
                                 double timeout_s, const char* what) {
  int len = int(mine.size());
  std::vector<int> lens(rank_ == root ? size_t(size_) : 0), displs(lens.size());
  MPI_Request r;
  ST_MPI_CHECK(MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, comm_, &r));
  if (!wait_patiently(&r, timeout_s, what)) return false;
  std::string buf;
  if (rank_ == root) {
    int64_t tot = 0;
    for (int i = 0; i < size_; ++i) {
      displs[size_t(i)] = int(tot);
      tot += lens[size_t(i)];
    }
    ST_CHECK(tot < INT_MAX, what, ": ", tot, " bytes are too many for one MPI_Gatherv");
    buf.resize(size_t(tot));
  }
  ST_MPI_CHECK(MPI_Igatherv(mine.data(), len, MPI_CHAR, buf.data(), lens.data(), displs.data(),
                            MPI_CHAR, root, comm_, &r));
  if (!wait_patiently(&r, timeout_s, what)) return false;
  if (rank_ == root) {
    all->clear();
    for (int i = 0; i < size_; ++i)
      all->push_back(buf.substr(size_t(displs[size_t(i)]), size_t(lens[size_t(i)])));
  }
  return true;
}

bool MpiCommunicator::try_broadcast(int* v, int root, double timeout_s, const char* what) {
  MPI_Request r;
  ST_MPI_CHECK(MPI_Ibcast(v, 1, MPI_INT, root, comm_, &r));
  return wait_patiently(&r, timeout_s, what);
}
}  // namespace st
