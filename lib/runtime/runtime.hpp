// MPI bootstrap and the facts of where this rank runs: world and node-local
// rank (MPI_Comm_split_type), host, Slurm ids, signals for preemption.
// MPI is initialised with MPI_THREAD_MULTIPLE because the checkpoint writer
// thread votes on its own communicator while the loop trains.
#pragma once
#include <mpi.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "core/host.hpp"

namespace st {

struct SlurmInfo {
  std::string job_id, step_id, job_name, nodelist, partition;
  int ntasks = 0, nnodes = 0, procid = -1, localid = -1;
  bool present() const { return !job_id.empty(); }
};

class Runtime {
 public:
  Runtime(int* argc, char*** argv);  // MPI_Init_thread; sets error identity and log rank
  ~Runtime();                        // MPI_Finalize (unless aborted)
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_index() const { return node_index_; }
  int num_nodes() const { return num_nodes_; }
  const std::string& host() const { return host_; }
  // The CPUs this rank shares with the node's local_size() ranks, read from
  // this machine (core/host.hpp), each rank running `threads` threads (0:
  // the host's default).
  HostShare host_share(int threads) const {
    return read_host_share(local_size_, threads, node_cpus_);
  }
  const SlurmInfo& slurm() const { return slurm_; }
  int thread_level() const { return thread_level_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  // host name -> world ranks on it, in node order (gathered at start).
  const std::vector<std::pair<std::string, std::vector<int>>>& hosts() const { return hosts_; }
  std::string mpi_version() const;
  // The TCP connections Open MPI opens between two ranks (its btl_tcp_links,
  // read back through MPI_T: what the transport uses, whoever set it); 0
  // where the MPI library has no such setting.
  int mpi_tcp_links() const;
  // When MPI_Init_thread returned: wall_time() and this process's CPU
  // seconds, so start-up's timing can tell MPI's own start from the rest.
  double init_wall() const { return init_wall_; }
  double init_cpu() const { return init_cpu_; }

  // Exit every rank with `code` (MPI_Abort): for a failure on one rank that
  // would otherwise leave the others waiting in a collective.
  [[noreturn]] void abort(int code);

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_index_ = 0, num_nodes_ = 1;
  int thread_level_ = 0;
  int node_cpus_ = 0;  // the union of this node's ranks' affinity masks (core/host.hpp)
  double init_wall_ = 0, init_cpu_ = 0;
  std::string host_;
  SlurmInfo slurm_;
  std::vector<std::pair<std::string, std::vector<int>>> hosts_;
};

// SIGTERM / SIGUSR1 (as Slurm sends before preemption) and SIGINT (Ctrl-C of
// a rank run without a launcher) set a flag the loop polls; the loop then
// checkpoints and exits with kExitPreempted. A second SIGINT ends the process
// at once. mpirun does not forward TERM or INT to the ranks (it kills them):
// send it USR1, or use scripts/launch.sh (docs/signals.md).
void install_signal_handlers();
int pending_signal();  // 0 if none
const char* signal_name(int sig);
inline constexpr int kExitPreempted = 3;

}  // namespace st
