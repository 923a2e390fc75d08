// Attention path per shape and what ran (see attn_path.hpp).
#include "kernels/cuda/host/attn_path.hpp"

namespace st::cuda_host {

AttnPathPolicy::Decision AttnPathPolicy::decide(const AttnShape& s, bool backward) {
  std::lock_guard<std::mutex> g(mu_);
  const State& st = shapes_[s];
  if (st.ok) return Decision::UseCudnn;
  if (st.settled || backward) return Decision::UseBlock;
  return Decision::TryCudnn;
}

void AttnPathPolicy::refused(const AttnShape& s, const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  State& st = shapes_[s];
  st.ok = false;
  st.settled = true;
  st.why = why;
}

void AttnPathPolicy::plan_ok(const AttnShape& s) {
  std::lock_guard<std::mutex> g(mu_);
  State& st = shapes_[s];
  st.ok = true;
  st.why.clear();
}

bool AttnPathPolicy::plan_failed(const AttnShape& s, const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  State& st = shapes_[s];
  st.ok = false;
  st.why = why;
  if (++st.failures >= kMaxTries) st.settled = true;
  return st.settled;
}

void AttnPathPolicy::ran(AttnPath p, bool backward) {
  std::lock_guard<std::mutex> g(mu_);
  for (AttnCounts* c : {&total_, &since_take_}) {
    int64_t& n = p == AttnPath::Cudnn   ? (backward ? c->cudnn_bwd : c->cudnn_fwd)
                 : p == AttnPath::Block ? (backward ? c->block_bwd : c->block_fwd)
                                        : c->chosen_bwd;  // only the backward is chosen
    ++n;
  }
}

AttnCounts AttnPathPolicy::counts() const {
  std::lock_guard<std::mutex> g(mu_);
  return total_;
}

AttnCounts AttnPathPolicy::take_counts() {
  std::lock_guard<std::mutex> g(mu_);
  AttnCounts c = since_take_;
  since_take_ = {};
  return c;
}

std::string AttnPathPolicy::describe() const {
  std::lock_guard<std::mutex> g(mu_);
  auto n = [](int64_t v) { return std::to_string(v); };
  std::string s = "causal attention calls: cuDNN fwd/bwd " + n(total_.cudnn_fwd) + "/" +
                  n(total_.cudnn_bwd) + ", block kernels fwd/bwd " + n(total_.block_fwd) + "/" +
                  n(total_.block_bwd);
  if (total_.chosen_bwd)
    s += ", block kernels bwd by runtime.attention_backward=deterministic " + n(total_.chosen_bwd);
  std::string off;
  for (const auto& [k, st] : shapes_) {
    if (st.ok || st.why.empty()) continue;
    off += std::string(off.empty() ? "" : "; ") + "B=" + n(k.B) + " T=" + n(k.T) +
           " Hq=" + n(k.Hq) + " Hkv=" + n(k.Hkv) + " hd=" + n(k.hd) +
           (st.settled ? "" : " (plan failed " + n(st.failures) + "x, retried)") + ": " + st.why;
  }
  if (!off.empty()) s += "; not on cuDNN: " + off;
  return s;
}

std::map<std::string, int64_t> attn_path_names(const AttnCounts& c, bool backward) {
  std::map<std::string, int64_t> m;
  const int64_t cudnn = backward ? c.cudnn_bwd : c.cudnn_fwd;
  const int64_t block = backward ? c.block_bwd : c.block_fwd;
  if (cudnn) m["cudnn"] = cudnn;
  if (block) m["block"] = block;
  if (backward && c.chosen_bwd) m["block_chosen"] = c.chosen_bwd;
  return m;
}
}  // namespace st::cuda_host
