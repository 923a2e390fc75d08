// Implementation of run_lock.hpp: flock on <dir>/run.lock, holder identity
// written into it once held.
#include "runtime/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/util.hpp"

namespace st {
namespace {
std::string read_fd(int fd) {
  std::string s;
  char buf[512];
  ssize_t n;
  off_t off = 0;
  while ((n = ::pread(fd, buf, sizeof buf, off)) > 0 && s.size() < 4096) {
    s.append(buf, size_t(n));
    off += n;
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string host_name() {
  char h[256] = {0};
  ::gethostname(h, sizeof h - 1);
  return h;
}
}  // namespace

RunFolderLock RunFolderLock::acquire(const std::string& dir, const std::string& job) {
  const std::string path = dir + "/" + kRunLockFile;
  RunFolderLock l;
  l.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (l.fd_ < 0)
    throw UsageError("runtime.out: cannot create the run folder lock '" + path +
                     "': " + std::strerror(errno));
  if (::flock(l.fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      std::string holder = read_fd(l.fd_);
      if (holder.empty()) holder = "holder not recorded yet";
      throw UsageError("runtime.out: run folder '" + dir + "' is in use by another job (" + holder +
                       "); two jobs on one folder would mix their telemetry and " +
                       "checkpoints. Wait for that job to end, or set runtime.out to another " +
                       "folder");
    }
    logw("run folder lock '", path, "' not available on this file system (", std::strerror(err),
         "); continuing without it");
    ::close(l.fd_);
    l.fd_ = -1;
    return l;
  }
  const std::string me = "host " + host_name() + ", pid " + std::to_string(::getpid()) +
                         (job.empty() ? "" : ", Slurm job " + job) + ", since " + iso_time_utc() +
                         "\n";
  if (::ftruncate(l.fd_, 0) != 0 || ::pwrite(l.fd_, me.data(), me.size(), 0) < 0)
    logw("run folder lock '", path, "': cannot record the holder: ", std::strerror(errno));
  return l;
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

RunFolderLock::RunFolderLock(RunFolderLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}

RunFolderLock& RunFolderLock::operator=(RunFolderLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

}  // namespace st
