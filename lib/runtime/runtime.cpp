// Implementation of runtime.hpp: MPI init, node-local ranks, hosts, Slurm.
#include "runtime/runtime.hpp"

#include <omp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "core/error.hpp"
#include "core/host.hpp"
#include "core/log.hpp"
#include "core/phase_clock.hpp"
#include "core/util.hpp"
#include "runtime/watchdog.hpp"

namespace st {

void throw_mpi_error(const char* call, int rc, const char* file, int line) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, buf, &len);
  throw Error(error_prefix(file, line) + "MPI error in " + call + ": " + std::string(buf, len));
}

namespace {
int env_int(const char* n, int dflt) {
  auto v = env(n);
  if (!v || v->empty()) return dflt;
  try {
    return std::stoi(*v);
  } catch (...) {
    return dflt;
  }
}
std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) {
  // A second Ctrl-C while the emergency checkpoint is being written means
  // "stop now": the default action (the process ends, the save is lost).
  if (sig == SIGINT && g_signal.load() != 0) {
    ::signal(SIGINT, SIG_DFL);
    ::raise(SIGINT);
    return;
  }
  g_signal.store(sig);
}
}  // namespace

namespace {
// Open MPI waits for the other ranks during MPI_Init and MPI_Finalize in
// loops of a progress pass and usleep(100) (OMPI_LAZY_WAIT_FOR_COMPLETION):
// with the default 50 us timer slack a waiting rank wakes about 7000 times
// a second, and hundreds of ranks of one host waiting so take the cores
// from the ranks still starting, so MPI_Init's CPU per rank grew with the
// rank count (perf: a third of its samples in the scheduler and nanosleep).
// A 5 ms slack for those two calls lets the kernel batch the wake-ups (at
// most ~200 a second); the previous slack is restored after them, so the
// run's own waits keep their timing.
class CoarseTimerSlack {
 public:
  CoarseTimerSlack() : prev_(::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)) {
    if (prev_ >= 0) ::prctl(PR_SET_TIMERSLACK, 5'000'000UL, 0, 0, 0);
  }
  ~CoarseTimerSlack() {
    if (prev_ > 0) ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(prev_), 0, 0, 0);
  }
  CoarseTimerSlack(const CoarseTimerSlack&) = delete;
  CoarseTimerSlack& operator=(const CoarseTimerSlack&) = delete;

 private:
  long prev_;
};
}  // namespace

// Two TCP connections between each pair of ranks, unless the launch says
// otherwise (OMPI_MCA_btl_tcp_links; read at MPI_Init, only by Open MPI's
// TCP transport). Over one connection Open MPI queues a rendezvous'
// control messages behind the data already on it, so two ranks exchanging
// large messages both ways (a 2-rank ring's rounds, pipeline neighbours'
// activations and gradients) often move one direction after the other. On
// the emulated cluster (1 Gbit/s links), the 2-rank all-reduce of 78.6 MB
// (scaletrain-plan-probe, one rank a node): 1.33 s with one connection,
// 0.74 s with two, 0.70 s with four; the trainer's steps took 0.67-0.74 s
// or 1.00-1.06 s for it, step by step at random. 4 ranks (each sends to one
// peer and receives from another): the same with one or two.
namespace {
void default_tcp_links() { ::setenv("OMPI_MCA_btl_tcp_links", "2", /*overwrite=*/0); }
}  // namespace

Runtime::Runtime(int* argc, char*** argv) {
  default_tcp_links();
  {
    const CoarseTimerSlack slack;
    ST_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
  }
  init_wall_ = wall_time();
  init_cpu_ = process_cpu_seconds();
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  ST_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  ST_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  host_ = std::string(name, size_t(len));
  set_error_identity(host_, rank_);
  log_set_rank(rank_);

  MPI_Comm local;
  ST_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  // The CPUs this node's ranks may run on together (HostShare::cores): one
  // rank bound to a core says nothing of its peers', a job's cpuset is
  // less than the machine.
  const std::string bits = affinity_bits();
  std::vector<char> masks(bits.size() * size_t(local_size_));
  ST_MPI_CHECK(MPI_Allgather(bits.data(), int(bits.size()), MPI_CHAR, masks.data(),
                             int(bits.size()), MPI_CHAR, local));
  std::vector<std::string> each;
  for (int r = 0; r < local_size_; ++r)
    each.emplace_back(masks.data() + size_t(r) * bits.size(), bits.size());
  node_cpus_ = union_cpus(each);
  MPI_Comm_free(&local);

  // Gather host names to list hosts with their ranks (node order = first rank).
  std::vector<char> all(size_t(size_) * MPI_MAX_PROCESSOR_NAME, 0);
  ST_MPI_CHECK(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                             MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD));
  std::map<std::string, size_t> idx;
  for (int r = 0; r < size_; ++r) {
    std::string h(&all[size_t(r) * MPI_MAX_PROCESSOR_NAME]);
    auto it = idx.find(h);
    if (it == idx.end()) {
      idx[h] = hosts_.size();
      hosts_.push_back({h, {r}});
    } else {
      hosts_[it->second].second.push_back(r);
    }
  }
  num_nodes_ = int(hosts_.size());
  node_index_ = int(idx[host_]);
  std::vector<std::string> host_of(static_cast<size_t>(size_));
  for (const auto& [h, ranks] : hosts_)
    for (int r : ranks) host_of[size_t(r)] = h;
  watchdog::init(MPI_COMM_WORLD, std::move(host_of));

  if (auto j = env("SLURM_JOB_ID")) {
    slurm_.job_id = *j;
    slurm_.step_id = env("SLURM_STEP_ID").value_or("");
    slurm_.job_name = env("SLURM_JOB_NAME").value_or("");
    slurm_.nodelist = env("SLURM_JOB_NODELIST").value_or("");
    slurm_.partition = env("SLURM_JOB_PARTITION").value_or("");
    slurm_.ntasks = env_int("SLURM_NTASKS", 0);
    slurm_.nnodes = env_int("SLURM_JOB_NUM_NODES", 0);
    slurm_.procid = env_int("SLURM_PROCID", -1);
    slurm_.localid = env_int("SLURM_LOCALID", -1);
  }
}

namespace {
// Every thread of this process to the lowest priority (nice 19; threads made
// later inherit it). At MPI_Finalize each rank sends the launcher's PMIx
// server (mpirun) a "finalize" message and waits at most 2 s for its
// answer (PMIx_Finalize's fixed timer); a rank that exits without the
// answer counts as one that never finalized ("exiting improperly", exit
// status 1) when the launcher sees its exit first. With hundreds of ranks
// on a few cores the ranks' own teardown and waits took the cores, the
// launcher answered too late, and 256-rank runs failed after training.
// At nice 19 the ranks leave the cores to the launcher (nice 0).
void yield_cores_to_launcher() {
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const int tid = std::atoi(t.path().filename().c_str());
    if (tid > 0) (void)::setpriority(PRIO_PROCESS, id_t(tid), 19);
  }
}
}  // namespace

Runtime::~Runtime() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  // Ranks that outnumber the node's CPUs (core/host.hpp, one thread each).
  if (host_share(1).oversubscribed()) yield_cores_to_launcher();
  const CoarseTimerSlack slack;
  MPI_Finalize();
}

std::string Runtime::mpi_version() const {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, size_t(len));
  auto nl = s.find_first_of("\n,");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

int Runtime::mpi_tcp_links() const {
  int provided = 0, index = -1, count = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return 0;
  unsigned links = 0;
  MPI_T_cvar_handle h;
  if (MPI_T_cvar_get_index("btl_tcp_links", &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &h, &count) == MPI_SUCCESS) {
    if (count != 1 || MPI_T_cvar_read(h, &links) != MPI_SUCCESS) links = 0;
    MPI_T_cvar_handle_free(&h);
  }
  MPI_T_finalize();
  return int(links);
}

void Runtime::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

int pending_signal() { return g_signal.load(); }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal";
  }
}

}  // namespace st
