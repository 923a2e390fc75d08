// The hang report (trace.hpp): matches the ranks' flight recorder dumps
// (RUN_DIR/flight/rank_NNNNN.json, runtime/flight_recorder.hpp) by group and
// sequence number, names the first collective that not every member
// completed, the members that never entered it, and what those were last
// doing. A rank without a dump (stopped or dead: it could not write) is named
// by its absence.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analyze/trace.hpp"
#include "core/error.hpp"
#include "runtime/flight_recorder.hpp"  // kSchema only (header constant, nothing linked)
#include "telemetry/paths.hpp"

using nlohmann::json;

namespace st::analysis {
namespace {

struct Entry {
  int64_t seq = 0;
  std::string op, state;
  int64_t bytes = 0;
  double t_enqueue = 0;
};

struct Member {  // one rank's view of one group
  int64_t next_seq = 0, oldest = 0;
  std::map<int64_t, Entry> e;
  bool completed(int64_t s) const {
    if (s >= next_seq) return false;
    auto it = e.find(s);
    return it == e.end() ? s < oldest : it->second.state == "done";
  }
};

struct Dump {
  bool present = false;
  std::string reason, phase, host;
  int64_t phase_step = 0;
  double offset = 0;
  json raw;
};

std::string last_doing(const Dump& d) {
  std::string s = "in \"" + d.phase + "\" of step " + std::to_string(d.phase_step);
  // Its latest collective, any group.
  double t = -1;
  std::string c;
  for (const auto& g : d.raw.at("comms"))
    for (const auto& e : g.at("entries"))
      if (e.value("t_enqueue", 0.0) > t) {
        t = e.value("t_enqueue", 0.0);
        c = e.value("op", "") + " #" + std::to_string(e.value("seq", int64_t(0))) + " on '" +
            g.value("name", "") + "' (" + e.value("state", "") + ")";
      }
  return c.empty() ? s : s + "; last collective " + c;
}

// The dump's schema (runtime/flight_recorder.hpp): the version first, then
// every field the report reads, with its type; a bad or old dump is an error
// naming the file and the field.
void check_dump(const json& j, const std::string& p) {
  auto bad = [&](const std::string& what) {
    throw UsageError(p + ": " + what + " (a flight recorder dump of schema '" + flight::kSchema +
                     "', written by scaletrain of this version)");
  };
  if (!j.is_object()) bad("not a JSON object");
  const json* v = j.contains("schema") ? &j["schema"] : nullptr;
  if (!v || !v->is_string()) bad("no 'schema' field: not a flight recorder dump, or an old one");
  if (v->get<std::string>() != flight::kSchema)
    bad("schema '" + v->get<std::string>() + "' is not the one this scaletrain-analyze reads");
  auto need = [&](const json& o, const char* key, bool (json::*is)() const, const char* type,
                  const std::string& where) {
    if (!o.contains(key) || !(o[key].*is)())
      bad("field '" + where + key + "': missing or not " + type);
  };
  need(j, "rank", &json::is_number_integer, "an integer", "");
  need(j, "t", &json::is_number, "a number", "");
  need(j, "comms", &json::is_array, "a list", "");
  for (size_t c = 0; c < j["comms"].size(); ++c) {
    const json& g = j["comms"][c];
    const std::string at = "comms[" + std::to_string(c) + "].";
    if (!g.is_object()) bad("field '" + at.substr(0, at.size() - 1) + "': not an object");
    need(g, "name", &json::is_string, "a string", at);
    need(g, "ranks", &json::is_array, "a list", at);
    need(g, "next_seq", &json::is_number_integer, "an integer", at);
    need(g, "entries", &json::is_array, "a list", at);
    for (size_t i = 0; i < g["entries"].size(); ++i) {
      const json& e = g["entries"][i];
      const std::string ea = at + "entries[" + std::to_string(i) + "].";
      if (!e.is_object()) bad("field '" + ea.substr(0, ea.size() - 1) + "': not an object");
      need(e, "seq", &json::is_number_integer, "an integer", ea);
      need(e, "op", &json::is_string, "a string", ea);
      need(e, "state", &json::is_string, "a string", ea);
      const std::string st = e["state"];
      if (st != "enqueued" && st != "started" && st != "done")
        bad("field '" + ea + "state': '" + st + "' is not enqueued, started or done");
    }
  }
}

}  // namespace

namespace {
// Every rank's flight recorder dump that exists (absent ones stay
// present=false); refuses a folder with none.
std::vector<Dump> read_dumps(const std::string& dir, int n, int& present) {
  std::vector<Dump> d(static_cast<size_t>(n));
  present = 0;
  for (int r = 0; r < n; ++r) {
    const std::string p = dir + "/flight/" + telemetry::rank_file_name(r, ".json");
    std::ifstream f(p);
    if (!f) continue;
    try {
      d[size_t(r)].raw = json::parse(f);
    } catch (const std::exception& e) {
      throw UsageError(p + ": not a flight recorder dump: " + e.what());
    }
    check_dump(d[size_t(r)].raw, p);
    auto& x = d[size_t(r)];
    x.present = true;
    x.reason = x.raw.value("reason", "");
    x.phase = x.raw.value("phase", "");
    x.phase_step = x.raw.value("phase_step", int64_t(0));
    x.host = x.raw.value("host", "");
    x.offset = x.raw.value("clock_offset_s", 0.0);
    ++present;
  }
  if (present == 0)
    throw UsageError(dir +
                     "/flight: no flight recorder dumps (the job ended normally, or ran "
                     "with runtime.flight_recorder=0)");
  return d;
}

using Groups = std::map<std::pair<std::string, std::vector<int>>, std::map<int, Member>>;

// Every group instance (name + members) and each present member's view,
// without what a rank enqueued after t_end (marked in `late`).
Groups group_views(const std::vector<Dump>& d, int n, double t_end, std::vector<bool>& late) {
  Groups groups;
  for (int r = 0; r < n; ++r) {
    if (!d[size_t(r)].present) continue;
    for (const auto& g : d[size_t(r)].raw["comms"]) {
      Member m;
      m.next_seq = g.value("next_seq", int64_t(0));
      m.oldest = m.next_seq;
      for (const auto& e : g.value("entries", json::array())) {
        Entry x{e.value("seq", int64_t(0)), e.value("op", ""), e.value("state", ""),
                e.value("bytes", int64_t(0)), e.value("t_enqueue", 0.0) + d[size_t(r)].offset};
        m.oldest = std::min(m.oldest, x.seq);
        if (x.t_enqueue > t_end) {  // entered after the job began ending
          m.next_seq = std::min(m.next_seq, x.seq);
          late[size_t(r)] = true;
          continue;
        }
        m.e[x.seq] = x;
      }
      for (auto it = m.e.lower_bound(m.next_seq); it != m.e.end();) it = m.e.erase(it);
      groups[{g.value("name", ""), g.value("ranks", std::vector<int>{})}][r] = std::move(m);
    }
  }

  return groups;
}

// The first (earliest enqueued) collective some member has not completed.
struct Stuck {
  std::string group, op;
  std::vector<int> ranks;
  int64_t seq = -1, bytes = 0;
  double t = std::numeric_limits<double>::infinity();
};

Stuck first_stuck(const Groups& groups) {
  Stuck stuck;
  for (const auto& [key, views] : groups) {
    if (key.second.size() < 2) continue;
    // The lowest seq entered by someone and not completed by every member.
    int64_t lo = std::numeric_limits<int64_t>::max();
    for (const auto& [r, m] : views)
      for (const auto& [s, e] : m.e) {
        // Judged by the members that wrote a dump; an absent one is named
        // below, where it is a member of the collective found.
        bool all = true;
        for (const auto& [q, mq] : views) all &= mq.completed(s);
        if (!all) lo = std::min(lo, s);
      }
    if (lo == std::numeric_limits<int64_t>::max()) continue;
    double t = std::numeric_limits<double>::infinity();
    std::string op;
    int64_t bytes = 0;
    for (const auto& [r, m] : views)
      if (auto it = m.e.find(lo); it != m.e.end() && it->second.t_enqueue < t) {
        t = it->second.t_enqueue;
        op = it->second.op;
        bytes = it->second.bytes;
      }
    if (t < stuck.t) stuck = {key.first, op, key.second, lo, bytes, t};
  }

  return stuck;
}

// The report of the collective found stuck: who never entered it, who
// waits in it, each member's host and last doing.
std::string stuck_report(const Stuck& stuck, const Groups& groups, const std::vector<Dump>& d,
                         const std::vector<bool>& late, const telemetry::RunInfo& info,
                         int present) {
  const int n = int(d.size());
  std::ostringstream o;
  // Members that never entered it: no dump (named by absence), or a next
  // sequence number at or below it.
  std::vector<int> never, entered_not_done;
  const auto& views = groups.at({stuck.group, stuck.ranks});
  for (int q : stuck.ranks) {
    auto it = views.find(q);
    if (it == views.end() || it->second.next_seq <= stuck.seq)
      never.push_back(q);
    else if (!it->second.completed(stuck.seq))
      entered_not_done.push_back(q);
  }
  auto list = [](const std::vector<int>& v) {
    std::string s;
    for (int r : v) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return s.empty() ? std::string("none") : s;
  };
  o << "Hang: " << stuck.op << " #" << stuck.seq << " on group '" << stuck.group << "' (ranks "
    << list(stuck.ranks) << ", " << stuck.bytes << " bytes) was not completed by every member; "
    << "never entered by rank(s) " << list(never) << ".\n\n";
  o << "| rank | host | state at the dump | last doing |\n|---|---|---|---|\n";
  for (int q : stuck.ranks) {
    const Dump& x = d[size_t(q)];
    std::string state;
    if (!x.present)
      state = "**no dump**: stopped or dead (it could not write its flight recorder)";
    else if (std::find(never.begin(), never.end(), q) != never.end())
      state = late[size_t(q)] ? "never entered it before the job began ending (it did after: a "
                                "stopped rank continued while the job was taken down)"
                              : "never entered it";
    else if (std::find(entered_not_done.begin(), entered_not_done.end(), q) !=
             entered_not_done.end())
      state = "waiting in it";
    else
      state = "completed it";
    std::string host = x.host;
    if (host.empty())
      for (const auto& h : info.hosts)
        if (std::find(h.ranks.begin(), h.ranks.end(), q) != h.ranks.end()) host = h.name;
    o << "| " << q << " | " << host << " | " << state << " | "
      << (x.present ? last_doing(x) : "unknown (no dump)") << " |\n";
  }
  o << "\nDumps: " << present << " of " << n << " rank(s)";
  for (int r = 0; r < n; ++r)
    if (d[size_t(r)].present && !d[size_t(r)].reason.empty()) {
      std::string why = d[size_t(r)].reason;
      while (!why.empty() && why.back() == '.') why.pop_back();
      o << "; rank " << r << " wrote its dump because: " << why;
      break;
    }
  o << ".\n";
  return o.str();
}

}  // namespace

std::string hang_report(const std::string& dir) {
  std::vector<std::string> errs;
  const auto info = telemetry::read_run_json(dir + "/run.json", errs);
  if (!errs.empty()) throw UsageError(errs.front());
  const int n = info.world_size;
  int present = 0;
  const std::vector<Dump> d = read_dumps(dir, n, present);
  // The job began ending when the first rank wrote its dump (on rank 0's
  // clock). What a rank enqueued after that does not count: a rank stopped
  // with SIGSTOP is continued by the launcher while it takes the job down,
  // and may then enter the collective the others waited in for so long.
  double t_end = std::numeric_limits<double>::infinity();
  for (const auto& x : d)
    if (x.present) t_end = std::min(t_end, x.raw.value("t", 0.0) + x.offset);
  std::vector<bool> late(size_t(n), false);

  const Groups groups = group_views(d, n, t_end, late);
  const Stuck stuck = first_stuck(groups);
  std::ostringstream o;
  if (stuck.seq < 0) {
    o << "No collective was left incomplete in the " << present << " dump(s) of " << n
      << " rank(s).";
    for (int r = 0; r < n; ++r)
      if (!d[size_t(r)].present) o << " Rank " << r << " wrote no dump.";
    o << "\n";
    return o.str();
  }
  return stuck_report(stuck, groups, d, late, info, present);
}

}  // namespace st::analysis
