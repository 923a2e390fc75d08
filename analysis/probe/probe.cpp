// scaletrain-plan-probe: the MPI half of `scaletrain-plan calibrate`, the one
// MPI program under analysis/ (the planner itself links no MPI; calibrate
// launches this with mpiexec at each rank count). Through the trainer's own
// communicator (lib/comm MpiCommunicator's device collectives on the CPU
// device's stream, as the engine calls them) it times all-reduce, reduce-scatter, all-gather, the
// ring shift of ring attention and pipeline point-to-point sends over the whole world at a list of
// message sizes; and, with every rank computing at once, one pass over a list of ops (ops.hpp
// keys), so calibrate can tell how much slower a rank computes when the node's cores are shared.
// Rank 0 prints one line per measurement:
//   coll <kind> <ranks> <bytes> <seconds> <per_node> <node_ranks>
//        (mean over calls back to back; ranks: the group's size; per_node:
//        the most of the group's members on one node; node_ranks: the most
//        ranks on one node issuing the same collective at once, in this
//        group or another)
//   compute <ranks> <ratio>                    (every rank at once / rank 0 alone)
//   mpi_own <kind> <ranks> <bytes> <seconds> (...)   (--compare-mpi 1: the same
//        all-reduce, reduce-scatter or all-gather through MPI's own non-blocking
//        call instead of the communicator's ring, timed right after it)
//
//   mpiexec -n N scaletrain-plan-probe [--sizes B,B,...] [--seconds S] [--ops "KEY;KEY"]
//                                      [--busy 1]   (collectives beside a computing thread)
//                                      [--groups node-local]
//                                      [--compare-mpi 1]  (also MPI's own calls)
// --groups node-local: the world is split into groups of the ranks holding
// the same rank on their node (one member per node each), and every group
// times its collectives at once: the groups share each node's cores and
// link, as a layout's data-parallel groups do when its ranks are placed
// round robin over the nodes. Without it the world is one group.
#include <mpi.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/host.hpp"
#include "core/poll_wait.hpp"
#include "core/util.hpp"
#include "plan/ops.hpp"
#include "planner/op_runner.hpp"
#include "runtime/runtime.hpp"
#include "tensor/device.hpp"

namespace {
using st::MpiCommunicator;
using st::poll_wait;
using st::PollPolicy;

// Waits for a one-float message from rank 0 by polling with sleeps, so the
// waiting rank leaves its core to the one that computes (a blocking MPI
// receive spins).
void quiet_recv(MpiCommunicator& w, int tag) {
  PollPolicy every_20ms;  // the tree's one wait loop (core/poll_wait.hpp)
  every_20ms.spins = 0;
  every_20ms.sleep_s = 0.02;
  poll_wait(
      [&] {
        int flag = 0;
        MPI_Iprobe(0, tag, w.mpi(), &flag, MPI_STATUS_IGNORE);
        return flag != 0;
      },
      [] {}, every_20ms);
  float x = 0;
  w.recv(&x, 1, 0, tag);
}

// Times `f` on every rank back to back, as a step's reductions follow each
// other: one call to warm up and size the pass, then as many calls as fill
// `seconds` (3 at least) with no barrier between them; the pass's time is
// the slowest rank's, over the calls. A mean over a window of many CFS
// periods pays a CPU quota (and a shaped link's token bucket) as a whole
// step pays it, where a median of single calls after a barrier meets the
// quota and the bucket refilled.
template <typename F>
double timed(MpiCommunicator& w, double seconds, F f) {
  w.barrier();
  double t0 = st::wall_time();
  f();
  double first = st::wall_time() - t0;
  w.all_reduce_max(&first, 1);
  double reps = std::clamp(std::ceil(seconds / std::max(first, 1e-6)), 3.0, 20000.0);
  w.all_reduce_max(&reps, 1);  // every rank makes the same calls
  w.barrier();
  t0 = st::wall_time();
  for (int i = 0; i < int(reps); ++i) f();
  double dt = st::wall_time() - t0;
  w.all_reduce_max(&dt, 1);
  return dt / reps;
}

// The command line: what to time and how.
struct ProbeOptions {
  std::vector<int64_t> sizes = {4096, 65536, 1 << 20, 4 << 20, 16 << 20};
  double seconds = 0.2;
  std::string ops;
  bool busy = false, node_local = false, compare_mpi = false;
};

// Parses "--flag value" pairs; UsageError naming a flag without a value, a
// bad value or an unknown flag.
// A bound as a user reads it (0.001, 3600, 1e+12).
std::string text(double x) {
  std::ostringstream o;
  o << x;
  return o.str();
}

// The number `v` of `flag`, in [lo, hi]; UsageError naming both otherwise.
double number(const std::string& flag, const std::string& v, double lo, double hi) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || !(x >= lo && x <= hi))
    throw st::UsageError(flag + " '" + v + "': valid is a number from " + text(lo) + " to " +
                         text(hi));
  return x;
}

ProbeOptions parse_options(int argc, char** argv) {
  ProbeOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw st::UsageError(a + ": needs a value");
    const std::string v = argv[++i];
    if (a == "--sizes") {
      o.sizes.clear();
      for (const auto& s : st::split(v, ',')) o.sizes.push_back(int64_t(number(a, s, 1, 1e12)));
    } else if (a == "--seconds") {
      o.seconds = number(a, v, 1e-3, 3600);
    } else if (a == "--ops") {
      o.ops = v;
    } else if (a == "--busy") {
      if (v != "0" && v != "1") throw st::UsageError("--busy " + v + ": valid are 0, 1");
      o.busy = v == "1";
    } else if (a == "--compare-mpi") {
      if (v != "0" && v != "1") throw st::UsageError("--compare-mpi " + v + ": valid are 0, 1");
      o.compare_mpi = v == "1";
    } else if (a == "--groups") {
      if (v != "node-local" && v != "world")
        throw st::UsageError("--groups " + v + ": valid are world, node-local");
      o.node_local = v == "node-local";
    } else {
      throw st::UsageError("unknown option '" + a +
                           "' (valid: --sizes, --seconds, --ops, --busy, --groups, "
                           "--compare-mpi)");
    }
  }
  return o;
}

// The collectives' timing: the group each rank times its collectives in
// (the world, or its node-local peers on the other nodes) and the shape
// rank 0 reports: the most members of a group on one node and the most
// ranks on one node.
class CollectiveProbe {
 public:
  // Splits the groups; UsageError where node-local groups would differ in size.
  CollectiveProbe(MpiCommunicator& w, const ProbeOptions& opt)
      : w_(w),
        opt_(opt),
        host_(w.split_host("host")),
        own_(opt.node_local ? w.split(host_->rank(), w.rank(), "node-local") : nullptr),
        g_(own_ ? *own_ : w),
        g_host_(g_.split_host("group-host")) {
    shape_[0] = double(g_host_->size()), shape_[1] = double(host_->size());
    shape_[2] = double(g_.size()), shape_[3] = -double(g_.size());
    w_.all_reduce_max(shape_, 4);
    if (shape_[2] != -shape_[3])
      throw st::UsageError(
          "--groups node-local: the nodes hold different numbers of ranks (groups of " +
          std::to_string(int(-shape_[3])) + " to " + std::to_string(int(shape_[2])) +
          "); place as many ranks on every node");
  }

  // Times every collective at every size (none in a group of one), beside a
  // computing thread with --busy 1.
  void time_collectives() {
    const int n = g_.size();
    // --busy 1: a second thread computes while the collectives are timed, so
    // they meet a node whose cores (and CPU quota) the step's compute keeps
    // busy: on the default CPU device a collective progresses only inside the
    // compute thread's MPI calls, and under a quota only while the node is
    // not throttled.
    std::atomic<bool> stop{false};
    std::thread load;
    if (opt_.busy && n > 1) load = std::thread([&] { st::plan::compute_until(stop); });
    if (n > 1)
      for (int64_t bytes : opt_.sizes) time_size(bytes);
    stop = true;
    if (load.joinable()) load.join();
  }

 private:
  // Rank 0 prints one "coll" line.
  void print(const char* kind, int64_t bytes, double s) const {
    if (w_.rank() == 0)
      std::printf("coll %s %d %lld %.9g %d %d\n", kind, g_.size(), (long long)bytes, s,
                  int(shape_[0]), int(shape_[1]));
  }

  // The trainer's way (the communicator's ring for large messages) and, with
  // --compare-mpi, MPI's own non-blocking call in the same run.
  void time_both_ways(const char* kind, int64_t elems, const std::function<void()>& f) {
    const int n = g_.size();
    const double own = timed(w_, opt_.seconds, f);
    print(kind, elems * 4, own);
    if (!opt_.compare_mpi) return;
    MpiCommunicator::set_rings(false);
    const double mpi = timed(w_, opt_.seconds, f);
    MpiCommunicator::set_rings(true);
    if (w_.rank() == 0)
      std::printf("mpi_own %s %d %lld %.9g (the trainer's / MPI's: %.3f)\n", kind, n,
                  (long long)(elems * 4), mpi, own / mpi);
  }

  // Every collective at one message size: the engine's device collectives on
  // the CPU device's stream (each waited for, as a blocking use in the step
  // would be).
  void time_size(int64_t bytes) {
    MpiCommunicator& g = g_;
    const int n = g.size(), r = g.rank();
    st::Stream& cs = st::cpu_device().compute_stream();
    const st::DType F = st::DType::F32;
    const int64_t elems = std::max<int64_t>(n, bytes / 4 / n * n);
    std::vector<float> a(size_t(elems), 1.f), b(size_t(elems), 0.f);
    const std::vector<int64_t> counts = st::equal_counts(n, elems / n);  // n parts of elems / n
    time_both_ways("all_reduce", elems,
                   [&] { g.all_reduce(a.data(), elems, F, st::ReduceOp::Sum, cs).wait(cs); });
    time_both_ways("reduce_scatter", elems,
                   [&] { g.reduce_scatter(a.data(), b.data(), counts, F, cs).wait(cs); });
    time_both_ways("all_gather", elems,
                   [&] { g.all_gather(a.data(), b.data(), counts, F, cs).wait(cs); });
    // Ring attention's shift: send to the next rank and receive from the
    // previous one at once.
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    print("ring_shift", elems * 4, timed(w_, opt_.seconds, [&] {
            g.exchange({{true, a.data(), elems, next}, {false, b.data(), elems, prev}}, F, cs)
                .wait(cs);
          }));
    // Pipeline hand-off: pairs (0->1, 2->3, ...) at once.
    print("p2p", elems * 4, timed(w_, opt_.seconds, [&] {
            if (r % 2 == 0 && r + 1 < n)
              g.exchange({{true, a.data(), elems, r + 1}}, F, cs).wait(cs);
            if (r % 2 == 1) g.exchange({{false, b.data(), elems, r - 1}}, F, cs).wait(cs);
          }));
  }

  MpiCommunicator& w_;
  const ProbeOptions& opt_;
  std::unique_ptr<MpiCommunicator> host_, own_;
  MpiCommunicator& g_;
  std::unique_ptr<MpiCommunicator> g_host_;
  // Over the world (a max): the most group members on a node, the most ranks
  // on a node, the largest group and minus the smallest.
  double shape_[4];
};

// The slowdown of ranks sharing the node's cores: rank 0 alone (the
// others sleep, not spinning in MPI), then every rank at once, back to
// back, three times; rank 0 prints the median ratio, so that a machine whose
// background load drifts is measured against itself. Each is the mean
// pass over a second or more, so that a CPU quota is paid in both, as
// a whole step pays it.
void time_compute_slowdown(MpiCommunicator& w, const std::string& ops, double seconds) {
  const float one = 1.f;
  std::vector<st::plan::Op> list;
  for (const auto& k : st::split(ops, ';'))
    if (!k.empty()) list.push_back(st::plan::parse_op_key(k, "--ops"));
  const double window = std::max(seconds, 1.0);  // ten CFS periods and more
  std::vector<double> ratios;
  for (int rep = 0; rep < 3; ++rep) {
    double alone = 0;
    if (w.rank() == 0) {
      alone = st::plan::time_ops_pass(list, window);
      for (int k = 1; k < w.size(); ++k) w.send(&one, 1, k, 9);
    } else {
      quiet_recv(w, 9);
    }
    w.barrier();
    double t = st::plan::time_ops_pass(list, window);
    w.all_reduce_max(&t, 1);
    if (w.rank() == 0) ratios.push_back(t / alone);
  }
  if (w.rank() == 0) {
    std::sort(ratios.begin(), ratios.end());
    std::printf("compute %d %.9g\n", w.size(), ratios[1]);
  }
}
}  // namespace

int main(int argc, char** argv) {
  st::Runtime rt(&argc, &argv);
  try {
    const ProbeOptions opt = parse_options(argc, argv);
    // Waits as the trainer's ranks wait (st::set_wait_host, app/job.cpp):
    // where a rank's threads exceed its share of the node's CPUs (a CPU
    // quota counts), waiting ranks sleep between polls. A probe that spins
    // where the step sleeps spends the quota its own transfer needs: on the
    // emulated cluster (0.45 CPU a node) it timed the 2-node all-reduce at
    // about 30 MB/s while the steps reduced at 40-55 MB/s.
    st::set_wait_host(rt.host_share(omp_get_max_threads()));
    MpiCommunicator w(MPI_COMM_WORLD, "world", 600.0);
    CollectiveProbe collectives(w, opt);
    collectives.time_collectives();
    if (!opt.ops.empty()) time_compute_slowdown(w, opt.ops, opt.seconds);
    std::fflush(stdout);
  } catch (const st::UsageError& e) {
    if (rt.rank() == 0) std::fprintf(stderr, "scaletrain-plan-probe: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
