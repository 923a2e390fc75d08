// scaletrain-bench-checkpoint: the checkpoint writer and the cold restore
// against the storage probe, measured in the same run (not a test; prints).
// Every rank saves --mib-per-rank MiB of fp32 shards through the
// Checkpointer (sync: the write is what is timed), per writer variant
// (HDF5 alignment, pwrite block, write-back hint, the previous H5Dwrite +
// read-back writer), then restores the last save cold (its files dropped
// from the page cache) through find_latest_good + the resharding loader
// under another split of the rows, as the trainer does (each byte read
// once) and with whole files verified first (twice). Prints write / probed
// write and restore / probed read per node, beside the 1-minute load.
// mpirun -np 2 scaletrain-bench-checkpoint --dir D [--mib-per-rank 112] [--saves 3]
//   [--probe-mib 256] [--variants default,no-align,...] [--tensor-mib 16]
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/rank_file.hpp"
#include "checkpoint/storage_probe.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/util.hpp"

namespace fs = std::filesystem;
using namespace st;

namespace {

struct Args {
  std::string dir;
  double mib_per_rank = 112;
  double tensor_mib = 16;
  int saves = 3;
  int probe_mib = 256;
  std::string variants =
      "default,no-align,align-4k,meta-1m,block-1m,block-16m,no-writeback,direct,h5dwrite";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir")
      a.dir = v;
    else if (k == "--mib-per-rank")
      a.mib_per_rank = std::stod(v);
    else if (k == "--tensor-mib")
      a.tensor_mib = std::stod(v);
    else if (k == "--saves")
      a.saves = std::stoi(v);
    else if (k == "--probe-mib")
      a.probe_mib = std::stoi(v);
    else if (k == "--variants")
      a.variants = v;
    else
      throw std::runtime_error("unknown option '" + k + "'");
  }
  if (a.dir.empty()) throw std::runtime_error("--dir is required");
  return a;
}

// The writer settings a variant names (rank_file.hpp WriteTuning).
ckpt::WriteTuning tuning(const std::string& v) {
  ckpt::WriteTuning t;
  if (v == "default") return t;
  if (v == "no-align")
    t.align = 0;
  else if (v == "align-4k")
    t.align = t.align_threshold = 4096;
  else if (v == "meta-1m")
    t.meta_block = 1 << 20;
  else if (v == "block-1m")
    t.block = 1 << 20;
  else if (v == "block-16m")
    t.block = 16 << 20;
  else if (v == "no-writeback")
    t.writeback = 0;
  else if (v == "h5dwrite")
    t.h5_write = true;
  else if (v == "direct")
    t.direct = true;
  else
    throw std::runtime_error("unknown variant '" + v + "'");
  return t;
}

// This rank's state: tensors of [rows, 1024] fp32, each split by rows over
// the ranks, filled with distinct values.
struct State {
  std::vector<std::vector<float>> data;
  std::vector<ShardView> views;
  int64_t rows = 0;
};

State make_state(const Args& a, int rank, int world) {
  State s;
  const int64_t cols = 1024;
  const int64_t per_tensor = int64_t(a.tensor_mib * 1048576 / 4);
  const int64_t rows_local = std::max<int64_t>(1, per_tensor / cols);
  const int n = std::max(1, int(a.mib_per_rank / a.tensor_mib + 0.5));
  s.rows = rows_local * world;
  for (int t = 0; t < n; ++t) {
    s.data.emplace_back(size_t(rows_local * cols));
    auto& d = s.data.back();
    for (size_t i = 0; i < d.size(); ++i) d[i] = float(t * 131 + rank * 7) + 1e-3f * float(i % 977);
  }
  for (int t = 0; t < n; ++t)
    s.views.push_back({"params/t" + std::to_string(t),
                       {s.rows, cols},
                       {rank * rows_local, 0},
                       {rows_local, cols},
                       s.data[size_t(t)].data()});
  return s;
}

void drop_cache(const std::string& step_dir) {
  for (const auto& e : fs::directory_iterator(step_dir)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double load1() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Saves `a.saves` times with variant `v`, each save right after the
// probe's write phase with the same bytes per rank (the disk's rate at that
// moment: this machine's load moves it by several times within a minute).
// Returns the medians of the node's write bandwidth (every rank's bytes /
// the slowest rank's file time), of the paired probe and of their ratio;
// rank 0's median phases in `phases`.
struct WriteFigures {
  double node_Bps = 0, probe_Bps = 0, ratio = 0;
};
WriteFigures bench_write(const Args& a, const std::string& v, MpiCommunicator& world,
                         MpiCommunicator& node, const State& s, double disk_Bps,
                         std::string& dir_out, std::string& phases) {
  ckpt::write_tuning() = tuning(v);
  CheckpointOptions co;
  co.dir = a.dir + "/" + v;
  co.mode = CkptMode::kSync;
  co.keep_last_n = 1;
  co.disk_write_Bps = disk_Bps;
  std::vector<double> bw, pr, ratio;
  std::map<std::string, std::vector<double>> ph;
  const int64_t per_rank = int64_t(s.views.size()) * s.views[0].shape[0] * s.views[0].shape[1] * 4;
  {
    Checkpointer ck(world, co, nullptr);
    CkptState cs;
    cs.tensors = s.views;
    ck.prepare(cs);
    for (int i = 1; i <= a.saves; ++i) {
      const double probe = probe_node_write(a.dir, per_rank, world.rank(), node);
      world.barrier();
      ck.save(i, cs);
      const SaveOutcome o = ck.last_outcome();
      double b = double(o.bytes), fs_ = o.file_s;
      world.all_reduce_sum(&b, 1);
      world.all_reduce_max(&fs_, 1);
      bw.push_back(fs_ > 0 ? b / fs_ : 0);
      pr.push_back(probe);
      ratio.push_back(probe > 0 ? bw.back() / probe : 0);
      for (auto& [k, x] : o.phases.items()) ph[k].push_back(x.get<double>());
    }
    dir_out = ck.last_outcome().path;
  }
  for (auto& [k, x] : ph)
    if (median(x) >= 0.0005) phases += detail::cat(k, " ", int(median(x) * 1000 + 0.5), " ms, ");
  return {median(bw), median(pr), median(ratio)};
}

// Cold restore of `step_dir` by every rank, as the trainer's resume does
// it: find_latest_good over each rank's share of the files (their metadata
// CRC32C; with `whole_files`, every file read whole against its CRC32C
// first, which reads each byte twice: the restore before format /3), then
// its rows of every tensor under another split (rank r of W loads rows
// [r*R/W + R/(2W), ...), wrapping the last into the first rank's file),
// every block checked as it is read. Returns the node's read bandwidth
// (tensor bytes over the slowest rank's time).
struct RestoreFigures {
  double Bps = 0, seconds = 0, verify_s = 0;
  double from_disk = 0, wanted = 0;  // bytes the loaders read (whole CRC blocks) and copied
};
RestoreFigures bench_restore(const std::string& step_dir, MpiCommunicator& world, const State& s,
                             bool whole_files) {
  const int r = world.rank(), w = world.size();
  const int64_t cols = 1024, R = s.rows, shift = R / (2 * w);
  // Row boxes [a, b): the last rank's share wraps around to the first rows.
  const int64_t lo = std::min(R, r * (R / w) + shift), hi = (r == w - 1) ? R : lo + R / w;
  std::vector<std::pair<int64_t, int64_t>> boxes = {{lo, hi}};
  if (r == w - 1 && shift > 0) boxes.push_back({0, shift});
  std::vector<std::vector<float>> buf;
  std::vector<ShardView> want;
  for (const auto& [a, b] : boxes)
    for (size_t t = 0; t < s.views.size(); ++t) {
      buf.emplace_back(size_t((b - a) * cols));
      want.push_back({s.views[t].name, {R, cols}, {a, 0}, {b - a, cols}, buf.back().data()});
    }
  world.barrier();
  drop_cache(step_dir);
  world.barrier();
  const double t0 = wall_time();
  VerifyOptions vo;
  vo.part = r;
  vo.nparts = w;
  vo.data = whole_files;
  vo.all_good = [&](bool ok) {
    double bad = ok ? 0 : 1;
    world.all_reduce_max(&bad, 1);
    return bad == 0;
  };
  const auto found = find_latest_good(fs::path(step_dir).parent_path().string(), vo);
  if (!found) throw std::runtime_error("no good checkpoint in " + step_dir);
  RestoreFigures f;
  f.verify_s = wall_time() - t0;
  LoadResult lr = load(*found, want, r);
  f.seconds = wall_time() - t0;
  world.all_reduce_max(&f.verify_s, 1);
  world.all_reduce_max(&f.seconds, 1);
  f.wanted = double(lr.bytes_read);
  f.from_disk = double(lr.bytes_from_disk);
  world.all_reduce_sum(&f.wanted, 1);
  world.all_reduce_sum(&f.from_disk, 1);
  f.Bps = f.wanted / f.seconds;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 0;
  try {
    const Args a = parse(argc, argv);
    MpiCommunicator world(MPI_COMM_WORLD, "world", 600);
    auto node = world.split_host("node");
    fs::create_directories(a.dir);
    const State s = make_state(a, world.rank(), world.size());
    const double l0 = load1();
    const StorageProbe p = probe_storage(a.dir, int64_t(a.probe_mib) << 20, world.rank(), *node);
    const bool r0 = world.rank() == 0;
    if (r0)
      std::printf(
          "%s\nload %.2f (1 min) at start, %d rank(s), %.0f MiB per rank in %zu tensors\n\n"
          "Each save follows the probe's write of the same bytes per rank (%d writers); "
          "medians over %d saves:\n\n"
          "| writer variant | node write MiB/s | paired probe MiB/s | write / probe | rank 0 "
          "phases |\n"
          "|---|---|---|---|---|\n",
          p.describe().c_str(), l0, world.size(), a.mib_per_rank, s.views.size(), p.writers,
          a.saves);
    std::string last_dir;
    for (const std::string& v : split(a.variants, ',')) {
      std::string phases, dir;
      const WriteFigures wf = bench_write(a, v, world, *node, s, p.write_all_Bps, dir, phases);
      world.barrier();
      if (v == "default" || last_dir.empty()) {
        if (r0 && !last_dir.empty()) fs::remove_all(fs::path(last_dir).parent_path());
        last_dir = dir;
      } else if (r0) {
        fs::remove_all(fs::path(dir).parent_path());  // the disk's space, for the next variant
      }
      if (r0)
        std::printf("| %s | %.0f | %.0f | %.2f | %s|\n", v.c_str(), wf.node_Bps / 1048576,
                    wf.probe_Bps / 1048576, wf.ratio, phases.c_str());
      std::fflush(stdout);
    }
    // Each restore right after the cold read probed again (the disk's rate
    // at that moment): the trainer's (metadata, then every block once), and
    // the same with whole files verified first (each byte read twice);
    // medians over --saves pairs, the range of the ratio beside them.
    // The paired probe reads at least the bytes each rank restores: a
    // smaller one is served by caches the restore overflows (the hypervisor
    // here served 256 MiB at 4-7 GiB/s against 1-2 GiB/s for 1 GiB).
    const int64_t per_rank =
        int64_t(s.views.size()) * s.views[0].shape[0] * s.views[0].shape[1] * 4;
    const int64_t restore_probe = std::max<int64_t>(int64_t(a.probe_mib) << 20, per_rank);
    for (const bool whole : {false, true}) {
      std::vector<double> ratio, bps, probe, ver, sec;
      RestoreFigures rf;
      const double l = load1();
      for (int i = 0; i < a.saves; ++i) {
        const StorageProbe pr = probe_storage(a.dir, restore_probe, world.rank(), *node);
        rf = bench_restore(last_dir, world, s, whole);
        ratio.push_back(pr.read_all_Bps > 0 ? rf.Bps / pr.read_all_Bps : 0);
        bps.push_back(rf.Bps);
        probe.push_back(pr.read_all_Bps);
        ver.push_back(rf.verify_s);
        sec.push_back(rf.seconds);
      }
      if (r0)
        std::printf(
            "\ncold restore of %s%s, medians of %d (each after its own probe of the cold read, "
            "%d readers, %.0f MiB each): find_latest_good %.3f s, whole restore %.3f s (%.0f MiB "
            "of CRC blocks "
            "read for %.0f MiB wanted), %.0f MiB/s against a probed %.0f MiB/s: restore / "
            "probed %.2f (range %.2f-%.2f); load %.2f (1 min) before, %.2f after\n",
            last_dir.c_str(),
            whole ? " with whole files verified first (every byte read twice)"
                  : " (metadata CRC32C, then each block once as the loader reads it)",
            a.saves, node->size(), double(restore_probe) / 1048576, median(ver), median(sec),
            rf.from_disk / 1048576, rf.wanted / 1048576, median(bps) / 1048576,
            median(probe) / 1048576, median(ratio), *std::min_element(ratio.begin(), ratio.end()),
            *std::max_element(ratio.begin(), ratio.end()), l, load1());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scaletrain-bench-checkpoint: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
