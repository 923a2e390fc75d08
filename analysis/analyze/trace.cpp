// The timeline of all ranks (trace.hpp): trace records on rank 0's clock,
// Chrome Trace Event JSON (a process per rank named with its host, a thread
// per track), the last arrival at each collective, and the wait it caused.
#include "analyze/trace.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"

using nlohmann::json;

namespace st::analysis {
namespace {

int track_order(const std::string& k) {
  if (k == "step") return 0;
  if (k == "host") return 1;
  if (k == "compute") return 2;
  if (k == "ckpt") return 1000;
  return 3;
}

}  // namespace

Timeline build_timeline(const telemetry::RunTelemetry& run, int64_t first, int64_t last) {
  Timeline tl;
  const int n = int(run.ranks.size());
  tl.hosts.resize(size_t(n));
  tl.clock_error_s.resize(size_t(n));
  tl.first = std::numeric_limits<int64_t>::max();
  tl.last = std::numeric_limits<int64_t>::min();
  for (int r = 0; r < n; ++r) {
    const auto& rt = run.ranks[size_t(r)];
    tl.hosts[size_t(r)] = rt.header.host;
    if (rt.traces.empty())
      throw UsageError(rt.path +
                       ": no trace records (the run had runtime.trace=off; run with "
                       "runtime.trace=phases or collectives)");
    const telemetry::RankClock& c = rt.clock;
    if (!c.have_start)
      throw UsageError(rt.path + ": no 'clock' event at start; cannot align this rank's times");
    tl.clock_error_s[size_t(r)] = c.error_s;
    auto in = [&](int64_t s) { return (first < 0 || s >= first) && (last < 0 || s <= last); };
    for (const auto& tr : rt.traces) {
      if (!in(tr.step)) continue;
      tl.first = std::min(tl.first, tr.step);
      tl.last = std::max(tl.last, tr.step);
      json j;
      try {
        j = json::parse(tr.text);
      } catch (const std::exception& e) {
        throw UsageError(rt.path + ":" + std::to_string(tr.line) + ": " + e.what());
      }
      const json& spans = j.at("spans");
      if (!spans.is_array())
        throw UsageError(rt.path + ":" + std::to_string(tr.line) + ": field 'spans': not a list");
      for (const auto& s : spans) {
        TraceSpan x;
        x.rank = r;
        x.step = tr.step;
        x.name = s.value("n", "?");
        x.track = s.value("k", "host");
        const double t0 = s.value("t0", 0.0), t1 = s.value("t1", 0.0);
        x.t0 = t0 + c.offset(t0);
        x.t1 = t1 + c.offset(t1);
        x.mb = s.value("mb", int64_t(-1));
        x.bytes = s.value("bytes", int64_t(-1));
        x.seq = s.value("seq", int64_t(-1));
        x.group = s.value("g", int64_t(-1));
        tl.spans.push_back(std::move(x));
      }
    }
    for (const auto& st : rt.steps)
      if (in(st.step)) {
        TraceSpan x;
        x.rank = r;
        x.step = st.step;
        x.name = "step " + std::to_string(st.step);
        x.track = "step";
        x.t0 = st.t_start + c.offset(st.t_start);
        x.t1 = x.t0 + st.step_s;
        tl.spans.push_back(std::move(x));
      }
    // The background write (its commit event closes it).
    for (const auto& e : rt.events)
      if (e.event == "ckpt_commit" && in(e.step)) {
        TraceSpan x;
        x.rank = r;
        x.step = e.step;
        x.name = "ckpt_write";
        x.track = "ckpt";
        x.t1 = e.t + c.offset(e.t);
        x.t0 = x.t1 - e.fields.value("write_s", 0.0);
        tl.spans.push_back(std::move(x));
      }
  }
  if (tl.first > tl.last) throw UsageError(run.dir + ": no trace records in the steps asked for");

  // Arrivals: every collective by (group, lowest rank, seq).
  std::map<std::tuple<std::string, int64_t, int64_t>, std::vector<const TraceSpan*>> by;
  for (const auto& s : tl.spans)
    if (s.seq >= 0 && s.track.rfind("comm:", 0) == 0)
      by[{s.track.substr(5), s.group, s.seq}].push_back(&s);
  for (auto& [key, v] : by) {
    if (v.size() < 2) continue;
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->t0 < b->t0; });
    Arrival a;
    a.group = std::get<0>(key);
    a.group_root = std::get<1>(key);
    a.seq = std::get<2>(key);
    a.step = v.back()->step;
    a.op = v.back()->name;
    a.members = int(v.size());
    a.last_rank = v.back()->rank;
    a.late_by_s = v.back()->t0 - v[v.size() - 2]->t0;
    for (size_t i = 0; i + 1 < v.size(); ++i) a.waited_s += v.back()->t0 - v[i]->t0;
    tl.arrivals.push_back(std::move(a));
  }
  return tl;
}

namespace {

void write_chrome_json(const Timeline& t, const std::string& path) {
  double t_min = std::numeric_limits<double>::infinity();
  for (const auto& s : t.spans) t_min = std::min(t_min, s.t0);
  // A thread id per (rank, track), tracks ordered step, host, compute, comm, ckpt.
  std::map<int, std::set<std::pair<int, std::string>>> tracks;
  for (const auto& s : t.spans) tracks[s.rank].insert({track_order(s.track), s.track});
  std::map<std::pair<int, std::string>, int> tid;
  std::ofstream f(path);
  if (!f) throw Error("cannot write " + path);
  f << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"steps\":\"" << t.first << ".." << t.last
    << "\",\"clock\":\"rank 0's wall clock; ts in microseconds from the first span\"},"
    << "\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const json& e) {
    f << (first ? "" : ",\n") << e.dump();
    first = false;
  };
  for (const auto& [r, ks] : tracks) {
    emit({{"ph", "M"},
          {"name", "process_name"},
          {"pid", r},
          {"args",
           {{"name", "rank " + std::to_string(r) + " (" + t.hosts[size_t(r)] + ", clock +/- " +
                         std::to_string(t.clock_error_s[size_t(r)] * 1e6) + " us)"}}}});
    emit({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", r}, {"args", {{"sort_index", r}}}});
    int id = 0;
    for (const auto& [ord, k] : ks) {
      tid[{r, k}] = ++id;
      emit(
          {{"ph", "M"}, {"name", "thread_name"}, {"pid", r}, {"tid", id}, {"args", {{"name", k}}}});
      emit({{"ph", "M"},
            {"name", "thread_sort_index"},
            {"pid", r},
            {"tid", id},
            {"args", {{"sort_index", id}}}});
    }
  }
  for (const auto& s : t.spans) {
    json args = {{"step", s.step}};
    if (s.mb >= 0) args["mb"] = s.mb;
    if (s.bytes >= 0) args["bytes"] = s.bytes;
    if (s.seq >= 0) args["seq"] = s.seq;
    const std::string name = s.mb >= 0 ? s.name + " mb" + std::to_string(s.mb) : s.name;
    emit({{"ph", "X"},
          {"name", name},
          {"cat", s.track},
          {"pid", s.rank},
          {"tid", tid[{s.rank, s.track}]},
          {"ts", (s.t0 - t_min) * 1e6},
          {"dur", std::max(0.0, s.t1 - s.t0) * 1e6},
          {"args", args}});
  }
  f << "\n]}\n";
}

const char* colour(const std::string& n) {
  if (n == "fwd") return "#4e79a7";
  if (n == "bwd") return "#59a14f";
  if (n == "optim") return "#b07aa1";
  if (n == "data") return "#76b7b2";
  if (n.rfind("ckpt", 0) == 0) return "#9c755f";
  if (n.rfind("step", 0) == 0) return "#dddddd";
  if (n == "signal_vote") return "#bab0ac";
  return "#f28e2b";  // collectives
}

// One step across ranks: a band per rank, a row per track in it.
void write_svg(const Timeline& t, const std::string& path) {
  // The middle step of the range, or the nearest one without a checkpoint
  // save (whose background write would stretch the picture).
  std::set<int64_t> saves;
  for (const auto& s : t.spans)
    if (s.name == "ckpt_snapshot") saves.insert(s.step);
  int64_t step = t.first + (t.last - t.first) / 2;
  for (int64_t d = 0; d <= t.last - t.first; ++d) {
    if (step + d <= t.last && !saves.count(step + d)) {
      step += d;
      break;
    }
    if (step - d >= t.first && !saves.count(step - d)) {
      step -= d;
      break;
    }
  }
  std::map<int, std::set<std::pair<int, std::string>>> rows;
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  for (const auto& s : t.spans)
    if (s.step == step) {
      rows[s.rank].insert({track_order(s.track), s.track});
      if (s.track == "ckpt") continue;  // drawn clipped to the step
      t0 = std::min(t0, s.t0);
      t1 = std::max(t1, s.t1);
    }
  const int row_h = 14, left = 150, width = 1000;
  std::map<std::pair<int, std::string>, int> y;
  int h = 40;
  for (const auto& [r, ks] : rows) {
    for (const auto& k : ks) {
      y[{r, k.second}] = h;
      h += row_h;
    }
    h += 6;
  }
  const double span = std::max(t1 - t0, 1e-9);
  std::ofstream f(path);
  if (!f) throw Error("cannot write " + path);
  f << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20 << "\" height=\""
    << h + 30 << "\" font-family=\"sans-serif\" font-size=\"10\">\n"
    << "<text x=\"10\" y=\"20\" font-size=\"13\">step " << step << " on every rank (" << span * 1e3
    << " ms; rank 0's clock)</text>\n";
  for (const auto& [key, yy] : y)
    f << "<text x=\"10\" y=\"" << yy + 10 << "\">rank " << key.first << " " << key.second
      << "</text>\n";
  for (const auto& s : t.spans) {
    if (s.step != step) continue;
    const double a = std::max(s.t0, t0), b = std::min(s.t1, t1);
    if (b < a) continue;
    const double x = left + (a - t0) / span * width;
    const double w = std::max(0.5, (b - a) / span * width);
    f << "<rect x=\"" << x << "\" y=\"" << y[{s.rank, s.track}] << "\" width=\"" << w
      << "\" height=\"" << row_h - 2 << "\" fill=\"" << colour(s.name) << "\"><title>" << s.name
      << (s.mb >= 0 ? " mb" + std::to_string(s.mb) : "") << " " << (s.t1 - s.t0) * 1e3
      << " ms</title></rect>\n";
  }
  f << "<text x=\"" << left << "\" y=\"" << h + 15
    << "\">fwd blue, bwd green, collectives orange, optimizer purple, checkpoint brown</text>\n"
    << "</svg>\n";
}

void write_arrivals(const Timeline& t, const std::string& dir) {
  std::ofstream c(dir + "/collectives.csv");
  if (!c) throw Error("cannot write " + dir + "/collectives.csv");
  c << "group,group_root,seq,step,op,members,last_rank,late_by_s,waited_s\n";
  for (const auto& a : t.arrivals)
    c << a.group << "," << a.group_root << "," << a.seq << "," << a.step << "," << a.op << ","
      << a.members << "," << a.last_rank << "," << a.late_by_s << "," << a.waited_s << "\n";
  std::map<int, std::pair<double, int>> by_rank;
  std::map<std::string, double> by_host;
  for (const auto& a : t.arrivals) {
    by_rank[a.last_rank].first += a.waited_s;
    by_rank[a.last_rank].second += 1;
    by_host[t.hosts[size_t(a.last_rank)]] += a.waited_s;
  }
  std::ofstream m(dir + "/waited.md");
  if (!m) throw Error("cannot write " + dir + "/waited.md");
  m << "# Time others waited for each rank (steps " << t.first << ".." << t.last << ")\n\n"
    << "At every collective the rank that arrived last kept the others waiting: the sum over "
       "the other members of (its arrival - theirs), on rank 0's clock.\n\n"
    << "| rank | host | collectives it arrived last at | others waited (s) |\n|---|---|---|---|\n";
  for (const auto& [r, v] : by_rank)
    m << "| " << r << " | " << t.hosts[size_t(r)] << " | " << v.second << " | " << v.first
      << " |\n";
  m << "\n| host | others waited (s) |\n|---|---|\n";
  for (const auto& [hname, v] : by_host) m << "| " << hname << " | " << v << " |\n";
}

}  // namespace

std::vector<std::string> write_trace_outputs(const Timeline& t, const std::string& out_dir) {
  std::filesystem::create_directories(out_dir);
  write_chrome_json(t, out_dir + "/trace.json");
  write_svg(t, out_dir + "/step.svg");
  write_arrivals(t, out_dir);
  return {"trace.json", "step.svg", "collectives.csv", "waited.md"};
}

}  // namespace st::analysis
