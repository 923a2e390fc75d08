// Implementation of event_file.hpp with protobuf (event.proto's messages).
#include "tensorboard/event_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/span_log.hpp"
#include "event.pb.h"

namespace st::tensorboard {

using scaletrain::tensorboard::Event;
using scaletrain::tensorboard::Summary;

bool available() { return true; }

EventFile::EventFile(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw UsageError("TensorBoard folder '" + dir +
                     "': cannot create it: " + (ec ? ec.message() : std::string("not a folder")));
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  char name[400];
  std::snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d",
                static_cast<long long>(spans::epoch_now()), host, int(::getpid()));
  path_ = (fs::path(dir) / name).string();
  // A second file of this process in the same second (two exports into one folder).
  for (int k = 1; fs::exists(path_); ++k)
    path_ = (fs::path(dir) / (std::string(name) + "." + std::to_string(k))).string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw UsageError("TensorBoard folder '" + dir + "': cannot create '" + path_ +
                     "': " + std::strerror(errno));
  Event ev;
  ev.set_wall_time(spans::epoch_now());
  ev.set_file_version("brain.Event:2");
  try {
    write_record(ev.SerializeAsString());
  } catch (const Error& e) {  // a full disk at the start is bad input: name the folder
    throw UsageError("TensorBoard folder '" + dir + "': " + e.what());
  }
}

EventFile::~EventFile() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFile::write(const Scalars& s) {
  Event ev;
  ev.set_wall_time(s.wall_time);
  ev.set_step(s.step);
  Summary* sum = ev.mutable_summary();
  for (const Scalar& x : s.values) {
    Summary::Value* v = sum->add_value();
    v->set_tag(x.tag);
    v->set_simple_value(static_cast<float>(x.value));
  }
  write_record(ev.SerializeAsString());
}

void EventFile::write_record(const std::string& data) {
  const std::string rec = frame_record(data);
  for (size_t done = 0; done < rec.size();) {
    const ssize_t n = ::write(fd_, rec.data() + done, rec.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error("cannot write TensorBoard event file '" + path_ +
                  "': " + std::strerror(n < 0 ? errno : EIO));
    done += size_t(n);
  }
}

}  // namespace st::tensorboard
