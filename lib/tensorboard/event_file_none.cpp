// event_file.hpp for a build without protobuf (SCALETRAIN_TENSORBOARD off or
// not found): no event files; opening one says so.
#include "core/error.hpp"
#include "tensorboard/event_file.hpp"

namespace st::tensorboard {

bool available() { return false; }

EventFile::EventFile(const std::string& dir) {
  throw UsageError("TensorBoard folder '" + dir +
                   "': this build has no TensorBoard support (built without protobuf: "
                   "SCALETRAIN_TENSORBOARD; Debian: libprotobuf-dev protobuf-compiler)");
}
EventFile::~EventFile() = default;
void EventFile::write(const Scalars&) {}
void EventFile::write_record(const std::string&) {}

}  // namespace st::tensorboard
