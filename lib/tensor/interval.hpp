// The one timing type of work on a stream: two events recorded around it,
// read once the stream has passed the second (device time on a GPU, the
// recorded times on the CPU devices). The engine's tail and update, the
// pipeline's receive waits, ZeRO-3's gather waits and the model's forward
// and backward phases all time themselves with it.
#pragma once
#include <memory>
#include <utility>

#include "tensor/device.hpp"

namespace st {

struct StreamInterval {
  std::unique_ptr<Event> a, b;  // begin and end (public: callers may recycle them)
  StreamInterval() = default;
  explicit StreamInterval(Device& d) : a(d.create_event()), b(d.create_event()) {}
  StreamInterval(std::unique_ptr<Event> begin, std::unique_ptr<Event> end)
      : a(std::move(begin)), b(std::move(end)) {}
  void begin(Stream& s) { a->record(s); }
  void end(Stream& s) { b->record(s); }
  double seconds() const { return b->seconds_since(*a); }
};
}  // namespace st
