// The checkpoints folder as a whole, before and around saves: committed
// step folders, the start-up checks (writable by this rank; a run that does
// not resume never writes over committed steps) and keeping a step folder
// aside instead of replacing it. Rules: docs/checkpoint-format.md.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/rank_file.hpp"
#include "core/error.hpp"

namespace fs = std::filesystem;

namespace st {

std::vector<std::pair<long, std::string>> committed_steps(const std::string& dir) {
  std::vector<std::pair<long, std::string>> steps;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    long n = parse_step_dir(it->path().filename().string());  // *.tmp, *.replaced-N never parse
    std::error_code ec2;
    if (n >= 0 && it->is_directory(ec2)) steps.push_back({n, it->path().string()});
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

std::string check_checkpoint_dir(const std::string& dir, bool resuming, int rank) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return "checkpoint.dir: cannot create '" + dir + "': " + ec.message() +
           " (set checkpoint.dir or runtime.out to a folder this job can write)";
  // Every rank writes its own file there: try it now, not at the first save.
  const std::string probe =
      (fs::path(dir) / (".write-test-" + std::to_string(rank) + "-" + std::to_string(::getpid())))
          .string();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return "checkpoint.dir: cannot write in '" + dir + "': " + std::strerror(errno) + " (rank " +
           std::to_string(rank) +
           "; every save would fail. Set checkpoint.dir or runtime.out to a folder this job can "
           "write)";
  ::close(fd);
  ::unlink(probe.c_str());
  if (resuming) return "";
  auto steps = committed_steps(dir);
  if (steps.empty()) return "";
  std::string names;
  for (size_t i = 0; i < steps.size() && i < 4; ++i)
    names += (i ? ", " : "") + fs::path(steps[i].second).filename().string();
  if (steps.size() > 4) names += ", ...";
  const std::string why = verify_checkpoint(steps.front().second);
  return "checkpoint.dir '" + dir + "' already holds committed checkpoints (" + names +
         ") that this run does not resume from" +
         (why.empty() ? "" : "; the newest is not loadable: " + why) +
         ". Starting over would write over them, so nothing was started. Repair or move them, "
         "resume from one (checkpoint.resume=auto or a step folder), or set checkpoint.dir "
         "or runtime.out to another folder";
}

namespace ckpt {
std::string keep_aside(const std::string& step_dir) {
  for (int n = 1;; ++n) {
    std::string aside = step_dir + ".replaced-" + std::to_string(n);
    std::error_code ec;
    if (fs::exists(aside, ec)) continue;
    fs::rename(step_dir, aside);  // throws filesystem_error naming both paths
    return aside;
  }
}
}  // namespace ckpt

}  // namespace st
