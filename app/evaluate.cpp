// Implementation of evaluate.hpp: the held-out loss through the step engine.
#include "evaluate.hpp"

#include <cmath>

#include "core/log.hpp"
#include "core/util.hpp"

namespace st {

std::unique_ptr<Evaluator> Evaluator::make(const Config& cfg, int dp, int dp_rank) {
  if (cfg.train.eval_interval <= 0) return nullptr;
  // The split's windows are drawn with the training seed: held out by being
  // other files, not other windows.
  auto src =
      make_file_source(cfg.data.val_path, cfg.data.dtype, cfg.train.seed, cfg.model.vocab_size,
                       cfg.model.seq_len, cfg.data.format, "data.val_path");
  const uint64_t gb = uint64_t(cfg.train.micro_batch) * cfg.train.grad_accum * dp;
  check_windows(*src, cfg.model.seq_len, 0, gb * uint64_t(cfg.data.val_batches));
  return std::unique_ptr<Evaluator>(new Evaluator(std::move(src), cfg, dp, dp_rank));
}

Evaluator::Evaluator(std::unique_ptr<TokenSource> src, const Config& cfg, int dp, int dp_rank)
    : loader_(std::move(src), cfg.model.seq_len, cfg.train.micro_batch, cfg.train.grad_accum, dp,
              dp_rank),
      interval_(cfg.train.eval_interval),
      batches_(cfg.data.val_batches),
      tokens_per_batch_(loader_.global_batch() * cfg.model.seq_len) {}

double Evaluator::run(long step, Engine& engine, TelemetryWriter& tel) const {
  const double t0 = wall_time();
  double sum = 0;
  for (int b = 1; b <= batches_; ++b) sum += engine.forward_backward(b, loader_).loss;
  const double loss = sum / batches_, secs = wall_time() - t0;
  tel.event("eval", step,
            {{"val_loss", std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr)},
             {"val_tokens", tokens_per_batch_ * batches_},
             {"eval_s", secs}});
  char line[160];
  std::snprintf(line, sizeof line, "step %5ld | val loss %.4f over %lld held-out tokens (%.2f s)",
                step, loss, static_cast<long long>(tokens_per_batch_ * batches_), secs);
  log0(line);
  return loss;
}

std::string Evaluator::describe() const {
  return loader_.source().describe() + ", " + std::to_string(batches_) +
         " global batch(es) every " + std::to_string(interval_) + " steps";
}

}  // namespace st
