// Implementation of recorded_step.hpp.
#include "plan/recorded_step.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "config/config.hpp"
#include "core/error.hpp"
#include "parallel/stages.hpp"

namespace st::plan {
namespace {

// Everything record_step's result depends on, but the micro-batch count it
// is recorded with: the whole resolved config (a key the engine reads, such
// as parallel.zero_full_grads, can never be left out of it) without
// train.grad_accum, which `micro` replaces.
std::string shape_key(const Config& c, int micro, int stage) {
  Config k = c;
  k.train.grad_accum = 1;
  return config_to_json(k) + " | " + std::to_string(micro) + " | " + std::to_string(stage);
}

}  // namespace

Op kernel_op(const record::KernelCall& k) {
  Op o;
  const auto& d = k.dims;
  auto set = [&](OpKind kind, std::initializer_list<int64_t> s) {
    o.kind = kind;
    int i = 0;
    for (int64_t v : s) o.s[i++] = std::max<int64_t>(1, v);
  };
  using record::Kernel;
  switch (k.kind) {
    case Kernel::Gemm:
      set(OpKind::Gemm, {d[0], d[1], d[2]});
      o.ta = k.trans_a, o.tb = k.trans_b;
      break;
    case Kernel::AttentionFwd:
    case Kernel::AttentionBwd:
      set(k.kind == Kernel::AttentionFwd ? OpKind::AttnFwd : OpKind::AttnBwd,
          {d[0], d[1], d[2], d[3], d[4], 1});
      break;
    case Kernel::AttentionFwdBlock:
    case Kernel::AttentionBwdBlock:
      // A [Tq, Tk] block without the causal half: the causal op of Tq queries
      // over cp = 2 Tk / Tq has its FLOPs (ops.cpp).
      set(k.kind == Kernel::AttentionFwdBlock ? OpKind::AttnFwd : OpKind::AttnBwd,
          {d[0], d[1], d[3], d[4], d[5],
           std::max<int64_t>(1, 2 * d[2] / std::max<int64_t>(1, d[1]))});
      break;
    case Kernel::AttentionLseMerge:
      set(OpKind::Add, {d[0] * d[1] * d[2] * d[3]});
      break;
    case Kernel::RmsnormFwd:
    case Kernel::RmsnormBwd:
      set(k.kind == Kernel::RmsnormFwd ? OpKind::NormFwd : OpKind::NormBwd, {d[0], d[1]});
      break;
    case Kernel::RopeFwd:
    case Kernel::RopeBwd:
      set(k.kind == Kernel::RopeFwd ? OpKind::RopeFwd : OpKind::RopeBwd, {d[0] * d[1], d[2], d[3]});
      break;
    case Kernel::SwigluFwd:
    case Kernel::SwigluBwd:
      set(k.kind == Kernel::SwigluFwd ? OpKind::SwigluFwd : OpKind::SwigluBwd, {d[0]});
      break;
    case Kernel::Add:
      set(OpKind::Add, {d[0]});
      break;
    case Kernel::EmbeddingFwd:
    case Kernel::EmbeddingBwd:
      set(k.kind == Kernel::EmbeddingFwd ? OpKind::EmbedFwd : OpKind::EmbedBwd, {d[0], d[3]});
      break;
    case Kernel::CePartial:
    case Kernel::CeBwd:
      set(k.kind == Kernel::CePartial ? OpKind::CeFwd : OpKind::CeBwd, {d[0], d[1]});
      break;
    case Kernel::Adamw:
      set(OpKind::Adam, {d[1]});
      break;
    case Kernel::Sumsq:
      set(OpKind::Copy, {d[1] / 2});  // reads n: half a copy's traffic
      break;
    case Kernel::Cast:
    case Kernel::Scale:
    case Kernel::CeRescale:
    case Kernel::CeFinish:
    case Kernel::LossAccumulate:
      set(OpKind::Copy, {d.empty() ? 1 : d[0]});  // a pass over n (or rows) elements
      break;
    case Kernel::kCount:
      ST_CHECK(false, "planner: a recorded kernel of unknown kind ", int(k.kind), " ('", k.op,
               "') has no price");
  }
  return o;
}

Op alloc_op(int64_t bytes) {
  Op a;
  a.kind = OpKind::Alloc;
  a.s[0] = std::max<int64_t>(1, bytes / 4);
  return a;
}

Op copy_op(const record::CopyCall& c, bool gpu) {
  Op op;
  op.kind = OpKind::Copy;
  const double es = gpu ? 2 : 4;
  op.s[0] = std::max<int64_t>(
      1, int64_t(double(c.bytes) / es / (c.dir == record::CopyDir::Fill ? 2 : 1)));
  return op;
}

std::vector<Op> step_ops(const Config& cfg) {
  std::vector<Op> out;
  for (int s = 0; s < cfg.parallel.pp; ++s) {
    const auto r = stage_record(cfg, s);
    for (const record::KernelCall& k : r->step.kernels) {
      out.push_back(kernel_op(k));
      if (k.alloc_bytes > 0) out.push_back(alloc_op(k.alloc_bytes));
    }
    for (const record::CopyCall& c : r->step.copies) out.push_back(copy_op(c, false));
  }
  return out;
}

int stand_in_stage(const Config& cfg, int stage) {
  const int P = cfg.parallel.pp, v = cfg.parallel.num_model_chunks;
  if (stage == 0 || stage == P - 1) return stage;
  const std::vector<int> n = pipeline_layer_counts(cfg);
  auto same = [&](int a, int b) {
    for (int c = 0; c < v; ++c)
      if (n[size_t(c * P + a)] != n[size_t(c * P + b)]) return false;
    return true;
  };
  for (int s = 1; s < stage; ++s)
    if (same(s, stage)) return s;
  return stage;
}

int recorded_micro(const Config& cfg) {
  const int M = cfg.train.grad_accum, P = cfg.parallel.pp;
  // At least the first micro-batch, one between and the last. pp > 1: pp
  // covers 1F1B's warm-up (pp - stage - 1 forwards, then a pair); 2 pp the
  // interleaved schedule's ((pp - stage - 1) * 2 + (v - 1) * pp forwards,
  // needing micro % pp == 0).
  const int want = std::max(3, cfg.parallel.num_model_chunks > 1 ? 2 * P : P);
  if (M <= want) return M;
  Config c = cfg;
  c.train.grad_accum = want;
  try {
    validate_config(c);
  } catch (const UsageError&) {
    return M;
  }
  return want;
}

std::shared_ptr<const StageRecord> stage_record(const Config& cfg, int stage, int micro) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const StageRecord>> cache;
  if (micro <= 0) micro = recorded_micro(cfg);
  const std::string key = shape_key(cfg, micro, stage);
  {
    std::lock_guard<std::mutex> g(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  Config c = cfg;
  c.train.grad_accum = micro;
  const auto& p = c.parallel;
  auto r = std::make_shared<StageRecord>();
  r->stage = stage;
  r->micro = micro;
  r->step = record::record_step(
      c, mesh_rank(MeshCoords{stage, 0, 0, 0}, MeshDims{p.pp, p.dp, p.cp, p.tp}));
  std::lock_guard<std::mutex> g(mu);
  if (cache.size() >= 64) cache.clear();  // a plan visits each layout's stages together
  cache.emplace(key, r);
  return r;
}

}  // namespace st::plan
