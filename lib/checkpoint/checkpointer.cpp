// Checkpointer: snapshot on the training thread, write on a background thread,
// then an all-ranks vote on a private communicator and rank 0's atomic commit
// (index.json, rename step_N.tmp -> step_N, `latest`, retention).
#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/index.hpp"
#include "checkpoint/rank_file.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/util.hpp"
#include "telemetry/writer.hpp"
#include "tensor/device.hpp"
#include "tensor/dtype.hpp"

namespace fs = std::filesystem;

namespace st {

// A snapshot buffer: page-locked memory from the device when the state lives
// on one (fast, asynchronous copies), plain host memory otherwise.
struct Checkpointer::HostBuf {
  HostBuf(size_t n_, Device* d) : n(n_), dev(d) {
    const size_t bytes = std::max<size_t>(n, 1) * sizeof(float);
    // Page-aligned on the host too, so the writer may hand it to O_DIRECT.
    void* h = nullptr;
    if (dev)
      h = dev->allocate_pinned(bytes);
    else if (posix_memalign(&h, 4096, bytes) != 0)
      h = nullptr;
    p = static_cast<float*>(h);
    if (!p) throw std::bad_alloc();
  }
  ~HostBuf() {
    if (dev)
      dev->free_pinned(p);
    else
      std::free(p);
  }
  HostBuf(const HostBuf&) = delete;
  HostBuf& operator=(const HostBuf&) = delete;
  size_t n;
  Device* dev;
  float* p = nullptr;
};

struct Checkpointer::Job {
  long step = 0;
  bool sync = false;
  std::string tmp_dir, final_dir;
  std::vector<ckpt::ShardOut> shards;
  std::string scalars;
  std::vector<uint8_t> rng;
  double t_begin = 0;  // when save() was entered
  double wait_prev_s = 0, snapshot_s = 0;
  double t_write0 = 0;
  double file_s = 0;  // the rank file: mkdir to fsync (the part the disk's speed bounds)
  // Rank 0: the slowest host's write bandwidth (its ranks' bytes over its
  // slowest rank's file_s) and that as a share of its probed bandwidth.
  double node_Bps = 0, of_disk = 0;
  int64_t bytes = 0;
  int64_t file_bytes = 0;  // the rank file's size and CRC32C, for index.json
  uint32_t file_crc = 0;
  uint32_t meta_crc = 0;  // CRC32C of its HDF5 metadata (index.json's meta_crc32c)
  std::string error;      // this rank's write error
  nlohmann::json entries;
  nlohmann::json extents;  // the rank file's data extents, for index.json
  // Seconds per phase of the write, vote and commit (the ckpt_commit
  // event's phases_s): where a slow save spent its time.
  nlohmann::json phases = nlohmann::json::object();
  double t_lap = 0;
  void lap(const char* phase) {
    const double now = wall_time();
    phases[phase] = phases.value(phase, 0.0) + (now - t_lap);
    t_lap = now;
  }
  bool finished = false;
  std::thread th;
};

namespace {
void validate(const CkptState& s) {
  std::set<std::string> seen;
  for (const auto& t : s.tensors) {
    ST_INTERNAL_CHECK(!t.name.empty() && t.name.front() != '/' && t.name.back() != '/',
                      "checkpoint tensor name '", t.name,
                      "' must be non-empty, without leading or trailing '/'");
    ST_INTERNAL_CHECK(t.name.rfind("_meta", 0) != 0, "checkpoint tensor name '", t.name,
                      "': the prefix _meta is reserved");
    ST_INTERNAL_CHECK(seen.insert(t.name).second, "checkpoint tensor '", t.name,
                      "' appears twice on this rank (one shard per tensor per rank)");
    size_t nd = t.global_shape.size();
    ST_INTERNAL_CHECK(nd >= 1 && t.offset.size() == nd && t.shape.size() == nd,
                      "checkpoint tensor '", t.name,
                      "': global_shape, offset and shape need the same rank >= 1 (got ", nd, ", ",
                      t.offset.size(), ", ", t.shape.size(), ")");
    for (size_t i = 0; i < nd; ++i)
      ST_INTERNAL_CHECK(
          t.offset[i] >= 0 && t.shape[i] >= 0 && t.offset[i] + t.shape[i] <= t.global_shape[i],
          "checkpoint tensor '", t.name, "': dim ", i, " offset ", t.offset[i], " + shape ",
          t.shape[i], " exceeds global ", t.global_shape[i]);
    ST_INTERNAL_CHECK((t.data != nullptr) + (t.bf16 != nullptr) == 1 || ckpt::numel(t.shape) == 0,
                      "checkpoint tensor '", t.name, "': needs one of data and bf16");
  }
}
// n bf16 values at the start of buf widened to fp32 over the whole of it,
// from the back, so no value is overwritten before it is read.
// (Byte copies: the two views of the buffer may not be typed accesses.)
void widen_bf16_in_place(float* buf, size_t n) {
  char* b = reinterpret_cast<char*>(buf);
  for (size_t i = n; i-- > 0;) {
    uint16_t h;
    std::memcpy(&h, b + 2 * i, 2);
    const float f = bf16_to_f32(h);
    std::memcpy(b + 4 * i, &f, 4);
  }
}
}  // namespace

std::string step_dir_name(long step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08ld", step);
  return buf;
}

long parse_step_dir(const std::string& name) {
  if (name.size() < 6 || name.rfind("step_", 0) != 0) return -1;
  long v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > LONG_MAX / 10 - 10) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

Checkpointer::Checkpointer(const MpiCommunicator& world, const CheckpointOptions& o,
                           TelemetryWriter* tel)
    : opt_(o), tel_(tel) {
  ST_USAGE_CHECK(!opt_.dir.empty(), "checkpoint.dir is empty");
  ST_USAGE_CHECK(opt_.timeout_s > 0, "checkpoint timeout_s must be > 0, got ", opt_.timeout_s);
  threaded_vote_ = MpiCommunicator::thread_multiple();
  comm_ = world.dup("checkpoint");
  rank_ = comm_->rank();
  size_ = comm_->size();
  {
    const auto host = comm_->split_host("checkpoint host");
    host_leader_ = host->rank() == 0;
    host_id_ = *std::min_element(host->world_ranks().begin(), host->world_ranks().end());
  }
  if (rank_ == 0) {
    std::error_code ec;
    fs::create_directories(opt_.dir, ec);
    if (ec) logw("checkpoint dir '", opt_.dir, "' cannot be created: ", ec.message());
    for (auto it = fs::directory_iterator(opt_.dir, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      std::string n = it->path().filename().string();
      if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0 &&
          parse_step_dir(n.substr(0, n.size() - 4)) >= 0) {
        std::error_code ec2;
        fs::remove_all(it->path(), ec2);
        log0("checkpoint: removed unfinished ", it->path().string(),
             ec2 ? " (failed: " + ec2.message() + ")" : "");
      }
    }
  }
  if (!threaded_vote_ && rank_ == 0)
    log0(
        "checkpoint: MPI lacks MPI_THREAD_MULTIPLE; the commit vote runs at the next "
        "save()/wait()");
  comm_->barrier();
}

Checkpointer::~Checkpointer() {
  try {
    finalize();
  } catch (const std::exception& e) {
    logw("checkpoint: at shutdown: ", e.what());
  }
  // After a vote timeout an abandoned request still refers to the
  // communicator: it is left to MPI_Finalize, not freed.
  if (broken_) (void)comm_.release();
}

double Checkpointer::prepare(const CkptState& s) {
  ST_INTERNAL_CHECK(!finalized_, "checkpoint prepare after finalize()");
  ST_INTERNAL_CHECK(!job_, "checkpoint prepare with a save in flight");
  validate(s);
  const double t0 = wall_time();
  h5::quiet_errors();  // the library's start (its first call) happens here
  bufs_.resize(s.tensors.size());
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const size_t n = size_t(ckpt::numel(s.tensors[i].shape));
    if (!bufs_[i] || bufs_[i]->n != n || bufs_[i]->dev != s.device)
      bufs_[i] = std::make_unique<HostBuf>(n, s.device);
    std::memset(bufs_[i]->p, 0, n * sizeof(float));  // first touch: the page faults, now
  }
  return wall_time() - t0;
}

SaveStats Checkpointer::save(long step, const CkptState& s) {
  return save_impl(step, s, opt_.mode == CkptMode::kSync);
}

SaveStats Checkpointer::emergency_save(long step, const CkptState& s) {
  return save_impl(step, s, true);
}

void Checkpointer::raise_if_failed() {
  std::string e;
  {
    std::lock_guard<std::mutex> g(mu_);
    e.swap(pending_error_);
  }
  if (!e.empty() && opt_.on_error == CkptOnError::kAbort) throw Error(e);
}

SaveOutcome Checkpointer::last_outcome() const {
  std::lock_guard<std::mutex> g(mu_);
  return last_;
}

void Checkpointer::wait() {
  wait_prev();
  raise_if_failed();
}

void Checkpointer::finalize() {
  if (finalized_) return;
  finalized_ = true;
  wait();
}

void Checkpointer::wait_prev() {
  if (!job_) return;
  if (job_->th.joinable()) job_->th.join();
  if (!job_->finished) finish(*job_);
  job_.reset();
}

// Snapshot: the only part of an async save the loop waits for. Device
// state is copied after the work enqueued on its compute stream (the
// optimizer step), straight into the reused (pinned) host buffers.
void Checkpointer::snapshot(const CkptState& s, Job& j, SaveStats& st) {
  Device* dev = s.device;
  const bool staged = dev && !dev->host_accessible();
  if (dev && !staged) dev->synchronize();  // host-accessible: the data is current after a sync
  bufs_.resize(s.tensors.size());
  j.shards.resize(s.tensors.size());
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const ShardView& v = s.tensors[i];
    size_t n = size_t(ckpt::numel(v.shape));
    if (!bufs_[i] || bufs_[i]->n != n || bufs_[i]->dev != dev)
      bufs_[i] = std::make_unique<HostBuf>(n, dev);
    float* dst = bufs_[i]->p;
    // bf16 shards land in the buffer's first half, widened below.
    const void* src = v.bf16 ? static_cast<const void*>(v.bf16) : v.data;
    const size_t src_bytes = n * (v.bf16 ? sizeof(uint16_t) : sizeof(float));
    if (n && staged)
      dev->copy_to_host(dst, src, src_bytes, dev->compute_stream());
    else if (n)
      std::memcpy(dst, src, src_bytes);
    j.shards[i] = {v.name, v.global_shape, v.offset, v.shape, dst};
    st.bytes += int64_t(n * sizeof(float));
  }
  if (staged) dev->synchronize();
  for (size_t i = 0; i < s.tensors.size(); ++i)
    if (s.tensors[i].bf16) widen_bf16_in_place(bufs_[i]->p, bufs_[i]->n);
  j.scalars = s.scalars.dump();
  j.rng = s.rng;
}

SaveStats Checkpointer::save_impl(long step, const CkptState& s, bool sync) {
  ST_INTERNAL_CHECK(!finalized_, "checkpoint save after finalize()");
  validate(s);
  SaveStats st;
  double t0 = wall_time();
  wait_prev();
  st.wait_prev_s = wall_time() - t0;
  raise_if_failed();

  auto j = std::make_unique<Job>();
  j->step = step;
  j->sync = sync;
  j->t_begin = t0;
  j->wait_prev_s = st.wait_prev_s;
  j->final_dir = (fs::path(opt_.dir) / step_dir_name(step)).string();
  j->tmp_dir = j->final_dir + ".tmp";
  if (tel_) tel_->event("ckpt_begin", step, {{"mode", sync ? "sync" : "async"}});

  double t1 = wall_time();
  snapshot(s, *j, st);
  st.snapshot_s = j->snapshot_s = wall_time() - t1;

  auto write = [this](Job& jb) {
    jb.t_write0 = jb.t_lap = wall_time();
    try {
      std::error_code ec;
      fs::create_directories(jb.tmp_dir, ec);
      if (ec) throw Error("cannot create '" + jb.tmp_dir + "': " + ec.message());
      jb.lap("mkdir");
      std::string path = (fs::path(jb.tmp_dir) / ckpt::rank_file_name(rank_)).string();
      auto hook = [&](const std::string& ph) {
        if (opt_.test_hook) opt_.test_hook(ph, jb.step);
      };
      ckpt::RankFileOut rf =
          ckpt::write_rank_file(path, jb.step, rank_, size_, jb.shards, jb.scalars, jb.rng, hook);
      jb.entries = std::move(rf.entries);
      jb.bytes = rf.bytes;
      jb.file_bytes = rf.file_bytes;
      jb.file_crc = rf.file_crc;
      jb.meta_crc = rf.meta_crc;
      jb.extents = std::move(rf.extents);
      for (const PhaseTime& p : rf.phases) jb.phases[p.name] = p.wall_s;
      jb.t_lap = wall_time();
      jb.file_s = jb.t_lap - jb.t_write0;
      hook("written");
    } catch (const std::exception& e) {
      jb.error = e.what();
    }
  };

  job_ = std::move(j);
  if (sync || broken_) {
    if (!broken_) write(*job_);
    finish(*job_);
    job_.reset();
    st.committed = last_outcome().committed && last_outcome().step == step;
  } else {
    Job* jp = job_.get();
    jp->th = std::thread([this, jp, write] {
      write(*jp);
      if (threaded_vote_) finish(*jp);
    });
  }
  st.stall_s = wall_time() - t0;
  if (sync) raise_if_failed();
  return st;
}

// The vote: every rank says whether it wrote (and fsynced) its file; when all
// did, one rank per host fsyncs the step folder (its entries for that host's
// files: one folder fsync per host, not one per rank), then rank 0 gathers
// the shard lists (so the gather completes after every host's fsync) and
// commits; then it broadcasts the decision.
// Returns the error ("" when committed). A timeout marks the communicator
// broken: no further checkpoints from this run.
std::string Checkpointer::vote(Job& j) {
  if (broken_) return "the checkpoint communicator is unusable after an earlier vote timeout";
  auto timed_out = [&](const char* what) {
    broken_ = true;
    return detail::cat("checkpoint step ", j.step, ": ", what, " did not complete within ",
                       opt_.timeout_s, " s (a rank died, hangs, or is still writing); ",
                       "no further checkpoints from this run");
  };
  int first_bad = j.error.empty() ? INT_MAX : rank_;
  j.t_lap = wall_time();
  if (!comm_->try_all_reduce_min(&first_bad, opt_.timeout_s, "checkpoint commit vote"))
    return timed_out("the commit vote");
  j.lap("vote");
  std::string error;
  int decision = 0;
  if (first_bad == INT_MAX) {
    if (host_leader_) {
      fsync_dir(j.tmp_dir);
      if (opt_.test_hook) opt_.test_hook("folder_synced", j.step);
    }
    j.lap("folder_fsync");
    const nlohmann::json me = {{"rank", rank_},
                               {"file", ckpt::rank_file_name(rank_)},
                               {"bytes", j.bytes},
                               {"file_bytes", j.file_bytes},
                               {"file_crc32c", j.file_crc},
                               {"meta_crc32c", j.meta_crc},
                               {"block_bytes", ckpt::kCrcBlock},
                               {"data_extents", j.extents},
                               {"file_s", j.file_s},
                               {"host", host_id_},
                               {"disk_write_Bps", opt_.disk_write_Bps},
                               {"shards", j.entries}};
    std::vector<std::string> all;
    if (!comm_->try_gather(me.dump(), &all, 0, opt_.timeout_s, "checkpoint shard list gather"))
      return timed_out("gathering the shard lists");
    j.lap("gather");
    if (rank_ == 0) error = commit(j, all, &decision);
  } else {
    error = first_bad == rank_ ? detail::cat("checkpoint step ", j.step, ": ", j.error)
                               : detail::cat("checkpoint step ", j.step, ": rank ", first_bad,
                                             " failed to write its file (see that rank's log)");
  }
  if (rank_ == 0 && !decision) {
    std::error_code ec;
    fs::remove_all(j.tmp_dir, ec);
  }
  j.t_lap = wall_time();
  if (!comm_->try_broadcast(&decision, 0, opt_.timeout_s, "checkpoint commit decision"))
    return timed_out("the commit decision from rank 0");
  j.lap("decision");
  if (decision == 1) return "";
  if (error.empty())
    error = detail::cat("checkpoint step ", j.step, ": commit failed on rank 0 (see its log)");
  return error;
}

// Rank 0: per host, the bytes its ranks wrote over its slowest rank's file
// time, against the host's probed bandwidth; keeps the slowest host's.
void Checkpointer::node_bandwidth(const std::vector<nlohmann::json>& ranks, Job& j) {
  struct Host {
    double bytes = 0, s = 0, disk = 0;
  };
  std::map<int, Host> hosts;
  for (const auto& r : ranks) {
    Host& h = hosts[r.value("host", 0)];
    h.bytes += r.value("bytes", 0.0);
    h.s = std::max(h.s, r.value("file_s", 0.0));
    h.disk = std::max(h.disk, r.value("disk_write_Bps", 0.0));
  }
  j.node_Bps = 0;
  for (const auto& [id, h] : hosts) {
    const double bps = h.s > 0 ? h.bytes / h.s : 0;
    if (j.node_Bps == 0 || bps < j.node_Bps) {
      j.node_Bps = bps;
      j.of_disk = h.disk > 0 ? bps / h.disk : 0;
    }
  }
}

// Rank 0: index.json from every rank's shard list, the atomic rename (the
// commit point: *decision = 1), `latest` and retention. Returns the error
// of a failed commit.
std::string Checkpointer::commit(Job& j, const std::vector<std::string>& lists, int* decision) {
  try {
    std::vector<nlohmann::json> ranks;
    for (const std::string& l : lists) ranks.push_back(nlohmann::json::parse(l));
    node_bandwidth(ranks, j);
    auto idx = ckpt::build_index(ranks, j.step, opt_.layout, nlohmann::json::parse(j.scalars));
    write_file_atomic((fs::path(j.tmp_dir) / "index.json").string(), idx.dump(1));
    j.lap("index");
    if (opt_.test_hook) opt_.test_hook("index_written", j.step);
    std::error_code ec;
    // A step folder this run did not write (another run's, or one the
    // resume skipped as damaged) is never overwritten: it is kept beside
    // the new one under a name the loader ignores.
    if (fs::exists(j.final_dir)) {
      const std::string aside = ckpt::keep_aside(j.final_dir);
      logw("checkpoint step ", j.step, ": ", j.final_dir,
           " already existed and was not written by this run; kept it as ", aside);
    }
    fs::rename(j.tmp_dir, j.final_dir);
    fsync_dir(opt_.dir);
    *decision = 1;  // the rename is the commit point
    j.lap("rename");
    if (opt_.test_hook) opt_.test_hook("renamed", j.step);
    write_file_atomic((fs::path(opt_.dir) / "latest").string(), step_dir_name(j.step) + "\n");
    j.lap("latest");
    // Retention: keep the newest keep_last_n committed steps, and always the
    // one just written.
    if (opt_.keep_last_n > 0) {
      const auto steps = committed_steps(opt_.dir);  // newest first
      for (size_t i = size_t(opt_.keep_last_n); i < steps.size(); ++i) {
        if (steps[i].first == j.step) continue;
        fs::remove_all(steps[i].second, ec);
        if (ec) logw("checkpoint retention: cannot remove ", steps[i].second, ": ", ec.message());
      }
    }
    j.lap("retention");
  } catch (const std::exception& e) {
    if (!*decision) return detail::cat("checkpoint step ", j.step, ": commit failed: ", e.what());
    logw("checkpoint step ", j.step, " committed, but afterwards: ", e.what());
  }
  return "";
}

// Rank 0's line per commit: its own write, and its node's bandwidth beside
// the probed one ("x% of the disk").
void Checkpointer::log_commit(const Job& j, double write_s) const {
  std::string disk;
  if (j.node_Bps > 0) {
    disk = detail::cat("; node ", human_bytes(j.node_Bps), "/s");
    if (j.of_disk > 0)
      disk += detail::cat(" = ", int(100 * j.of_disk + 0.5), "% of the disk's ",
                          human_bytes(opt_.disk_write_Bps), "/s (probed)");
  }
  log0("checkpoint step ", j.step, " committed: ", j.final_dir,
       " (rank 0: ", human_bytes(double(j.bytes)), " in ", write_s, " s, file ", j.file_s, " s",
       disk, ")");
}

// Vote and commit, then telemetry and the outcome. Runs on the writer thread
// (MPI_THREAD_MULTIPLE) or the caller's.
void Checkpointer::finish(Job& j) {
  j.finished = true;
  std::string error;
  try {
    error = vote(j);
  } catch (const std::exception& e) {
    error = detail::cat("checkpoint step ", j.step, ": ", e.what());
  }
  const bool committed = error.empty();

  double now = wall_time();
  double write_s = now - (j.t_write0 > 0 ? j.t_write0 : now);
  double stall = j.sync ? now - j.t_begin : j.wait_prev_s + j.snapshot_s;
  SaveOutcome out{
      j.step,   committed, committed ? "" : error, committed ? j.final_dir : "", write_s, j.bytes,
      j.file_s, j.phases};
  if (committed) {
    if (tel_)
      tel_->event("ckpt_commit", j.step,
                  {{"stall_s", stall},
                   {"snapshot_s", j.snapshot_s},
                   {"wait_prev_s", j.wait_prev_s},
                   {"write_s", write_s},
                   {"bytes", j.bytes},
                   {"bandwidth_Bps", write_s > 0 ? double(j.bytes) / write_s : 0.0},
                   {"phases_s", j.phases},
                   {"file_s", j.file_s},
                   {"disk_write_Bps", opt_.disk_write_Bps},
                   {"node_write_Bps", j.node_Bps},
                   {"of_disk", j.of_disk},
                   {"path", j.final_dir}});
    if (rank_ == 0) log_commit(j, write_s);
  } else {
    if (tel_) tel_->event("ckpt_fail", j.step, {{"error", error}});
    if (!j.error.empty() || rank_ == 0) logw(error);
  }
  std::lock_guard<std::mutex> g(mu_);
  last_ = out;
  if (!committed) pending_error_ = error;
}

}  // namespace st
