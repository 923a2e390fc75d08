// Multi-rank checkpoint tests (run with 2 and 4 ranks): save under one
// sharding and load under others, async vs sync commit points, retention,
// corruption fallback, and a rank whose write fails (RLIMIT_FSIZE).
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>

#include "checkpoint/checkpoint.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "hdf5.h"
#include "telemetry/writer.hpp"
#include "test_state.hpp"

namespace fs = std::filesystem;
using namespace st;
using namespace st::test;

namespace {
int rank_() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_() {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A fresh folder, the same on every rank (made by rank 0, name broadcast).
// A fresh folder made by rank 0, its name sent to every rank.
std::string world_dir(const std::string& tag) {
  char buf[4096] = {0};
  if (rank_() == 0) std::snprintf(buf, sizeof buf, "%s", fresh_dir(tag).c_str());
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
  return buf;
}

// Removes the folder when the test ends (rank 0, after every rank is done).
struct DirGuard {
  std::string dir;
  ~DirGuard() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (rank_() == 0) fs::remove_all(dir, ec);
  }
};

CheckpointOptions opts(const std::string& dir, CkptMode m) {
  CheckpointOptions o;
  o.dir = dir;
  o.mode = m;
  o.keep_last_n = 0;
  o.timeout_s = 60;
  o.layout = {{"dp", world_()}, {"tp", 1}};
  return o;
}

std::string latest_of(const std::string& dir) {
  std::string s = read_file(dir + "/latest");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

void save_steps(const std::string& dir, std::initializer_list<long> steps,
                CkptMode m = CkptMode::kSync) {
  MpiCommunicator world(MPI_COMM_WORLD, "world", 600);
  Checkpointer c(world, opts(dir, m), nullptr);
  for (long step : steps) {
    auto v = layout(world_(), rank_(), true);
    fill(v, step);
    c.save(step, state_of(v, step, rank_()));
  }
  c.wait();
}

struct FsizeLimit {  // this process may write files of at most `bytes` bytes
  rlimit old{};
  explicit FsizeLimit(rlim_t bytes) {
    std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old);
    rlimit l = old;
    l.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &l);
  }
  ~FsizeLimit() { setrlimit(RLIMIT_FSIZE, &old); }
};
}  // namespace

// Saved by W ranks with one sharding, loaded by 1..W ranks with another.
TEST(CheckpointMpi, ReshardLoadIsBitwiseEqual) {
  const int W = world_(), r = rank_();
  std::string dir = world_dir("reshard");
  DirGuard guard{dir};
  save_steps(dir, {7});
  auto good = find_latest_good(dir);
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(fs::path(*good).filename(), "step_00000007");
  for (int k = 1; k <= W; ++k) {
    if (r < k) {
      auto v = layout(k, r, false);
      auto want = views(v);
      LoadResult res = load(*good, want, r);
      EXPECT_EQ(mismatches(v, 7), 0) << "loading with " << k << " ranks, rank " << r;
      EXPECT_EQ(res.step, 7);
      EXPECT_EQ(res.saved_world_size, W);
      EXPECT_EQ(res.scalars["rank"], 0);
      EXPECT_EQ(res.rank_scalars["rank"], r);
      EXPECT_EQ(res.rng, (std::vector<uint8_t>{uint8_t(r), 7, 42, 7}));
      EXPECT_EQ(res.layout["dp"], W);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Async: save() returns while the writer thread is held after writing, so the
// step is still step_N.tmp; it commits only when the writer goes on.
TEST(CheckpointMpi, AsyncSaveReturnsBeforeCommit) {
  std::string dir = world_dir("async");
  DirGuard guard{dir};
  auto o = opts(dir, CkptMode::kAsync);
  std::promise<void> reached, release;
  std::shared_future<void> go = release.get_future().share();
  o.test_hook = [&](const std::string& ph, long) {
    if (ph != "written") return;
    reached.set_value();
    go.wait();
  };
  MpiCommunicator world(MPI_COMM_WORLD, "world", 600);
  Checkpointer c(world, o, nullptr);
  if (!c.vote_on_writer_thread()) GTEST_SKIP() << "MPI without MPI_THREAD_MULTIPLE";
  auto v = layout(world_(), rank_(), true);
  fill(v, 3);
  SaveStats st = c.save(3, state_of(v, 3, rank_()));
  EXPECT_FALSE(st.committed);
  std::fill(v[0].buf.begin(), v[0].buf.end(), 0.f);  // the snapshot must not see this
  ASSERT_EQ(reached.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_TRUE(fs::exists(dir + "/step_00000003.tmp/rank_0000" + std::to_string(rank_()) + ".h5"));
  EXPECT_FALSE(fs::exists(dir + "/step_00000003"));
  EXPECT_FALSE(fs::exists(dir + "/latest"));
  release.set_value();
  c.wait();
  EXPECT_TRUE(c.last_outcome().committed) << c.last_outcome().error;
  EXPECT_TRUE(fs::exists(dir + "/step_00000003/index.json"));
  EXPECT_EQ(latest_of(dir), "step_00000003");
  auto w = layout(world_(), rank_(), true);
  auto want = views(w);
  load(dir + "/step_00000003", want, rank_());
  EXPECT_EQ(mismatches(w, 3), 0);
}

// Sync: the commit happens inside save(); telemetry records it.
TEST(CheckpointMpi, SyncSaveCommitsBeforeReturn) {
  std::string dir = world_dir("sync");
  DirGuard guard{dir};
  TelemetryWriter tel;
  std::string tpath = dir + "/tel_" + std::to_string(rank_()) + ".jsonl";
  tel.open(tpath, {{"rank", rank_()}});
  bool in_save = false, hook_in_save = false;
  auto o = opts(dir, CkptMode::kSync);
  o.test_hook = [&](const std::string& ph, long) {
    if (ph == "written") hook_in_save = in_save;
  };
  {
    MpiCommunicator world(MPI_COMM_WORLD, "world", 600);
    Checkpointer c(world, o, &tel);
    auto v = layout(world_(), rank_(), true);
    fill(v, 5);
    EXPECT_GE(c.prepare(state_of(v, 5, rank_())), 0.0);  // the buffers before the first save
    in_save = true;
    SaveStats st = c.save(5, state_of(v, 5, rank_()));
    in_save = false;
    EXPECT_TRUE(st.committed);
    EXPECT_TRUE(hook_in_save);
    EXPECT_GT(st.bytes, 0);
    EXPECT_TRUE(fs::exists(dir + "/step_00000005/index.json"));
    EXPECT_FALSE(fs::exists(dir + "/step_00000005.tmp"));
  }
  tel.close();
  std::string t = read_file(tpath);
  EXPECT_NE(t.find("\"ckpt_begin\""), std::string::npos);
  EXPECT_NE(t.find("\"ckpt_commit\""), std::string::npos);
  EXPECT_NE(t.find("\"bandwidth_Bps\""), std::string::npos);
  // Where the save's time went, per phase (rank 0 also commits).
  nlohmann::json commit;
  for (const auto& line : split(t, '\n'))
    if (line.find("\"ckpt_commit\"") != std::string::npos) commit = nlohmann::json::parse(line);
  ASSERT_TRUE(commit.contains("phases_s")) << t;
  const auto& ph = commit["phases_s"];
  std::vector<std::string> want = {"mkdir", "h5_create", "h5_datasets", "data",   "h5_close",
                                   "fsync", "crc",       "vote",        "gather", "decision"};
  if (rank_() == 0)
    for (const char* k : {"index", "rename", "latest", "retention"}) want.push_back(k);
  double sum = 0;
  for (const auto& k : want) {
    ASSERT_TRUE(ph.contains(k) && ph[k].is_number()) << k << " in " << ph.dump();
    EXPECT_GE(ph[k].get<double>(), 0.0) << k;
    sum += ph[k].get<double>();
  }
  EXPECT_LE(sum, commit["write_s"].get<double>() + 1e-6) << ph.dump();
}

// The step folder is fsynced once per host (not once per rank), by one of
// its ranks, after every rank's file is written and before rank 0 commits.
TEST(CheckpointMpi, OneFolderFsyncPerHostBeforeTheCommit) {
  std::string dir = world_dir("dirsync");
  DirGuard guard{dir};
  // Times on this host's monotonic clock (the ranks share one host here).
  double t_written = 0, t_synced = 0, t_index = 0;
  int synced = 0;
  auto o = opts(dir, CkptMode::kSync);
  o.test_hook = [&](const std::string& ph, long) {
    if (ph == "written") t_written = wall_time();
    if (ph == "folder_synced") {
      ++synced;
      t_synced = wall_time();
    }
    if (ph == "index_written") t_index = wall_time();
  };
  MpiCommunicator world(MPI_COMM_WORLD, "world", 600);
  const int leader = world.split_host("host")->rank() == 0 ? 1 : 0;
  {
    Checkpointer c(world, o, nullptr);
    auto v = layout(world_(), rank_(), true);
    fill(v, 4);
    EXPECT_TRUE(c.save(4, state_of(v, 4, rank_())).committed);
  }
  double sums[2] = {double(synced), double(leader)};
  world.all_reduce_sum(sums, 2);
  // The last file written, the first and the last folder fsync, the index.
  double m[4] = {t_written, synced ? -t_synced : -1e300, synced ? t_synced : 0, t_index};
  world.all_reduce_max(m, 4);
  EXPECT_EQ(sums[0], sums[1]) << "one step-folder fsync per host";
  EXPECT_EQ(synced, leader) << "rank " << rank_() << ": the host's lowest rank fsyncs";
  EXPECT_LE(m[0], -m[1]) << "a folder fsync before every rank's file was written";
  EXPECT_LE(m[2], m[3]) << "rank 0 wrote the index before a host's folder fsync";
  EXPECT_TRUE(fs::exists(dir + "/step_00000004/index.json"));
}

TEST(CheckpointMpi, RetentionKeepsLastN) {
  std::string dir = world_dir("retain");
  DirGuard guard{dir};
  if (rank_() == 0) fs::create_directories(dir + "/step_00000099.tmp");  // a crashed run's leftover
  MPI_Barrier(MPI_COMM_WORLD);
  auto o = opts(dir, CkptMode::kAsync);
  o.keep_last_n = 2;
  {
    MpiCommunicator world(MPI_COMM_WORLD, "world", 600);
    Checkpointer c(world, o, nullptr);
    EXPECT_FALSE(fs::exists(dir + "/step_00000099.tmp"));
    auto v = layout(world_(), rank_(), true);
    for (long s = 1; s <= 5; ++s) {
      fill(v, s);
      c.save(s, state_of(v, s, rank_()));
    }
    c.finalize();
  }
  std::vector<std::string> got;
  for (auto& e : fs::directory_iterator(dir)) got.push_back(e.path().filename().string());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"latest", "step_00000004", "step_00000005"}));
  EXPECT_EQ(latest_of(dir), "step_00000005");
}

// A flipped byte in step 3 and a truncated file in step 2: both are named and
// skipped, step 1 is chosen and loads.
TEST(CheckpointMpi, CorruptionFallsBackToPreviousStep) {
  const int W = world_();
  std::string dir = world_dir("corrupt");
  DirGuard guard{dir};
  save_steps(dir, {1, 2, 3});
  std::string f3 = dir + "/step_00000003/rank_0000" + std::to_string(W - 1) + ".h5";
  std::string f2 = dir + "/step_00000002/rank_00000.h5";
  if (rank_() == 0) {
    hid_t f = H5Fopen(f3.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, kNames[3], H5P_DEFAULT);
    haddr_t off = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    ASSERT_NE(off, HADDR_UNDEF);
    std::fstream io(f3, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(std::streamoff(off + 5));
    char b = 0;
    io.read(&b, 1);
    b ^= 0x10;
    io.seekp(std::streamoff(off + 5));
    io.write(&b, 1);
    io.close();
    fs::resize_file(f2, fs::file_size(f2) / 2);

    std::vector<std::string> rejected;
    auto good = find_latest_good(dir, {}, &rejected);
    ASSERT_TRUE(good.has_value());
    EXPECT_EQ(fs::path(*good).filename(), "step_00000001");
    ASSERT_EQ(rejected.size(), 2u);
    // Both are caught by the whole-file checks, before HDF5 parses them.
    EXPECT_NE(rejected[0].find(f3), std::string::npos) << rejected[0];
    EXPECT_NE(rejected[0].find("file checksum mismatch"), std::string::npos) << rejected[0];
    EXPECT_NE(rejected[1].find(f2), std::string::npos) << rejected[1];
    EXPECT_NE(rejected[1].find("truncated or changed"), std::string::npos) << rejected[1];
    auto v = layout(1, 0, false);
    auto want = views(v);
    load(*good, want);
    EXPECT_EQ(mismatches(v, 1), 0);
    // Loading the corrupt step directly reads the whole dataset and says so.
    auto w = layout(W, W - 1, true);
    auto want3 = views(w);
    try {
      load(dir + "/step_00000003", want3);
      ADD_FAILURE() << "load of a corrupt dataset did not throw";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(f3), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(kNames[3]), std::string::npos) << e.what();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The last rank cannot write more than 4 KiB per file (EFBIG): the vote fails
// everywhere, the tmp folder goes, step 1 stays latest and loads; the next
// save works again (on_error=continue).
TEST(CheckpointMpi, FailedWriteOnOneRankKeepsPreviousCheckpoint) {
  const int W = world_(), r = rank_();
  std::string dir = world_dir("efbig");
  DirGuard guard{dir};
  MpiCommunicator world(MPI_COMM_WORLD, "world", 600);
  Checkpointer c(world, opts(dir, CkptMode::kAsync), nullptr);
  auto v = layout(W, r, true);
  fill(v, 1);
  c.save(1, state_of(v, 1, r));
  c.wait();
  ASSERT_TRUE(c.last_outcome().committed);
  std::vector<float> big(1 << 16, 1.5f);
  auto s2 = state_of(v, 2, r);
  s2.tensors.push_back(
      {"params/big", {int64_t(W) << 16}, {int64_t(r) << 16}, {1 << 16}, big.data()});
  {
    std::unique_ptr<FsizeLimit> lim;
    if (r == W - 1) lim = std::make_unique<FsizeLimit>(4096);
    c.save(2, s2);
    c.wait();  // continue mode: no throw
  }
  SaveOutcome out = c.last_outcome();
  EXPECT_FALSE(out.committed);
  EXPECT_EQ(out.step, 2);
  if (r == W - 1) {
    EXPECT_NE(out.error.find("rank_0000"), std::string::npos) << out.error;
  } else {
    EXPECT_NE(out.error.find("rank " + std::to_string(W - 1)), std::string::npos) << out.error;
  }
  EXPECT_FALSE(fs::exists(dir + "/step_00000002.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/step_00000002"));
  EXPECT_EQ(latest_of(dir), "step_00000001");
  auto w = layout(W, r, false);
  auto want = views(w);
  load(*find_latest_good(dir), want, r);
  EXPECT_EQ(mismatches(w, 1), 0);
  fill(v, 3);
  c.save(3, state_of(v, 3, r));
  c.wait();
  EXPECT_TRUE(c.last_outcome().committed) << c.last_outcome().error;
  MPI_Barrier(MPI_COMM_WORLD);
}

// on_error=abort: after a failed save, the next wait() throws on every rank.
TEST(CheckpointMpi, AbortModeThrowsAfterFailure) {
  const int W = world_(), r = rank_();
  std::string dir = world_dir("abort");
  DirGuard guard{dir};
  auto o = opts(dir, CkptMode::kAsync);
  o.on_error = CkptOnError::kAbort;
  MpiCommunicator world(MPI_COMM_WORLD, "world", 600);
  Checkpointer c(world, o, nullptr);
  std::vector<float> big(1 << 16, 2.5f);
  CkptState s;
  s.tensors.push_back(
      {"params/big", {int64_t(W) << 16}, {int64_t(r) << 16}, {1 << 16}, big.data()});
  {
    std::unique_ptr<FsizeLimit> lim;
    if (r == W - 1) lim = std::make_unique<FsizeLimit>(4096);
    c.save(1, s);
    EXPECT_THROW(c.wait(), st::Error);
  }
  EXPECT_FALSE(fs::exists(dir + "/latest"));
  MPI_Barrier(MPI_COMM_WORLD);
}
