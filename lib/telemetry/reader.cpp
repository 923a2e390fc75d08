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

enum Field {
  F_STEP,
  F_T_START,
  F_STEP_S,
  F_DATA_S,
  F_FWD_S,
  F_BWD_S,
  F_OPTIM_S,
  F_COMM_S,
  F_COMM_EXP_S,
  F_CKPT_STALL_S,
  F_TOKENS,
  F_GLOBAL_TOKENS,
  F_LOSS,
  F_GRAD_NORM,
  F_LR,
  F_MEM_PEAK,
  F_OTHER
};

Field field_of(std::string_view k) {
  static const std::pair<std::string_view, Field> tab[] = {{"step", F_STEP},
                                                           {"t_start", F_T_START},
                                                           {"step_s", F_STEP_S},
                                                           {"data_s", F_DATA_S},
                                                           {"fwd_s", F_FWD_S},
                                                           {"bwd_s", F_BWD_S},
                                                           {"optim_s", F_OPTIM_S},
                                                           {"comm_s", F_COMM_S},
                                                           {"comm_exposed_s", F_COMM_EXP_S},
                                                           {"ckpt_stall_s", F_CKPT_STALL_S},
                                                           {"tokens", F_TOKENS},
                                                           {"global_tokens", F_GLOBAL_TOKENS},
                                                           {"loss", F_LOSS},
                                                           {"grad_norm", F_GRAD_NORM},
                                                           {"lr", F_LR},
                                                           {"mem_peak_bytes", F_MEM_PEAK}};
  for (auto& [name, f] : tab)
    if (name == k) return f;
  return F_OTHER;
}

// Fills `r` from the members of a step line; returns "" or an error message.
std::string fill_step(const std::vector<flat::Member>& ms, StepRecord& r) {
  bool have_step = false, have_step_s = false, have_tokens = false;
  for (const auto& m : ms) {
    Field f = field_of(m.key);
    if (f == F_OTHER) continue;
    const bool is_int = f == F_STEP || f == F_TOKENS || f == F_GLOBAL_TOKENS || f == F_MEM_PEAK;
    if (m.kind == flat::Kind::Null && !is_int && f != F_STEP_S) {
      double nan = std::numeric_limits<double>::quiet_NaN();
      if (f == F_LOSS)
        r.loss = nan;
      else if (f == F_GRAD_NORM)
        r.grad_norm = nan;
      else if (f == F_LR)
        r.lr = nan;
      else
        return "field '" + std::string(m.key) + "': null where a number is required";
      continue;
    }
    if (m.kind != flat::Kind::Number)
      return "field '" + std::string(m.key) + "': expected a number, got " +
             (m.kind == flat::Kind::String ? "\"" + shown(m.value) + "\"" : shown(m.value));
    if (is_int) {
      long long v;
      if (!flat::to_int64(m.value, v))
        return "field '" + std::string(m.key) + "': expected an integer, got " + shown(m.value);
      if (f == F_STEP)
        r.step = v, have_step = true;
      else if (f == F_TOKENS)
        r.tokens = v, have_tokens = true;
      else if (f == F_GLOBAL_TOKENS)
        r.global_tokens = v;
      else
        r.mem_peak_bytes = v;
      continue;
    }
    double v;
    if (!flat::to_double(m.value, v))
      return "field '" + std::string(m.key) + "': number out of range: " + shown(m.value);
    switch (f) {
      case F_T_START:
        r.t_start = v;
        break;
      case F_STEP_S:
        r.step_s = v, have_step_s = true;
        break;
      case F_DATA_S:
        r.data_s = v;
        break;
      case F_FWD_S:
        r.fwd_s = v;
        break;
      case F_BWD_S:
        r.bwd_s = v;
        break;
      case F_OPTIM_S:
        r.optim_s = v;
        break;
      case F_COMM_S:
        r.comm_s = v;
        break;
      case F_COMM_EXP_S:
        r.comm_exposed_s = v;
        break;
      case F_CKPT_STALL_S:
        r.ckpt_stall_s = v;
        break;
      case F_LOSS:
        r.loss = v;
        break;
      case F_GRAD_NORM:
        r.grad_norm = v;
        break;
      case F_LR:
        r.lr = v;
        break;
      default:
        break;
    }
  }
  if (!have_step) return "missing required field 'step'";
  if (!have_step_s) return "missing required field 'step_s'";
  if (!have_tokens) return "missing required field 'tokens'";
  if (r.step < 0) return "field 'step': negative value " + std::to_string(r.step);
  // Durations and counts are never negative; a negative one is a damaged or
  // hand-made record, and would bend every share and sum computed from it.
  const std::pair<const char*, double> times[] = {{"step_s", r.step_s},
                                                  {"data_s", r.data_s},
                                                  {"fwd_s", r.fwd_s},
                                                  {"bwd_s", r.bwd_s},
                                                  {"optim_s", r.optim_s},
                                                  {"comm_s", r.comm_s},
                                                  {"comm_exposed_s", r.comm_exposed_s},
                                                  {"ckpt_stall_s", r.ckpt_stall_s}};
  for (const auto& [name, v] : times)
    if (!(v >= 0) || std::isinf(v))
      return std::string("field '") + name + "': must be a finite duration >= 0 s, got " +
             std::to_string(v);
  const std::pair<const char*, int64_t> counts[] = {{"tokens", r.tokens},
                                                    {"global_tokens", r.global_tokens},
                                                    {"mem_peak_bytes", r.mem_peak_bytes}};
  for (const auto& [name, v] : counts)
    if (v < 0) return std::string("field '") + name + "': must be >= 0, got " + std::to_string(v);
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

RankTelemetry read_rank_file(const std::string& path) {
  RankTelemetry rt;
  rt.path = path;
  const std::string text = read_all(path);
  if (text.empty()) {
    rt.errors.push_back(path + ": empty file (expected a header line first)");
    return rt;
  }
  // Split into lines; remember whether the last one was terminated.
  std::vector<std::string_view> lines;
  std::string_view all(text);
  size_t b = 0;
  while (b < all.size()) {
    size_t e = all.find('\n', b);
    if (e == std::string_view::npos) e = all.size();
    lines.push_back(all.substr(b, e - b));
    b = e + 1;
  }
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
      try {
        EventRecord ev;
        ev.line = ln;
        ev.fields = nlohmann::json::parse(line);
        auto it = ev.fields.find("event");
        if (it == ev.fields.end() || !it->is_string()) {
          rt.errors.push_back(loc(path, ln) + ": event record without a string field 'event'");
          continue;
        }
        ev.event = it->get<std::string>();
        if (auto s = ev.fields.find("step"); s != ev.fields.end() && !s->is_null()) {
          if (!s->is_number_integer()) {
            rt.errors.push_back(loc(path, ln) + ": field 'step': expected an integer, got " +
                                s->dump());
            continue;
          }
          ev.step = s->get<int64_t>();
        }
        if (auto t = ev.fields.find("t"); t != ev.fields.end() && t->is_number())
          ev.t = t->get<double>();
        rt.events.push_back(std::move(ev));
      } catch (const std::exception& ex) {
        rt.errors.push_back(loc(path, ln) + ": " + ex.what());
      }
    } else if (type == "header") {
      rt.errors.push_back(loc(path, ln) + ": a second header record (only line 1 may be one)");
    } else {
      rt.errors.push_back(loc(path, ln) + ": field 'type': unknown record type \"" + type +
                          "\" (expected step or event)");
    }
  }
  if (replay_from >= 0)
    rt.warnings.push_back(path + ": steps " + std::to_string(replay_from) + ".." +
                          std::to_string(replay_to) +
                          " recorded twice (resume replay); the later records are used");
  return rt;
}

RunTelemetry read_run(const std::string& dir, int threads) {
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
      if (f.rfind("rank_", 0) == 0 && f.size() > 6 && f.substr(f.size() - 6) == ".jsonl") ++present;
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
  for (int r = 0; r < n; ++r) {
    char name[64];
    std::snprintf(name, sizeof name, "/telemetry/rank_%05d.jsonl", r);
    paths[r] = dir + name;
  }
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
        run.ranks[r] = read_rank_file(paths[r]);
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
