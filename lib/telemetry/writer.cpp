// Implementation of the telemetry writer (see writer.hpp).
#include "telemetry/writer.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/util.hpp"
#include "telemetry/schema.hpp"

namespace st {
namespace {
double epoch_now() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
}  // namespace

void TelemetryWriter::open(const std::string& path, nlohmann::json header) {
  close();
  struct stat sb;
  bool had_content = ::stat(path.c_str(), &sb) == 0 && sb.st_size > 0;
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) throw Error("cannot open telemetry file '" + path + "' for appending");
  if (had_content) {
    // A resumed run appends; a cut last line from a killed run must not glue
    // onto our first record, so start on a fresh line.
    std::FILE* r = std::fopen(path.c_str(), "r");
    if (r) {
      std::fseek(r, -1, SEEK_END);
      int c = std::fgetc(r);
      std::fclose(r);
      if (c != '\n') std::fputc('\n', f_);
    }
    nlohmann::json ev = {{"type", "event"}, {"event", "resume_open"}, {"t", epoch_now()}};
    write_line(ev);
    return;
  }
  header["type"] = "header";
  header["schema"] = kTelemetrySchema;
  write_line(header);
}

TelemetryWriter::~TelemetryWriter() { close(); }

void TelemetryWriter::write_line(const nlohmann::json& j) {
  if (!f_) return;
  // Only documented fields are written (schema.cpp; docs/telemetry.md).
  if (std::string e = telemetry::check_record(j); !e.empty())
    throw Error(e + " (add it to lib/telemetry/schema.cpp, which documents it)");
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  s += '\n';
  std::fwrite(s.data(), 1, s.size(), f_);
  std::fflush(f_);
  if (observer_) observer_(j);
}

void TelemetryWriter::step(nlohmann::json record) {
  std::lock_guard<std::mutex> lk(mu_);
  nlohmann::json j = {{"type", "step"}};
  j.update(record);
  write_line(j);
}

void TelemetryWriter::trace(nlohmann::json record) {
  std::lock_guard<std::mutex> lk(mu_);
  nlohmann::json j = {{"type", "trace"}};
  j.update(record);
  write_line(j);
}

void TelemetryWriter::event(const std::string& name, long step, nlohmann::json extra) {
  std::lock_guard<std::mutex> lk(mu_);
  nlohmann::json j = {{"type", "event"}, {"event", name}, {"step", step}, {"t", epoch_now()}};
  j.update(extra);
  write_line(j);
}

void TelemetryWriter::close() {
  std::lock_guard<std::mutex> lk(mu_);
  if (f_) std::fclose(f_);
  f_ = nullptr;
}
}  // namespace st
