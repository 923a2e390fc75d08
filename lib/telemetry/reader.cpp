// Telemetry reader implementation (see reader.hpp): rank files, run.json, run
// folders. Step lines use the flat scanner; everything rare uses nlohmann_json.
#include "telemetry/reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include "core/error.hpp"
#include "telemetry/flatjson.hpp"
#include "telemetry/paths.hpp"
#include "telemetry/schema.hpp"

namespace st::telemetry {
namespace {

std::string read_all(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw UsageError("cannot open '" + path + "'");
  std::string s;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

bool file_exists(const std::string& p) {
  struct stat sb;
  return ::stat(p.c_str(), &sb) == 0;
}

std::string loc(const std::string& path, int line) { return path + ":" + std::to_string(line); }

std::string shown(std::string_view v) {
  std::string s(v.substr(0, 40));
  return v.size() > 40 ? s + "..." : s;
}

// The step record's numeric fields the reader keeps, by StepRecord member.
// Their JSON types (integer, number, number or null) come from the schema
// (schema.cpp step_fields), checked when the table is first built, so the
// reader cannot drift from what the writer enforces.
struct Slot {
  std::string_view key;
  Ftype type = Ftype::Float;
  double StepRecord::*d = nullptr;
  int64_t StepRecord::*i = nullptr;
};

const std::vector<Slot>& step_slots() {
  static const std::vector<Slot> slots = [] {
    const std::pair<const char*, double StepRecord::*> doubles[] = {
        {"t_start", &StepRecord::t_start},
        {"step_s", &StepRecord::step_s},
        {"data_s", &StepRecord::data_s},
        {"fwd_s", &StepRecord::fwd_s},
        {"bwd_s", &StepRecord::bwd_s},
        {"optim_s", &StepRecord::optim_s},
        {"comm_s", &StepRecord::comm_s},
        {"comm_exposed_s", &StepRecord::comm_exposed_s},
        {"ckpt_stall_s", &StepRecord::ckpt_stall_s},
        {"cpu_s", &StepRecord::cpu_s},
        {"loss", &StepRecord::loss},
        {"grad_norm", &StepRecord::grad_norm},
        {"lr", &StepRecord::lr}};
    const std::pair<const char*, int64_t StepRecord::*> ints[] = {
        {"step", &StepRecord::step},
        {"tokens", &StepRecord::tokens},
        {"global_tokens", &StepRecord::global_tokens},
        {"mem_peak_bytes", &StepRecord::mem_peak_bytes}};
    auto schema_type = [](const char* key) {
      for (const auto& f : step_fields())
        if (f.name == key) return f.type;
      throw Error(std::string("telemetry reader: step field '") + key +
                  "' is not in the schema (lib/telemetry/schema.cpp)");
    };
    std::vector<Slot> out;
    for (const auto& [k, m] : doubles) {
      const Ftype t = schema_type(k);
      if (t != Ftype::Float && t != Ftype::FloatOrNull)
        throw Error(std::string("telemetry reader: step field '") + k + "' is not a float");
      out.push_back({k, t, m, nullptr});
    }
    for (const auto& [k, m] : ints) {
      if (schema_type(k) != Ftype::Int)
        throw Error(std::string("telemetry reader: step field '") + k + "' is not an int");
      out.push_back({k, Ftype::Int, nullptr, m});
    }
    return out;
  }();
  return slots;
}

const Slot* slot_of(std::string_view k) {
  for (const auto& s : step_slots())
    if (s.key == k) return &s;
  return nullptr;
}

// Fills `r` from the members of a step line; returns "" or an error message.
std::string fill_step(const std::vector<flat::Member>& ms, StepRecord& r) {
  bool have_step = false, have_step_s = false, have_tokens = false;
  for (const auto& m : ms) {
    if (m.key == "comm_wait_s" && m.kind == flat::Kind::Object) {
      std::vector<flat::Member> parts;
      const std::string err = flat::parse_object(m.value, parts);
      if (!err.empty()) return "field 'comm_wait_s': " + err;
      for (const auto& p : parts) {
        const auto& names = comm_part_names();
        const auto at = std::find(names.begin(), names.end(), p.key);
        double v = 0;
        if (at == names.end()) continue;
        if (p.kind != flat::Kind::Number || !flat::to_double(p.value, v) || !(v >= 0) ||
            std::isinf(v))
          return "field 'comm_wait_s." + std::string(p.key) +
                 "': must be a finite duration >= 0 s, got " + shown(p.value);
        r.comm_wait[size_t(at - names.begin())] = v;
      }
      r.has_comm_wait = true;
      continue;
    }
    const Slot* s = slot_of(m.key);
    if (!s) continue;
    if (m.kind == flat::Kind::Null) {
      if (s->type != Ftype::FloatOrNull)
        return "field '" + std::string(m.key) + "': null where a number is required";
      r.*(s->d) = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    if (m.kind != flat::Kind::Number)
      return "field '" + std::string(m.key) + "': expected a number, got " +
             (m.kind == flat::Kind::String ? "\"" + shown(m.value) + "\"" : shown(m.value));
    if (s->i) {
      long long v;
      if (!flat::to_int64(m.value, v))
        return "field '" + std::string(m.key) + "': expected an integer, got " + shown(m.value);
      r.*(s->i) = v;
      have_step |= s->key == "step";
      have_tokens |= s->key == "tokens";
      continue;
    }
    double v;
    if (!flat::to_double(m.value, v))
      return "field '" + std::string(m.key) + "': number out of range: " + shown(m.value);
    r.*(s->d) = v;
    have_step_s |= s->key == "step_s";
  }
  if (!have_step) return "missing required field 'step'";
  if (!have_step_s) return "missing required field 'step_s'";
  if (!have_tokens) return "missing required field 'tokens'";
  if (r.step < 0) return "field 'step': negative value " + std::to_string(r.step);
  // Durations (the schema's plain floats: times and the start time) and
  // counts are never negative; a negative one is a damaged or hand-made
  // record, and would bend every share and sum computed from it.
  for (const auto& s : step_slots()) {
    if (s.type == Ftype::Float && s.key != "t_start") {
      const double v = r.*(s.d);
      if (!(v >= 0) || std::isinf(v))
        return "field '" + std::string(s.key) + "': must be a finite duration >= 0 s, got " +
               std::to_string(v);
    } else if (s.type == Ftype::Int && r.*(s.i) < 0) {
      return "field '" + std::string(s.key) + "': must be >= 0, got " + std::to_string(r.*(s.i));
    }
  }
  return "";
}

std::string type_of(const std::vector<flat::Member>& ms) {
  for (const auto& m : ms)
    if (m.key == "type")
      return m.kind == flat::Kind::String ? std::string(m.value) : "<non-string>";
  return "";
}

template <typename T>
bool get_to(const nlohmann::json& j, const char* key, T& out, bool required,
            const std::string& where, std::vector<std::string>& errors) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) errors.push_back(where + ": missing required field '" + key + "'");
    return false;
  }
  try {
    if constexpr (std::is_integral_v<T>) {
      if (!it->is_number_integer() || !detail::fits<T>(*it)) throw std::runtime_error("");
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!it->is_number()) throw std::runtime_error("");
    } else {
      if (!it->is_string()) throw std::runtime_error("");
    }
    out = it->get<T>();
    return true;
  } catch (...) {
    errors.push_back(where + ": field '" + key + "': wrong type, got " + it->dump());
    return false;
  }
}

void parse_header(const nlohmann::json& j, RankTelemetry& rt) {
  const std::string w = loc(rt.path, 1);
  auto& h = rt.header;
  if (!j.is_object() || j.value("type", "") != "header") {
    rt.errors.push_back(w + ": first line is not a header record (\"type\":\"header\")");
    return;
  }
  if (!get_to(j, "schema", h.schema, true, w, rt.errors)) return;
  int major = schema_major(h.schema, "scaletrain.telemetry/");
  if (major != kSchemaMajor) {
    rt.errors.push_back(w + ": field 'schema': \"" + h.schema +
                        "\" is not supported; this reader reads scaletrain.telemetry/" +
                        std::to_string(kSchemaMajor));
    return;
  }
  get_to(j, "run_id", h.run_id, false, w, rt.errors);
  get_to(j, "rank", h.rank, true, w, rt.errors);
  get_to(j, "world_size", h.world_size, true, w, rt.errors);
  get_to(j, "host", h.host, true, w, rt.errors);
  get_to(j, "run_name", h.run_name, false, w, rt.errors);
  get_to(j, "local_rank", h.local_rank, false, w, rt.errors);
  get_to(j, "local_size", h.local_size, false, w, rt.errors);
  get_to(j, "device", h.device, false, w, rt.errors);
  get_to(j, "slurm_job_id", h.slurm_job_id, false, w, rt.errors);
  get_to(j, "start_time", h.start_time, false, w, rt.errors);
  for (const char* k : {"mesh", "coords"}) {
    auto it = j.find(k);
    if (it == j.end()) continue;
    if (!it->is_object()) {
      rt.errors.push_back(w + ": field '" + k + "': expected an object, got " + it->dump());
      continue;
    }
    const bool mesh = std::string(k) == "mesh";
    for (auto& [dim, v] : it->items()) {
      // The mesh also describes itself (order, sp, zero_stage, ...): only the
      // group sizes must be integers.
      const bool size_key = dim == "dp" || dim == "tp" || dim == "pp" || dim == "cp";
      if (mesh && !size_key) continue;
      if (!v.is_number_integer() || !detail::fits<int>(v))
        rt.errors.push_back(w + ": field '" + k + "." + dim + "': expected an integer, got " +
                            v.dump());
      else
        (mesh ? h.mesh : h.coords)[dim] = v.get<int>();
    }
  }
}

}  // namespace

StepMeasured StepRecord::measured() const {
  StepMeasured m;
  m.step = step_s;
  m.data = data_s;
  m.fwd = fwd_s;
  m.bwd = bwd_s;
  m.optim = optim_s;
  m.comm_exposed = comm_exposed_s;
  m.ckpt_stall = ckpt_stall_s;
  m.inline_waits = comm_wait[ix(CommPart::Tp)] + comm_wait[ix(CommPart::Cp)];
  return m;
}

int schema_major(const std::string& schema, const std::string& prefix) {
  if (schema.rfind(prefix, 0) != 0) return -1;
  std::string rest = schema.substr(prefix.size());
  size_t dot = rest.find('.');
  std::string maj = rest.substr(0, dot);
  if (maj.empty() || maj.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(maj);
}

std::vector<int> RunTelemetry::flagged_ranks() const {
  std::vector<int> out;
  for (size_t r = 0; r < ranks.size(); ++r)
    if (!ranks[r].ok()) out.push_back(int(r));
  return out;
}

double RankClock::offset(double t) const {
  if (!have_end || t_end <= t_start) return off_start;
  const double f = std::clamp((t - t_start) / (t_end - t_start), 0.0, 1.0);
  return off_start + f * (off_end - off_start);
}

namespace {
// The lines of a file's text (the last one possibly unterminated).
std::vector<std::string_view> split_lines(std::string_view all) {
  std::vector<std::string_view> lines;
  size_t b = 0;
  while (b < all.size()) {
    size_t e = all.find('\n', b);
    if (e == std::string_view::npos) e = all.size();
    lines.push_back(all.substr(b, e - b));
    b = e + 1;
  }
  return lines;
}

// An event record: its name, step and time, or an error naming the line.
void read_event(std::string_view line, int ln, const std::string& path, RankTelemetry& rt) {
  try {
    EventRecord ev;
    ev.line = ln;
    ev.fields = nlohmann::json::parse(line);
    auto it = ev.fields.find("event");
    if (it == ev.fields.end() || !it->is_string()) {
      rt.errors.push_back(loc(path, ln) + ": event record without a string field 'event'");
      return;
    }
    ev.event = it->get<std::string>();
    if (auto s = ev.fields.find("step"); s != ev.fields.end() && !s->is_null()) {
      if (!s->is_number_integer()) {
        rt.errors.push_back(loc(path, ln) + ": field 'step': expected an integer, got " +
                            s->dump());
        return;
      }
      ev.step = s->get<int64_t>();
    }
    if (auto t = ev.fields.find("t"); t != ev.fields.end() && t->is_number())
      ev.t = t->get<double>();
    rt.events.push_back(std::move(ev));
  } catch (const std::exception& ex) {
    rt.errors.push_back(loc(path, ln) + ": " + ex.what());
  }
}

// A trace record, kept as text with its step.
TraceRecord read_trace(const std::vector<flat::Member>& ms, std::string_view line, int ln) {
  TraceRecord tr;
  tr.line = ln;
  for (const auto& m : ms)
    if (m.key == "step" && m.kind == flat::Kind::Number) {
      long long v = 0;
      if (flat::to_int64(m.value, v)) tr.step = v;
    }
  tr.text = std::string(line);
  return tr;
}

// The clock events' offsets against rank 0 (start, and end when written).
void read_clock(RankTelemetry& rt) {
  for (const auto& e : rt.events) {
    if (e.event != "clock") continue;
    const std::string when = e.fields.value("when", "");
    const double off = e.fields.value("offset_s", 0.0), err = e.fields.value("error_s", 0.0);
    RankClock& c = rt.clock;
    if (when == "start") {
      c.t_start = e.t, c.off_start = off, c.have_start = true, c.have_end = false;
      c.error_s = err;
    } else if (when == "end") {
      c.t_end = e.t, c.off_end = off, c.have_end = true;
      c.error_s = std::max(c.error_s, err);
    }
  }
}
}  // namespace

RankTelemetry read_rank_file(const std::string& path, bool keep_traces) {
  RankTelemetry rt;
  rt.path = path;
  const std::string text = read_all(path);
  if (text.empty()) {
    rt.errors.push_back(path + ": empty file (expected a header line first)");
    return rt;
  }
  const std::vector<std::string_view> lines = split_lines(text);
  const bool last_terminated = text.back() == '\n';
  rt.steps.reserve(lines.size());
  std::vector<flat::Member> ms;
  int64_t replay_from = -1, replay_to = -1;
  for (size_t i = 0; i < lines.size(); ++i) {
    const int ln = int(i) + 1;
    std::string_view line = lines[i];
    std::string err = flat::parse_object(line, ms);
    if (!err.empty()) {
      const bool last = i + 1 == lines.size();
      const bool before_resume = !last && lines[i + 1].find("\"resume_open\"") != std::string::npos;
      if ((last && !last_terminated) || before_resume) {
        rt.warnings.push_back(loc(path, ln) + ": cut line tolerated (" +
                              (last ? "last line of a killed run" : "cut before a resume") +
                              "): " + err);
        continue;
      }
      rt.errors.push_back(loc(path, ln) + ": malformed record: " + err);
      continue;
    }
    const std::string type = type_of(ms);
    if (i == 0) {
      try {
        parse_header(nlohmann::json::parse(line), rt);
      } catch (const std::exception& ex) {
        rt.errors.push_back(loc(path, ln) + ": " + ex.what());
      }
      if (!rt.errors.empty()) return rt;  // without a valid header nothing else is trusted
      continue;
    }
    if (type == "step") {
      StepRecord r;
      r.line = ln;
      std::string e = fill_step(ms, r);
      if (!e.empty()) {
        rt.errors.push_back(loc(path, ln) + ": " + e);
        continue;
      }
      if (!rt.steps.empty() && r.step <= rt.steps.back().step) {
        // A resumed run replays steps after its checkpoint: the later records win.
        if (replay_from < 0 || r.step < replay_from) replay_from = r.step;
        replay_to = std::max(replay_to, rt.steps.back().step);
        while (!rt.steps.empty() && rt.steps.back().step >= r.step) rt.steps.pop_back();
      }
      rt.steps.push_back(r);
    } else if (type == "event") {
      read_event(line, ln, path, rt);
    } else if (type == "trace") {
      if (!keep_traces) continue;
      rt.traces.push_back(read_trace(ms, line, ln));
    } else if (type == "header") {
      rt.errors.push_back(loc(path, ln) + ": a second header record (only line 1 may be one)");
    } else {
      rt.errors.push_back(loc(path, ln) + ": field 'type': unknown record type \"" + type +
                          "\" (expected step, trace or event)");
    }
  }
  read_clock(rt);
  if (replay_from >= 0)
    rt.warnings.push_back(path + ": steps " + std::to_string(replay_from) + ".." +
                          std::to_string(replay_to) +
                          " recorded twice (resume replay); the later records are used");
  return rt;
}

RunTelemetry read_run(const std::string& dir, int threads, bool keep_traces) {
  RunTelemetry run;
  run.dir = dir;
  const std::string rj = dir + "/run.json";
  if (!file_exists(rj)) {
    run.errors.push_back(rj + ": missing (every run folder has a run.json)");
    return run;
  }
  run.info = read_run_json(rj, run.errors);
  if (!run.errors.empty()) return run;
  const int n = run.info.world_size;
  // A world size far beyond the rank files present is a damaged run.json,
  // not thousands of missing ranks: say so once.
  {
    int present = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir + "/telemetry", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      const std::string f = it->path().filename().string();
      if (is_rank_file_name(f, ".jsonl")) ++present;
    }
    if (n > std::max(2 * present, present + 64)) {
      run.errors.push_back(rj + ": field 'world_size': " + std::to_string(n) + " ranks, but " +
                           dir + "/telemetry holds " + std::to_string(present) +
                           " rank file(s); this run.json does not describe these files");
      return run;
    }
  }
  run.ranks.resize(n);
  std::vector<std::string> paths(n);
  for (int r = 0; r < n; ++r) paths[r] = rank_telemetry_path(dir, r);
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min(threads, std::max(1, n));
  std::atomic<int> next{0};
  auto work = [&]() {
    for (int r; (r = next.fetch_add(1)) < n;) {
      if (!file_exists(paths[r])) {
        run.ranks[r].path = paths[r];
        run.ranks[r].errors.push_back(paths[r] + ": missing rank file (run.json world_size " +
                                      std::to_string(n) + ")");
        continue;
      }
      try {
        run.ranks[r] = read_rank_file(paths[r], keep_traces);
      } catch (const std::exception& ex) {
        run.ranks[r].path = paths[r];
        run.ranks[r].errors.push_back(ex.what());
      }
      auto& rt = run.ranks[r];
      if (rt.ok() && rt.header.rank != r)
        rt.errors.push_back(loc(paths[r], 1) + ": field 'rank': header says " +
                            std::to_string(rt.header.rank) + " in the file of rank " +
                            std::to_string(r));
      // A rank file of another run (copied, or a folder reused by hand).
      if (rt.ok() && !rt.header.run_id.empty() && !run.info.run_id.empty() &&
          rt.header.run_id != run.info.run_id)
        rt.errors.push_back(loc(paths[r], 1) + ": field 'run_id': \"" + rt.header.run_id +
                            "\" but run.json has \"" + run.info.run_id +
                            "\": a rank file of another run");
      else if (rt.ok() && !rt.header.run_name.empty() && !run.info.name.empty() &&
               rt.header.run_name != run.info.name)
        rt.errors.push_back(loc(paths[r], 1) + ": field 'run_name': \"" + rt.header.run_name +
                            "\" but run.json's name is \"" + run.info.name +
                            "\": a rank file of another run");
      if (rt.ok() && rt.steps.empty()) rt.errors.push_back(paths[r] + ": no step records");
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  for (auto& rt : run.ranks) {
    run.errors.insert(run.errors.end(), rt.errors.begin(), rt.errors.end());
    run.warnings.insert(run.warnings.end(), rt.warnings.begin(), rt.warnings.end());
  }
  return run;
}

}  // namespace st::telemetry
