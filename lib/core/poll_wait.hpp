// The one wait loop of the tree: every host wait that can take long polls
// through poll_wait instead of blocking (the communicators' collectives
// through the Communicator front, lib/comm; the CUDA backend's stream and
// event synchronisation; the checkpoint vote; the watchdog's grace), so the
// waiting thread keeps answering the run-time watchdog (runtime/watchdog.hpp:
// a peer whose wait timed out asks who is alive, and a rank blocked in a
// driver or library wait would not answer, so the message would name the
// wrong rank) and applies runtime.timeout_s. Header-only and MPI-free;
// tested on CPUs (ctest/cuda/test_poll_wait.cpp, label cuda-host).
#pragma once
#include <algorithm>
#include <chrono>
#include <thread>
#include <type_traits>

namespace st {

struct PollPolicy {
  long spins = 1000;             // polls with a yield in between, first ...
  double spin_s = 0;             // ... and for at least this long
  double sleep_s = 100e-6;       // then a sleep between polls of sleep_s, or, with
  double sleep_frac = 0;         // sleep_frac > 0, that fraction of the wait so far
  double sleep_max_s = 5e-3;     // (within [sleep_s, sleep_max_s])
  double answer_every_s = 0.05;  // `between` runs at least this often,
  bool answer_first = true;      // and at the first unfinished poll
};

// Polls done() until it is true. between() runs after the first unfinished
// poll (unless !answer_first) and then whenever answer_every_s has passed
// since its last run (or the start): it
// answers the watchdog, checks timeouts and may throw or abort; taking a
// PollPolicy&, it may also change `p` (a wait that finds the machine oversubscribed starts
// sleeping). Returns the number of polls.
template <class Done, class Between, class Clock = std::chrono::steady_clock>
long poll_wait(Done done, Between between, PollPolicy p = {}) {
  const auto t0 = Clock::now();
  auto last = t0;
  bool first = p.answer_first;
  for (long n = 1;; ++n) {
    if (done()) return n;
    const auto now = Clock::now();
    if (first || std::chrono::duration<double>(now - last).count() >= p.answer_every_s) {
      if constexpr (std::is_invocable_v<Between&, PollPolicy&>)
        between(p);
      else
        between();
      last = now;
      first = false;
    }
    const double waited = std::chrono::duration<double>(now - t0).count();
    if (n < p.spins || waited < p.spin_s) {
      std::this_thread::yield();
    } else {
      const double s = p.sleep_frac > 0
                           ? std::clamp(p.sleep_frac * waited, p.sleep_s, p.sleep_max_s)
                           : p.sleep_s;
      std::this_thread::sleep_for(std::chrono::duration<double>(s));
    }
  }
}

}  // namespace st
