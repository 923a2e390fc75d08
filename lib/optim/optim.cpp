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

uint32_t StatePiece::rng_key() const {
  // FNV-1a over the name and the block's offset (not the ZeRO piece's).
  uint32_t h = 2166136261u;
  auto eat = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 16777619u;
  };
  eat(name.data(), name.size());
  for (int64_t o : block_offset) eat(&o, sizeof o);
  return h;
}

void AdamW::init(StateTable& t) {
  Device& dev = be_.device();
  for (StatePiece& p : t.pieces) {
    p.m = Tensor({p.len}, p.state_t, MemCat::Optim, dev);
    p.v = Tensor({p.len}, p.state_t, MemCat::Optim, dev);
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
  // A fresh stream of rounding bits every step, the same on every rank.
  h.rng_seed = uint32_t(seed_ ^ (seed_ >> 32)) ^ uint32_t(step) * 0x9e3779b9u;
  std::vector<AdamWSpan> spans;
  spans.reserve(t.pieces.size());
  for (StatePiece& p : t.pieces) {
    AdamWSpan a;
    a.w = p.master, a.g = p.grad, a.m = p.m.raw(), a.v = p.v.raw(), a.state_t = p.state_t;
    a.wc = p.compute, a.wc_t = p.compute_t, a.n = p.len, a.decay = p.decay;
    // The piece starts p.off elements into its block's stream.
    if (p.state_t == DType::BF16) a.rng_key = p.rng_key(), a.rng_pos = p.off;
    spans.push_back(a);
  }
  be_.ops().adamw(be_.device().compute_stream(), spans, h);
}

double clip_coef(double norm, double clip) {
  if (clip <= 0 || !std::isfinite(norm) || norm <= clip) return 1.0;
  return clip / (norm + 1e-6);
}
}  // namespace st
