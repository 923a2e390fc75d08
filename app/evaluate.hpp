// The validation split: every train.eval_interval steps (and after the last
// step) the loss over fixed held-out windows of data.val_path, logged and
// recorded as a telemetry `eval` event (docs/data.md, docs/telemetry.md).
#pragma once
#include <memory>

#include "config/config.hpp"
#include "data/data.hpp"
#include "engine/engine.hpp"
#include "telemetry/writer.hpp"

namespace st {

class Evaluator {
 public:
  // nullptr when train.eval_interval is 0. Opens data.val_path (the same
  // formats and checks as data.path) and checks the ids of every held-out
  // window now, so a bad split is refused before anything is written.
  static std::unique_ptr<Evaluator> make(const Config& cfg, int dp, int dp_rank);
  bool due(long step, long last) const { return step % interval_ == 0 || step == last; }
  // The mean loss over data.val_batches global batches of held-out windows
  // (samples 0 .. val_batches*global_batch-1 of the split: the same windows
  // every time). Runs the engine's forward and backward, discarding the
  // gradients (the next step's backward overwrites them; the weights and
  // optimizer state are untouched). Every rank calls it; records the event.
  double run(long step, Engine& engine, TelemetryWriter& tel) const;
  std::string describe() const;

 private:
  Evaluator(std::unique_ptr<TokenSource> src, const Config& cfg, int dp, int dp_rank);
  DataLoader loader_;
  int interval_, batches_;
  int64_t tokens_per_batch_;
};

}  // namespace st
