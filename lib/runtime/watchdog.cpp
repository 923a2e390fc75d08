// Implementation of watchdog.hpp. Questions carry a sequence number that the
// answer echoes ("<seq>|<doing>"), so an answer to an earlier question never
// counts as a sign of life now. Sends are non-blocking; their buffers live in
// a list until MPI reports them done.
#include "runtime/watchdog.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <set>
#include <utility>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/poll_wait.hpp"
#include "core/util.hpp"
#include "runtime/flight_recorder.hpp"
#include "runtime/runtime.hpp"

namespace st::watchdog {
namespace {

constexpr int kAskTag = 30071, kAnswerTag = 30072;
// "Write your flight recorder": sent to every rank by a rank about to abort
// the job, so the hang report sees every rank that can still answer.
constexpr int kDumpTag = 30073;

MPI_Comm g_comm = MPI_COMM_NULL;
std::mutex g_mu;      // g_sends and every MPI call on g_comm
std::mutex g_ask_mu;  // one ask() at a time
int g_seq = 0;

struct Send {
  MPI_Request req = MPI_REQUEST_NULL;
  std::string buf;
};
std::list<Send> g_sends;

void send_locked(int dest, int tag, std::string text) {
  g_sends.push_back({MPI_REQUEST_NULL, std::move(text)});
  Send& s = g_sends.back();
  MPI_Isend(s.buf.data(), int(s.buf.size()), MPI_CHAR, dest, tag, g_comm, &s.req);
}

void reap_locked() {
  for (auto it = g_sends.begin(); it != g_sends.end();) {
    int done = 0;
    MPI_Test(&it->req, &done, MPI_STATUS_IGNORE);
    it = done ? g_sends.erase(it) : std::next(it);
  }
}

void answer_locked(const std::string& doing) {
  while (true) {
    int flag = 0;
    MPI_Message m;
    MPI_Status st;
    MPI_Improbe(MPI_ANY_SOURCE, kAskTag, g_comm, &flag, &m, &st);
    if (!flag) return;
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string seq(size_t(std::max(n, 0)), '\0');
    MPI_Mrecv(seq.data(), n, MPI_CHAR, &m, MPI_STATUS_IGNORE);
    send_locked(st.MPI_SOURCE, kAnswerTag, seq + "|" + doing);
    // A peer's wait timed out: keep this rank's view of the collectives.
    flight::dump("rank " + std::to_string(st.MPI_SOURCE) +
                 " timed out and asked whether this rank is alive; it was in " + doing);
  }
  while (true) {
    int flag = 0;
    MPI_Message m;
    MPI_Status st;
    MPI_Improbe(MPI_ANY_SOURCE, kDumpTag, g_comm, &flag, &m, &st);
    if (!flag) return;
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string why(size_t(std::max(n, 0)), '\0');
    MPI_Mrecv(why.data(), n, MPI_CHAR, &m, MPI_STATUS_IGNORE);
    flight::dump("rank " + std::to_string(st.MPI_SOURCE) + " is aborting the job (" + why +
                 "); this rank was in " + doing);
  }
}

std::vector<std::string> g_hosts;  // host of each world rank
std::mutex g_timeout_mu;           // one timeout decision at a time
bool g_aborting = false;           // guarded by g_timeout_mu
}  // namespace

void init(MPI_Comm world, std::vector<std::string> host_of_rank) {
  if (g_comm != MPI_COMM_NULL) return;
  g_hosts = std::move(host_of_rank);
  MPI_Comm_dup(world, &g_comm);
  MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
}

void poll(const std::string& doing) {
  // A signal while waiting in a collective (the launcher ending the job
  // after a rank died): the loop may never get to act on it, so keep the
  // flight recorder now.
  static std::atomic<bool> signal_dumped{false};
  if (const int sig = pending_signal(); sig != 0 && !signal_dumped.exchange(true))
    flight::dump(std::string(signal_name(sig)) + " while waiting in " + doing);
  if (g_comm == MPI_COMM_NULL) return;
  std::lock_guard<std::mutex> lk(g_mu);
  reap_locked();
  answer_locked(doing);
}

Report ask(MPI_Comm comm, double grace_s, const std::string& doing) {
  Report r;
  int size = 0, me = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &me);
  // The members as world ranks (g_comm duplicates the world).
  MPI_Group g, wg;
  MPI_Comm_group(comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &wg);
  std::vector<int> in(static_cast<size_t>(size)), out(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) in[size_t(i)] = i;
  MPI_Group_translate_ranks(g, size, in.data(), wg, out.data());
  MPI_Group_free(&g);
  MPI_Group_free(&wg);
  std::vector<int> peers;
  for (int i = 0; i < size; ++i)
    if (i != me) peers.push_back(out[size_t(i)]);
  if (g_comm == MPI_COMM_NULL) {
    r.silent = peers;
    return r;
  }

  std::lock_guard<std::mutex> one(g_ask_mu);
  int seq;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    seq = ++g_seq;
    for (int p : peers) send_locked(p, kAskTag, std::to_string(seq));
  }
  std::set<int> waiting(peers.begin(), peers.end());
  const double t0 = wall_time();
  PollPolicy each_ms;  // answers and collects every millisecond
  each_ms.spins = 0;
  each_ms.sleep_s = 1e-3;
  each_ms.answer_every_s = 0;
  poll_wait([&] { return waiting.empty() || wall_time() - t0 >= grace_s; },
            [&] {
              std::lock_guard<std::mutex> lk(g_mu);
              reap_locked();
              answer_locked(doing);
              while (true) {
                int flag = 0, n = 0;
                MPI_Message m;
                MPI_Status st;
                MPI_Improbe(MPI_ANY_SOURCE, kAnswerTag, g_comm, &flag, &m, &st);
                if (!flag) break;
                MPI_Get_count(&st, MPI_CHAR, &n);
                std::string text(size_t(std::max(n, 0)), '\0');
                MPI_Mrecv(text.data(), n, MPI_CHAR, &m, MPI_STATUS_IGNORE);
                const size_t bar = text.find('|');
                if (bar == std::string::npos || text.substr(0, bar) != std::to_string(seq))
                  continue;
                if (waiting.erase(st.MPI_SOURCE))
                  r.alive.push_back({st.MPI_SOURCE, text.substr(bar + 1)});
              }
            },
            each_ms);
  r.silent.assign(waiting.begin(), waiting.end());
  return r;
}

double grace_for(double timeout_s) { return std::min(30.0, std::max(2.0, 0.05 * timeout_s)); }

std::string explain(const Report& r, const std::string& what, const std::string& group,
                    int rank_in_group, int group_size, double timeout_s) {
  std::string s = "timeout: " + what + " on group '" + group + "' (rank " +
                  std::to_string(rank_in_group) + " of " + std::to_string(group_size) +
                  ") waited more than " + detail::cat(timeout_s) + " s. ";
  if (!r.silent.empty()) {
    std::string who;
    for (int w : r.silent) {
      who += (who.empty() ? "" : ", ") + std::to_string(w);
      if (size_t(w) < g_hosts.size()) who += " (host " + g_hosts[size_t(w)] + ")";
    }
    s += std::string(r.silent.size() == 1 ? "World rank " : "World ranks ") + who +
         " did not answer within the grace period: stopped, stuck outside MPI, or dead. ";
  } else {
    s += "Every member is alive and waiting (";
    for (size_t i = 0; i < r.alive.size(); ++i)
      s += (i ? "; " : "") +
           ("rank " + std::to_string(r.alive[i].world_rank) + " in " + r.alive[i].doing);
    s += "): they wait in different operations (mismatched calls) or a peer is slower than "
         "runtime.timeout_s. ";
  }
  return s + "Aborting the job.";
}

void dump_all(const std::string& reason, const std::string& short_reason) {
  flight::dump(reason);
  if (g_comm == MPI_COMM_NULL) return;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    int n = 0, me = 0;
    MPI_Comm_size(g_comm, &n);
    MPI_Comm_rank(g_comm, &me);
    for (int q = 0; q < n; ++q)
      if (q != me) send_locked(q, kDumpTag, short_reason);
  }
  // Time for the others to write theirs from their wait loops' poll.
  const double t_end = wall_time() + 0.5;
  PollPolicy every_20ms;
  every_20ms.spins = 0;
  every_20ms.sleep_s = 0.02;
  every_20ms.answer_every_s = 0;
  poll_wait([&] { return wall_time() >= t_end; }, [] { poll("aborting the job"); }, every_20ms);
}

void on_timeout(MPI_Comm comm, const std::string& what, const std::string& group, double timeout_s,
                bool abort_if_all_alive) {
  std::lock_guard<std::mutex> one(g_timeout_mu);
  if (!g_aborting) {
    Report r = ask(comm, grace_for(timeout_s), what + " on group '" + group + "'");
    if (r.silent.empty() && !abort_if_all_alive) return;
    g_aborting = true;
    int me = 0, n = 0;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    const std::string why = explain(r, what, group, me, n, timeout_s);
    logw(why);
    dump_all(why, "timeout in " + what + " on group '" + group + "'");
  }
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

}  // namespace st::watchdog
