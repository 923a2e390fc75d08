// Implementation of flight_recorder.hpp (MPI-free: target st_flight, which
// the Communicator seam links): a ring per communicator under its own mutex, finished collectives
// to the span log, and the JSON dump written with stdio (no allocation-heavy library on the abort
// path beyond std::string).
#include "runtime/flight_recorder.hpp"

#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

#include "core/span_log.hpp"

namespace st::flight {
namespace {

using spans::epoch_now;

enum class State : uint8_t { kEnqueued, kStarted, kDone };

const char* state_name(State s) {
  switch (s) {
    case State::kEnqueued:
      return "enqueued";
    case State::kStarted:
      return "started";
    case State::kDone:
      return "done";
  }
  return "?";
}

struct Entry {
  uint64_t seq = 0;
  const char* op = "";
  int64_t bytes = 0;
  double t_enqueue = 0, t_start = 0, t_end = 0;
  State state = State::kEnqueued;
};

}  // namespace

struct Ring {
  std::string base, name;  // as created; as recorded (unique per rank)
  std::vector<int> ranks;
  int lowest = 0;  // the lowest world rank among them
  std::mutex mu;
  uint64_t next = 0;  // sequence number of the next collective
  std::vector<Entry> e;
};

namespace {

struct Recorder {
  std::mutex mu;  // comms (growth), config, dump
  std::string path, host;
  int rank = -1, entries = 0;
  std::vector<std::shared_ptr<Ring>> comms;
  std::atomic<const char*> phase{"start-up"};
  std::atomic<long> phase_step{0};
  double offset_s = 0, offset_err_s = -1;
};

Recorder& rec() {
  static Recorder* r = new Recorder;  // never destroyed: dumps may run during exit
  return *r;
}

void json_string(std::FILE* f, const std::string& s) {
  std::fputc('"', f);
  for (char c : s) {
    if (c == '"' || c == '\\')
      std::fprintf(f, "\\%c", c);
    else if (static_cast<unsigned char>(c) < 0x20)
      std::fprintf(f, "\\u%04x", c);
    else
      std::fputc(c, f);
  }
  std::fputc('"', f);
}

}  // namespace

void configure(const std::string& path, int world_rank, const std::string& host, int entries) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lk(r.mu);
  r.path = path;
  r.rank = world_rank;
  r.host = host;
  r.entries = entries;
}

std::shared_ptr<Ring> add_ring(const std::string& name, const std::vector<int>& world_ranks) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.entries <= 0) return nullptr;
  // A second communicator with the same name and members (every rank
  // creates them in the same order) is told apart as "name#2", ...
  int same = 0;
  for (const auto& c : r.comms) same += c->base == name && c->ranks == world_ranks;
  auto g = std::make_shared<Ring>();
  g->base = name;
  g->name = same ? name + "#" + std::to_string(same + 1) : name;
  g->ranks = world_ranks;
  g->lowest = world_ranks.empty() ? 0 : *std::min_element(world_ranks.begin(), world_ranks.end());
  g->e.resize(size_t(r.entries));
  r.comms.push_back(g);
  return g;
}

uint64_t enqueue(Ring& g, const char* op, int64_t bytes) {
  const double now = epoch_now();
  std::lock_guard<std::mutex> lk(g.mu);
  const uint64_t seq = g.next++;
  g.e[seq % g.e.size()] = Entry{seq, op, bytes, now, 0, 0, State::kEnqueued};
  return seq;
}

void start(Ring& g, uint64_t seq) {
  const double now = epoch_now();
  std::lock_guard<std::mutex> lk(g.mu);
  Entry& e = g.e[seq % g.e.size()];
  if (e.seq != seq || e.state != State::kEnqueued) return;  // overwritten, or done
  e.t_start = now;
  e.state = State::kStarted;
}

void finish(Ring& g, uint64_t seq) {
  const double now = epoch_now();
  spans::Span s;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    Entry& e = g.e[seq % g.e.size()];
    if (e.seq != seq || e.state == State::kDone) return;
    e.t_end = now;
    if (e.t_start == 0) e.t_start = e.t_enqueue;
    e.state = State::kDone;
    if (spans::level() != spans::TraceLevel::kCollectives) return;
    s = spans::Span{e.op, "comm:" + g.name, e.t_start,    e.t_end,
                    -1,   e.bytes,          int64_t(seq), g.lowest};
  }
  spans::add(std::move(s));
}

std::vector<EntryView> entries(Ring& g) {
  std::lock_guard<std::mutex> lk(g.mu);
  std::vector<EntryView> out;
  const uint64_t n = std::min<uint64_t>(g.next, g.e.size());
  for (uint64_t s = g.next - n; s < g.next; ++s) {
    const Entry& e = g.e[s % g.e.size()];
    out.push_back({e.seq, e.op, e.bytes, state_name(e.state)});
  }
  return out;
}

std::string ring_name(Ring& g) { return g.name; }

void note_phase(const char* what, long step) {
  rec().phase.store(what, std::memory_order_relaxed);
  rec().phase_step.store(step, std::memory_order_relaxed);
}

void set_clock_offset(double offset_s, double error_s) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lk(r.mu);
  r.offset_s = offset_s;
  r.offset_err_s = error_s;
}

bool dump(const std::string& reason) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.path.empty() || r.entries <= 0) return false;
  // The folder is made by the first dump, so a run that ends normally
  // leaves none (mkdir: safe in the abnormal ends that call this).
  if (const size_t slash = r.path.rfind('/'); slash != std::string::npos && slash > 0)
    ::mkdir(r.path.substr(0, slash).c_str(), 0777);
  const std::string tmp = r.path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "{\"schema\":\"%s\",\"rank\":%d,\"host\":", kSchema, r.rank);
  json_string(f, r.host);
  std::fprintf(f, ",\"t\":%.6f,\"clock_offset_s\":%.9f,\"clock_error_s\":%.9f,\"reason\":",
               epoch_now(), r.offset_s, r.offset_err_s);
  json_string(f, reason);
  std::fprintf(f, ",\"phase\":");
  json_string(f, r.phase.load());
  std::fprintf(f, ",\"phase_step\":%ld,\"comms\":[", r.phase_step.load());
  for (size_t c = 0; c < r.comms.size(); ++c) {
    Ring& g = *r.comms[c];
    std::lock_guard<std::mutex> gl(g.mu);
    std::fprintf(f, "%s\n{\"name\":", c ? "," : "");
    json_string(f, g.name);
    std::fprintf(f, ",\"ranks\":[");
    for (size_t i = 0; i < g.ranks.size(); ++i) std::fprintf(f, "%s%d", i ? "," : "", g.ranks[i]);
    std::fprintf(f, "],\"next_seq\":%llu,\"entries\":[", (unsigned long long)g.next);
    // Oldest first: the ring holds seqs [next - n, next) (fewer at first).
    const uint64_t n = std::min<uint64_t>(g.next, g.e.size());
    for (uint64_t s = g.next - n; s < g.next; ++s) {
      const Entry& e = g.e[s % g.e.size()];
      std::fprintf(f,
                   "%s{\"seq\":%llu,\"op\":\"%s\",\"bytes\":%lld,\"t_enqueue\":%.6f,"
                   "\"t_start\":%.6f,\"t_end\":%.6f,\"state\":\"%s\"}",
                   s == g.next - n ? "" : ",", (unsigned long long)e.seq, e.op, (long long)e.bytes,
                   e.t_enqueue, e.t_start, e.t_end, state_name(e.state));
    }
    std::fprintf(f, "]}");
  }
  std::fprintf(f, "]}\n");
  const bool ok = std::fflush(f) == 0;
  std::fclose(f);
  return ok && std::rename(tmp.c_str(), r.path.c_str()) == 0;
}

}  // namespace st::flight
