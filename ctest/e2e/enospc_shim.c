/* A full disk, on demand, for the bad-input table: preloaded into a process
 * (LD_PRELOAD), this makes every write to a file whose path contains
 * $SCALETRAIN_ENOSPC_PATH fail with ENOSPC ("No space left on device"), as
 * a disk that filled up would, while everything else (MPI start-up, logs,
 * telemetry) keeps working. A file-size limit (ulimit -f) cannot do that:
 * MPI's own shared-memory segments hit it first. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int full(int fd) {
  const char* want = getenv("SCALETRAIN_ENOSPC_PATH");
  if (!want || !*want || fd < 0) return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return strstr(path, want) != NULL;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

ssize_t write(int fd, const void* buf, size_t n) {
  if (full(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return REAL(write)(fd, buf, n);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  if (full(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return REAL(pwrite)(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  if (full(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return REAL(pwrite64)(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  if (full(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return REAL(writev)(fd, iov, cnt);
}
