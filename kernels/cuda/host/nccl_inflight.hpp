// The NCCL communicator's collectives in flight (nccl_communicator.cpp), in
// issue order: how what the device reports (a collective's start and end
// events) reaches the Communicator front, which adds the statistic and
// moves the flight-recorder entry (enqueued -> started -> done), and how the
// watchdog finds the oldest collective overdue. Header-only and CUDA-free, so
// the path from an NCCL issue to the flight recorder is tested on CPUs
// (ctest/cuda/test_nccl_flight.cpp, label cuda-host) with host flags in
// place of the CUDA events.
#pragma once
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace st::cuda_host {

// Op: a CommOp with bool device_started(), bool device_done() (cheap queries
// of its events) and a double `started_at` (host time it was first seen
// running; 0 before).
template <class Op>
class InFlight {
 public:
  void push(std::shared_ptr<Op> op) {
    std::lock_guard<std::mutex> g(mu_);
    q_.push_back(std::move(op));
  }
  // Closes, oldest first, the collectives the device has finished (the
  // front counts them and closes their entries), and marks the oldest
  // unfinished one started once the device has started it.
  void reap(double now) {
    std::vector<std::shared_ptr<Op>> done;
    std::shared_ptr<Op> running;
    {
      std::lock_guard<std::mutex> g(mu_);
      while (!q_.empty() && q_.front()->device_done()) {
        done.push_back(std::move(q_.front()));
        q_.pop_front();
      }
      if (!q_.empty() && q_.front()->started_at == 0 && q_.front()->device_started()) {
        q_.front()->started_at = now;
        running = q_.front();
      }
    }
    for (auto& op : done) {
      op->started();
      op->finish();
    }
    if (running) running->started();
  }
  // The oldest unfinished collective, if it has run longer than timeout_s
  // since it started on the device: why ("" otherwise).
  std::string overdue(double now, double timeout_s) {
    reap(now);
    std::lock_guard<std::mutex> g(mu_);
    if (q_.empty()) return "";
    const Op& op = *q_.front();
    if (op.started_at > 0 && now - op.started_at > timeout_s)
      return detail::cat(op.what(), " of ", op.bytes(), " bytes not finished ", now - op.started_at,
                         " s after it started on the device (runtime.timeout_s=", timeout_s, ")");
    return "";
  }
  size_t size() {
    std::lock_guard<std::mutex> g(mu_);
    return q_.size();
  }

 private:
  std::mutex mu_;
  std::deque<std::shared_ptr<Op>> q_;
};

}  // namespace st::cuda_host
