// Implementation of step_parts.hpp: the one rule that splits a step.
#include "core/step_parts.hpp"

#include <algorithm>

namespace st {

StepMeasured& StepMeasured::operator+=(const StepMeasured& o) {
  step += o.step;
  data += o.data;
  fwd += o.fwd;
  bwd += o.bwd;
  optim += o.optim;
  comm_exposed += o.comm_exposed;
  ckpt_stall += o.ckpt_stall;
  inline_waits += o.inline_waits;
  return *this;
}

StepParts split_step(const StepMeasured& m) {
  // The tp and cp waits happen inside the forward and backward: exposed
  // communication, not compute (at most all of the compute).
  const double in_compute = std::min(m.fwd + m.bwd, m.inline_waits);
  StepParts p{};
  p[ix(StepPart::Data)] = m.data;
  p[ix(StepPart::Compute)] = m.fwd + m.bwd - in_compute;
  p[ix(StepPart::Optimizer)] = m.optim;
  p[ix(StepPart::Comm)] = m.comm_exposed + in_compute;
  p[ix(StepPart::CkptStall)] = m.ckpt_stall;
  double known = 0;
  for (StepPart k : kAllStepParts)
    if (k != StepPart::Other) known += p[ix(k)];
  p[ix(StepPart::Other)] = m.step - known;
  return p;
}

StepParts shares_of(const StepParts& s, double total) {
  StepParts out{};
  if (!(total > 0)) return out;
  for (size_t k = 0; k < s.size(); ++k) out[k] = s[k] / total;
  return out;
}

}  // namespace st
