// Implementation of optim.hpp: AdamW (decoupled weight decay, bias
// correction as in PyTorch's torch.optim.AdamW) and LR schedules.
#include "optim/optim.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace st {

Schedule parse_schedule(const std::string& s) {
  if (s == "constant") return Schedule::Constant;
  if (s == "linear") return Schedule::Linear;
  if (s == "cosine") return Schedule::Cosine;
  throw UsageError("optim.schedule: '" + s + "' is not valid; choose constant, linear or cosine");
}

double lr_at(const OptimCfg& o, long step, long total) {
  const double peak = o.lr;
  const double floor = o.lr * o.min_lr_ratio;
  if (o.warmup_steps > 0 && step <= o.warmup_steps) return peak * double(step) / o.warmup_steps;
  Schedule s = parse_schedule(o.schedule);
  if (s == Schedule::Constant) return peak;
  long decay_steps = std::max<long>(1, total - o.warmup_steps);
  double frac = std::clamp(double(step - o.warmup_steps) / double(decay_steps), 0.0, 1.0);
  if (s == Schedule::Linear) return peak + (floor - peak) * frac;
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * frac));
}

void AdamW::add(const std::string& name, float* w, const float* g, int64_t n, bool decay) {
  OptimSlot s;
  s.name = name;
  s.w = w;
  s.g = g;
  s.n = n;
  s.decay = decay;
  s.m = Tensor({n}, MemCat::Optim);
  s.v = Tensor({n}, MemCat::Optim);
  slots_.push_back(std::move(s));
}

void AdamW::step(double lr, double grad_scale, long t) {
  const float b1 = float(cfg_.beta1), b2 = float(cfg_.beta2), eps = float(cfg_.eps);
  const double bc1 = 1.0 - std::pow(cfg_.beta1, double(t));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, double(t));
  const float step_size = float(lr / bc1);
  const float bc2_sqrt = float(std::sqrt(bc2));
  const float gs = float(grad_scale);
  for (auto& s : slots_) {
    const float wd = s.decay ? float(lr * cfg_.weight_decay) : 0.0f;
    float* w = s.w;
    const float* g = s.g;
    float* m = s.m.data();
    float* v = s.v.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < s.n; ++i) {
      float gi = g[i] * gs;
      w[i] -= wd * w[i];
      m[i] = b1 * m[i] + (1.0f - b1) * gi;
      v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
      float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
      w[i] -= step_size * m[i] / denom;
    }
  }
}

int64_t AdamW::state_bytes() const {
  int64_t b = 0;
  for (auto& s : slots_) b += int64_t(s.m.bytes() + s.v.bytes());
  return b;
}

double sum_squares(const float* x, int64_t n) {
  double acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static)
  for (int64_t i = 0; i < n; ++i) acc += double(x[i]) * double(x[i]);
  return acc;
}

double clip_coef(double norm, double clip) {
  if (clip <= 0 || !std::isfinite(norm) || norm <= clip) return 1.0;
  return clip / (norm + 1e-6);
}
}  // namespace st
