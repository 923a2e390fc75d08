// Per-rank telemetry writer: JSON Lines, append-only, flushed per record, so
// a killed run leaves a readable file (schema: docs/telemetry.md). Every
// record is checked against the schema (schema.hpp): a field that is not
// documented there throws st::Error instead of being written.
#pragma once
#include <cstdio>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace st {

inline constexpr const char* kTelemetrySchema = "scaletrain.telemetry/1";

class TelemetryWriter {
 public:
  TelemetryWriter() = default;
  // Opens (appends to) path; writes `header` (type and schema are filled in)
  // unless the file already holds records (a resumed run appends).
  void open(const std::string& path, nlohmann::json header);
  ~TelemetryWriter();
  TelemetryWriter(const TelemetryWriter&) = delete;
  TelemetryWriter& operator=(const TelemetryWriter&) = delete;

  bool is_open() const { return f_ != nullptr; }
  void step(nlohmann::json record);   // type "step" is filled in
  void trace(nlohmann::json record);  // type "trace" is filled in (runtime.trace)
  // Thread-safe: the checkpoint writer thread records events too.
  void event(const std::string& name, long step, nlohmann::json extra = nlohmann::json::object());
  void close();
  // Called with every record after it is written, under the writer's lock
  // (rank 0's live TensorBoard output: lib/tensorboard). Set it once, before
  // the first step; it must not throw.
  void set_observer(std::function<void(const nlohmann::json&)> f) { observer_ = std::move(f); }

 private:
  void write_line(const nlohmann::json& j);
  std::FILE* f_ = nullptr;
  std::mutex mu_;
  std::function<void(const nlohmann::json&)> observer_;
};
}  // namespace st
