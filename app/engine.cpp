// Implementation of engine.hpp.
#include "engine.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/util.hpp"

namespace st {

void check_supported_layout(const Config& cfg) {
  const auto& p = cfg.parallel;
  auto no = [](const std::string& knob, int v, const std::string& valid) {
    throw UsageError(knob + "=" + std::to_string(v) +
                     " is not supported by this build yet; valid: " + valid);
  };
  if (p.tp != 1)
    no("parallel.tp", p.tp, "1 (tensor parallelism lands with the model's tp support)");
  if (p.sp) throw UsageError("parallel.sp=true is not supported by this build yet; valid: false");
  if (p.cp != 1) no("parallel.cp", p.cp, "1 (context parallelism lands with ring attention)");
  if (p.pp != 1) no("parallel.pp", p.pp, "1 (pipeline schedules land with the stage API)");
  if (p.zero_stage > 2)
    no("parallel.zero_stage", p.zero_stage, "0|1|2 (ZeRO-3 needs the model's layer hooks)");
}

Engine::Engine(const Config& cfg, Mesh& mesh)
    : cfg_(cfg), mesh_(mesh), zero_(cfg.parallel.zero_stage) {
  model_ = std::make_unique<Model>(cfg.model, cfg.train.seed);
  params_ = model_->params();
  ckpt_mode_ = parse_act_ckpt(cfg.train.act_ckpt);
  std::vector<GradView> views;
  for (Param* p : params_) views.push_back({p->g.data(), p->g.numel(), 0});
  BucketOptions bo;
  bo.bucket_mb = cfg.parallel.dp_bucket_mb;
  bo.reduce_scatter = zero_ >= 2;
  bo.scale = 1.0f / float(mesh.dims().dp);  // SUM over dp x cp, / dp: the global mean
  buckets_ = std::make_unique<GradBuckets>(views, bo, &mesh.dpcp());
  opt_ = std::make_unique<AdamW>(cfg.optim);
  if (zero_ == 0) {
    for (Param* p : params_) opt_->add(p->name, p->w.data(), p->g.data(), p->w.numel(), p->decay);
  } else {
    // One optimizer slot per piece of this rank's shard.
    for (const ShardPiece& s : buckets_->pieces()) {
      Param* p = params_[size_t(s.param)];
      const float* g =
          zero_ >= 2 ? buckets_->shard_grads() + s.shard_off : p->g.data() + s.param_off;
      opt_->add(p->name, p->w.data() + s.param_off, g, s.len, p->decay);
    }
  }
  if (zero_ >= 2)
    for (Param* p : params_) p->g.release();  // allocated per step, freed after the reduction
}

void Engine::ensure_grads() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Param* p = params_[i];
    if (!p->g.allocated()) {
      p->g.allocate();
      buckets_->set_grad(int(i), p->g.data());
    }
  }
}

StepOut Engine::forward_backward(long step, const DataLoader& loader) {
  StepOut o;
  ensure_grads();
  model_->zero_grad();
  GradBuckets& bk = *buckets_;
  MicroBatch mb;
  double loss_sum = 0;
  const int accum = cfg_.train.grad_accum;
  for (int m = 0; m < accum; ++m) {
    double td = wall_time();
    loader.get(step, m, mb);
    o.data_s += wall_time() - td;
    PhaseTimes pt;
    loss_sum += model_->forward_backward(mb.tokens.data(), mb.targets.data(), mb.B, mb.T,
                                         1.0f / float(accum), ckpt_mode_, &pt);
    o.fwd_s += pt.fwd_s;
    o.bwd_s += pt.bwd_s;
  }
  o.exposed_s = bk.reduce_all();
  o.async_total_s = bk.async_seconds();
  if (zero_ >= 2)
    for (Param* p : params_) p->g.release();

  // Global loss: micro-batch means summed over dp x cp, / dp.
  double red[1] = {loss_sum / accum};
  double t0 = wall_time();
  mesh_.dpcp().all_reduce_sum(red, 1);
  o.loss = red[0] / mesh_.dims().dp;
  // Global gradient norm: over the shard (ZeRO) or the whole replica.
  double sq = 0;
  if (zero_ == 0) {
    for (Param* p : params_) sq += sum_squares(p->g.data(), p->g.numel());
  } else {
    for (auto& s : opt_->slots()) sq += sum_squares(s.g, s.n);
    mesh_.dpcp().all_reduce_sum(&sq, 1);
  }
  o.exposed_s += wall_time() - t0;
  o.grad_norm = std::sqrt(sq);
  o.finite = std::isfinite(o.loss) && std::isfinite(o.grad_norm);
  return o;
}

double Engine::apply(long step, double lr, double grad_norm, bool skip, double* exposed_s) {
  const double t0 = wall_time();
  if (!skip) opt_->step(lr, clip_coef(grad_norm, cfg_.optim.grad_clip), step);
  if (zero_ >= 1 && !skip && mesh_.dpcp().size() > 1) {
    // Gather the updated shards back into every rank's parameters.
    const double tg = wall_time();
    std::vector<const float*> src;
    std::vector<float*> dst;
    for (Param* p : params_) {
      src.push_back(p->w.data());
      dst.push_back(p->w.data());
    }
    Tensor shard({std::max<int64_t>(1, buckets_->shard_numel())}, MemCat::Comm);
    buckets_->pack_shard(src, shard.data());
    for (int b = 0; b < buckets_->num_buckets(); ++b)
      buckets_->all_gather_bucket(b, shard.data(), dst);
    if (exposed_s) *exposed_s += wall_time() - tg;
  }
  return wall_time() - t0;
}
}  // namespace st
