// Ownership of a run folder by one job: rank 0 holds an flock(2) on
// <run folder>/run.lock for the life of the process, so a second job started
// on the same folder is refused at start (naming the folder and the holder)
// instead of interleaving telemetry and checkpoints with the first. The
// kernel drops the lock when the holder exits or dies, so a crashed job never
// blocks the next one; the file's text only says who holds it.
#pragma once
#include <string>

namespace st {

class RunFolderLock {
 public:
  RunFolderLock() = default;
  // Takes the lock or throws UsageError naming the folder and the holder
  // (host, pid, Slurm job, since when). `job` is this job's Slurm id or "".
  // Where the file system has no locks (ENOLCK, ENOSYS) it warns and
  // returns an unheld lock rather than stop the run.
  static RunFolderLock acquire(const std::string& dir, const std::string& job);
  ~RunFolderLock();
  RunFolderLock(RunFolderLock&& o) noexcept;
  RunFolderLock& operator=(RunFolderLock&& o) noexcept;
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

inline constexpr const char* kRunLockFile = "run.lock";

}  // namespace st
