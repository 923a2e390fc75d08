// How the CUDA backend's host waits wait (CudaStream::synchronize,
// CudaEvent::synchronize, NcclCommunicator::wait_host): they poll instead
// of blocking in the driver, so the waiting thread keeps answering the
// run-time watchdog (lib/runtime/watchdog.hpp: a peer whose wait timed out
// asks who is alive, and a rank blocked in cudaStreamSynchronize would not
// answer, so the message would name the wrong rank). Header-only, compiled
// without nvcc and tested on CPUs (label cuda-host).
#pragma once
#include <chrono>
#include <thread>

namespace st::cuda_host {

struct PollPolicy {
  int spins = 1000;              // polls with a yield in between, first
  double sleep_s = 100e-6;       // then a sleep between polls
  double answer_every_s = 0.05;  // `between` runs at least this often (and once at once)
};

// Polls done() until it is true. between() runs after the first unfinished
// poll and then whenever answer_every_s has passed since its last run: it
// answers the watchdog, checks timeouts and may throw or abort. Returns the
// number of polls.
template <class Done, class Between, class Clock = std::chrono::steady_clock>
long poll_wait(Done done, Between between, const PollPolicy& p = {}) {
  auto last = typename Clock::time_point{};
  bool first = true;
  for (long n = 1;; ++n) {
    if (done()) return n;
    const auto now = Clock::now();
    if (first || std::chrono::duration<double>(now - last).count() >= p.answer_every_s) {
      between();
      last = now;
      first = false;
    }
    if (n < p.spins)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::duration<double>(p.sleep_s));
  }
}
}  // namespace st::cuda_host
