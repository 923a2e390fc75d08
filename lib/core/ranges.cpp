// Implementation of ranges.hpp.
#include "core/ranges.hpp"

#include <atomic>
#include <cctype>

#include "core/error.hpp"

namespace st::ranges {
namespace {
std::atomic<Sink*> g_sink{nullptr};
}  // namespace

void set_sink(Sink* s) { g_sink.store(s); }
Sink* sink() { return g_sink.load(std::memory_order_relaxed); }

Scope::Scope(const char* name) : s_(sink()) {
  if (s_) s_->push(name);
}
Scope::~Scope() {
  if (s_) s_->pop();
}

std::string step_name(long step) { return "step " + std::to_string(step); }

std::string collective_name(const char* op, const std::string& group, int64_t bytes) {
  return std::string(op) + " comm:" + group + " " + std::to_string(bytes) + "B";
}

namespace {
// A whole positive step number, or -1.
long step_number(const std::string& s) {
  if (s.empty() || s.size() > 15) return -1;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  return std::stol(s);
}
}  // namespace

StepWindow parse_step_window(const std::string& key, const std::string& text) {
  if (text.empty()) return {};
  const auto dash = text.find('-');
  const std::string a = text.substr(0, dash);
  const std::string b = dash == std::string::npos ? a : text.substr(dash + 1);
  const long first = step_number(a), last = step_number(b);
  const std::string valid =
      "; valid: A-B with whole steps 1 <= A <= B (e.g. 10-12), one step A, or empty for none";
  if (first < 1 || last < 1) throw UsageError(key + ": '" + text + "' is not a step range" + valid);
  if (last < first) throw UsageError(key + ": '" + text + "' ends before it starts" + valid);
  return {first, last};
}

void CaptureWindow::begin_step(long step) {
  if (on_ || done_ || w_.empty() || step < w_.first || step > w_.last) return;
  if (Sink* s = sink()) s->capture(true);
  on_ = true;
}

void CaptureWindow::end_step(long step) {
  if (on_ && step >= w_.last) finish();
}

void CaptureWindow::finish() {
  if (!on_) return;
  if (Sink* s = sink()) s->capture(false);
  on_ = false;
  done_ = true;
}

}  // namespace st::ranges
