// Who is stuck: when a wait on a group times out, the waiting rank asks every
// other member of the group, on a private duplicate of the world
// communicator, whether it is alive. Every wait loop answers such questions
// (poll), saying what it waits in; a rank that does not answer within a
// short grace is stopped (SIGSTOP), stuck outside any wait, or dead, and the
// timeout message names it rather than the rank that waited. The checkpoint
// vote asks too, so a stuck peer brings the job down after one timeout, not
// after the vote's timeout and then the next collective's.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

namespace st::watchdog {

// Collective over `world`, once after MPI_Init (Runtime does it), with the
// host of every world rank for messages. Without it poll() does nothing and
// ask() reports every peer as unanswered.
void init(MPI_Comm world, std::vector<std::string> host_of_rank);

// Answers pending questions from timed-out peers with "waiting in `doing`".
// Cheap (one MPI_Improbe when nothing is pending); call it from every wait
// loop. Thread-safe.
void poll(const std::string& doing);

struct Answer {
  int world_rank;
  std::string doing;  // what it said it waits in
};
struct Report {
  std::vector<int> silent;    // world ranks of members that did not answer
  std::vector<Answer> alive;  // members that answered
};

// Asks every other member of `comm` and waits up to `grace_s` for answers
// (answering others meanwhile as "waiting in `doing`"). One ask at a time
// per process.
Report ask(MPI_Comm comm, double grace_s, const std::string& doing);

// The grace ask() gets after a wait of `timeout_s`: 5 % of it, within [2, 30] s.
double grace_for(double timeout_s);

// The message for a timed-out wait: names the silent ranks (with their
// hosts when known) or, when every member answered, what each waits in.
std::string explain(const Report& r, const std::string& what, const std::string& group,
                    int rank_in_group, int group_size, double timeout_s);

// Before this rank takes the job down: writes its flight recorder with
// `reason`, asks every other rank to write theirs (they do from their next
// poll(), naming `short_reason`) and gives them half a second to do it.
void dump_all(const std::string& reason, const std::string& short_reason);

// For a wait on `comm` that timed out: asks the members (grace_for), then
// logs explain() and aborts the job (MPI_Abort) when a member is silent, or
// always when `abort_if_all_alive`; otherwise returns (a slow peer). Once one
// thread of this process aborts, every later call aborts without asking or
// logging again: the launcher's SIGCONT to a stopped rank during the abort
// must not produce a second, contradicting message.
void on_timeout(MPI_Comm comm, const std::string& what, const std::string& group, double timeout_s,
                bool abort_if_all_alive);

}  // namespace st::watchdog
