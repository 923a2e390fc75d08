// Implementation of optim.hpp: AdamW over the state table with the backend's multi-tensor
// AdamW (decoupled weight decay, bias correction as in PyTorch's
// torch.optim.AdamW) and LR schedules.
#include "optim/optim.hpp"

#include <algorithm>
#include <cmath>

#include "backend/backend.hpp"
#include "core/error.hpp"

namespace st {

Schedule parse_schedule(const std::string& s) {
  if (s == "constant") return Schedule::Constant;
  if (s == "linear") return Schedule::Linear;
  if (s == "cosine") return Schedule::Cosine;
  throw UsageError("optim.schedule: '" + s + "' is not valid; choose constant, linear or cosine");
}

LrSchedule::LrSchedule(const OptimCfg& o, long total)
    : kind_(parse_schedule(o.schedule)),
      peak_(o.lr),
      floor_(o.lr * o.min_lr_ratio),
      warmup_(o.warmup_steps),
      total_(total) {}

double LrSchedule::at(long step) const {
  if (warmup_ > 0 && step <= warmup_) return peak_ * double(step) / double(warmup_);
  if (kind_ == Schedule::Constant) return peak_;
  const long decay_steps = std::max<long>(1, total_ - warmup_);
  const double frac = std::clamp(double(step - warmup_) / double(decay_steps), 0.0, 1.0);
  if (kind_ == Schedule::Linear) return peak_ + (floor_ - peak_) * frac;
  return floor_ + 0.5 * (peak_ - floor_) * (1.0 + std::cos(M_PI * frac));
}

void AdamW::init(StateTable& t) {
  Device& dev = be_.device();
  for (StatePiece& p : t.pieces) {
    p.m = Tensor({p.len}, DType::F32, MemCat::Optim, dev);
    p.v = Tensor({p.len}, DType::F32, MemCat::Optim, dev);
    p.m.zero();
    p.v.zero();
  }
}

void AdamW::step(StateTable& t, double lr, double grad_scale, long step) {
  AdamWHyper h;
  h.lr = float(lr);
  h.beta1 = float(cfg_.beta1);
  h.beta2 = float(cfg_.beta2);
  h.eps = float(cfg_.eps);
  h.weight_decay = float(cfg_.weight_decay);
  h.step = step;
  h.grad_scale = float(grad_scale);
  std::vector<AdamWSpan> spans;
  spans.reserve(t.pieces.size());
  for (StatePiece& p : t.pieces)
    spans.push_back(
        {p.master, p.grad, p.m.data(), p.v.data(), p.compute, p.compute_t, p.len, p.decay});
  be_.ops().adamw(be_.device().compute_stream(), spans, h);
}

double clip_coef(double norm, double clip) {
  if (clip <= 0 || !std::isfinite(norm) || norm <= clip) return 1.0;
  return clip / (norm + 1e-6);
}
}  // namespace st
