// A cluster file (configs/clusters/*.yaml): what the planner knows about the
// machines a job would run on. The device (name, dense peak FLOP/s at the
// training precision, memory and its bandwidth), how many sit in a node, the
// links inside and between nodes (bandwidth per device, one direction, and
// latency); on a GPU cluster how it is priced (`pricing`: its measured or
// cited kernel rates as they are, or fractions fitted to another
// framework's published table, with named fitted `profiles`); and
// efficiencies: the fractions of those figures a fitted pricing uses
// (docs/planner.md says which are measured and which fitted).
// `scaletrain-plan calibrate` writes a CPU cluster file with measured kernel
// times at the model's shapes, measured collectives and the slowdown of
// ranks sharing the machine's cores. Every key is checked on load; an
// unknown key, a wrong type or an out-of-range value names the file, the key
// and what is valid (UsageError, exit 2).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/host.hpp"

namespace st::plan {

struct Link {
  double bandwidth = 0;  // bytes/s per device, one direction
  double latency = 0;    // seconds per message (per ring step)
};

// A measured collective (CPU clusters) for a group of `ranks`, from
// calibrate's MPI probe: the seconds it took at each size timed (`points`,
// ascending bytes) and time(bytes) = latency + bytes / bandwidth fitted to
// them. seconds() prices a size from the points around it (linear between
// them, the largest's rate beyond it; the fit below the smallest, never
// above the smallest's time); a file without points prices by the fit. One
// line across 4 KB ... 32 MB misprices the large sizes where per-byte costs
// differ by size (CPU ranks under a quota: small messages run at the burst).
//
// Its shape on the nodes: per_node, the most of the group's members on one
// node, and node_ranks, the most ranks on one node issuing the same
// collective at once (its own members and those of other groups like it).
// A group of 4 with 2 on each of 2 nodes moves half its bytes inside the
// nodes; two groups of 4, one member per node each, share every node's link
// and cores: on the emulated cluster the three shapes of a 4-rank
// all-reduce differ by more than the planner's error target.
struct MeasuredCollective {
  std::string kind;  // all_reduce, reduce_scatter, all_gather, ring_shift, p2p
  int ranks = 0;
  int inter_node = -1;  // 1: one rank per node, across the links; 0: inside one node; -1: unsaid
  int per_node = 0, node_ranks = 0;  // 0: unsaid
  Link fit;
  std::vector<std::pair<double, double>> points;  // (bytes, seconds), ascending bytes
  double seconds(double bytes) const;
};

// Kernel-level rates of a GPU cluster (the `rates` section): what the
// hardware does at given shapes, from public benchmarks cited in the file or
// from `scaletrain-plan calibrate` on the machine. rates.cpp interpolates them.
struct GemmRate {  // bf16 GEMM C[m,n] = A[m,k] B[k,n]
  double m = 0, n = 0, k = 0;
  double flops = 0;  // achieved FLOP/s
};
// Fused attention at one head dim, sequence length and block kind:
// causal, one causal call over `seq` tokens (the whole sequence at cp 1;
// FLOPs counted for the causal half); full, one block of `seq` queries over
// `seq` keys with no mask (a ring-attention block between two chunks; its
// whole FLOPs counted).
struct AttnRate {
  int head_dim = 0;
  double seq = 0;
  double fwd_flops = 0, bwd_flops = 0;  // achieved FLOP/s
  std::string block = "causal";         // causal | full
};
// Bytes a memory-bound kernel moves (read + written) and the rate the
// device's own elementwise kernels reach at that size.
struct MemRate {
  double bytes = 0;
  double bw = 0;  // bytes/s
};
struct BusBw {  // nccl-tests' busbw of an all_reduce of `bytes`
  double bytes = 0;
  double busbw = 0;  // bytes/s
};
struct Rates {
  std::vector<GemmRate> gemm;
  std::vector<AttnRate> attention;
  // intra: a group inside one node; inter: a group spanning nodes with every
  // device of each node in it (NCCL runs one ring per NIC).
  std::vector<BusBw> intra, inter;
  // Elementwise and optimizer kernels: achieved bandwidth by bytes moved
  // (ascending bytes); the per-launch overhead of a kernel (seconds; < 0:
  // not given).
  std::vector<MemRate> memory;
  double launch = -1;
  bool empty() const {
    return gemm.empty() && attention.empty() && intra.empty() && inter.empty() && memory.empty() &&
           launch < 0;
  }
};

struct Cluster {
  std::string path;  // the file it was read from ("" when built in code)
  std::string name, device, kind = "gpu", precision = "bf16";
  double peak_flops = 0;        // dense, per device, at `precision`
  std::string peak_source;      // where peak_flops comes from
  double memory_bytes = 0;      // per device
  double memory_reserved = 0;   // bytes the model cannot use (context, library buffers, slack)
  double memory_bandwidth = 0;  // bytes/s per device
  int devices_per_node = 1;
  // Which node each world rank runs on (`placement`): block, devices_per_node
  // consecutive ranks a node (srun's default block distribution, mpirun's
  // default by slot); cyclic, round robin over the job's nodes (srun
  // --distribution=cyclic, mpirun --rank-by node). rank_node, when set
  // (compare: a run's own run.json hosts), says it rank by rank instead.
  std::string placement = "block";
  std::vector<int> rank_node;
  int node_of(int rank, int world) const;
  int nodes = 0;  // nodes available (0: not stated)
  // CPU clusters: the host of each node, as the runtime reads its own
  // (core/host.hpp): `cores_per_node` (0: not stated), `threads_per_rank`
  // (runtime.threads the calibration used) and `cpu_quota`, a cgroup quota
  // on each node (cgroup cpu.max: a container's CPU limit, an emulated
  // node): its ranks together get quota.cpus CPUs x quota.period of CPU
  // time per period, and none after it is spent until the next period (0:
  // none). A rank that computes the whole step runs at the quota (what
  // calibrate's op times are); one that idles part of a period spends the
  // rest of it faster (node_share.hpp). local_ranks is the layout's.
  HostShare host;
  Link intra, inter;
  // Fractions of the peak figures; of the `rates` tables for gemm,
  // attention and network when the file has them (then 1 by default).
  // network: collectives over the inter-node fabric (what mpt-fit fits);
  // network_intra: over the links inside a node (NVLink / NVSwitch), the
  // same as network unless the file gives it.
  struct Efficiency {
    double gemm = 0.6, attention = 0.4, memory = 0.7, network = 0.8, network_intra = 1;
    bool network_intra_given = false;  // false: inside a node too, network
    double intra() const { return network_intra_given ? network_intra : network; }
    double kernel_overhead = 0;  // seconds per kernel call (launch, dispatch)
  } eff;
  // CPU (calibrate): seconds per op key (ops.hpp Op::key) for one rank alone,
  // the slowdown factor of compute when `ranks` ranks share a node, and the
  // measured collectives.
  std::map<std::string, double> op_seconds;
  std::map<int, double> concurrency;
  std::vector<MeasuredCollective> collectives;
  // How a collective issued beside compute progresses (`collective_progress`):
  // async, on its own (NCCL kernels on their stream, a progress thread), so
  // it overlaps the compute issued after it; polls, only while the issuing
  // thread is inside the communicator (MPI requests on the default CPU
  // device's inline stream: the engine's tests between gradients and its
  // waits), so it overlaps no compute and runs when the thread waits.
  // Unsaid (0): by kind, async on gpu, polls on cpu.
  int progress = 0;  // 1: async, -1: polls, 0: by kind
  bool async_progress() const { return progress != 0 ? progress > 0 : gpu(); }
  Rates rates;  // GPU clusters: kernel-level rates (empty: the efficiencies' roofline)
  // How a GPU cluster's kernels and collectives are priced (`pricing`):
  // "rates", at the `rates` tables as measured (calibrate-gpu on the device,
  // or public benchmarks the file cites), elementwise kernels from their
  // bytes at rates.memory, plus rates.launch per kernel call: our own
  // trainer's kernels, no fractions; "fitted", at the `efficiency`
  // fractions of the rates (or of the peaks), fitted to another framework's
  // published table. `profiles` are named sets of fitted fractions a file
  // carries beside its rates (with_profile applies one). CPU clusters: "".
  std::string pricing;
  std::string profile;  // the profile applied (with_profile), "" if none
  std::map<std::string, Efficiency> profiles;
  bool fitted() const { return pricing == "fitted"; }
  std::string notes;                        // free text carried along
  std::map<std::string, std::string> meta;  // calibrated: date, host, command ...

  bool gpu() const { return kind == "gpu"; }
};

// Loads and checks a cluster file (UsageError naming file, key and what is
// valid). peak_tflops may be left out when lib/metrics' table knows the
// device at the precision.
Cluster load_cluster(const std::string& path);
// The file text load_cluster reads back (comments name the units).
std::string cluster_to_yaml(const Cluster& c);
// c priced by its fitted profile `name` (pricing fitted, efficiency =
// profiles[name]); UsageError naming the file and its profiles when it has
// no such profile.
Cluster with_profile(const Cluster& c, const std::string& name);
// The name of the profile the shipped GPU files carry: the fractions
// `scaletrain-plan mpt-fit` fitted to MPT's published H100 table.
inline const char* kPublishedProfile = "mpt-fit";
// For predicting another framework's published table: a fitted (or CPU)
// file as it is, a rates-priced one by its profile `name`.
Cluster fitted_pricing(const Cluster& c, const std::string& name);

}  // namespace st::plan
