// Implementation of engine.hpp (the pipeline schedule runner is in
// engine_pipeline.cpp).
#include "engine/engine.hpp"

#include <cmath>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "parallel/pipeline.hpp"

namespace st {
namespace {
// Seconds between two events recorded around some work on a stream, after
// the stream has been synchronised.
struct Interval {
  std::unique_ptr<Event> a, b;
  explicit Interval(Device& d) : a(d.create_event()), b(d.create_event()) {}
  void begin(Stream& s) { a->record(s); }
  void end(Stream& s) { b->record(s); }
  double seconds() { return b->seconds_since(*a); }
};
}  // namespace

Engine::Engine(const Config& cfg, Mesh& mesh, Backend& be)
    : cfg_(cfg),
      mesh_(mesh),
      be_(be),
      dev_(be.device()),
      zero_(cfg.parallel.zero_stage),
      cdt_(parse_float_dtype(cfg.train.precision, "train.precision")) {
  const auto& pc = cfg.parallel;
  dpcp_ = &be.communicator(mesh.dpcp());
  used_ = {dpcp_, &be.communicator(mesh.tp()), &be.communicator(mesh.cp())};
  const auto ranges =
      stage_layers(cfg.model.n_layers, pc.pp, pc.num_model_chunks, mesh.coords().pp);
  std::vector<int64_t> seg_len;
  for (size_t c = 0; c < ranges.size(); ++c) {
    ModelParallel par;
    par.tp = &be.communicator(mesh.tp());
    par.sp = pc.sp;
    par.cp = &be.communicator(mesh.cp());
    par.layer_begin = ranges[c].first;
    par.layer_end = ranges[c].second;
    par.has_embedding = mesh.first_stage() && c == 0;
    par.has_head = mesh.last_stage() && c + 1 == ranges.size();
    ModelOptions mo;
    mo.backend = &be;
    mo.compute = cdt_;
    mo.per_layer_weights = zero_ >= 3;
    chunks_.push_back(std::make_unique<Model>(cfg.model, cfg.train.seed, par, mo));
    base_.push_back(int(params_.size()));
    for (Param* p : chunks_.back()->params()) params_.push_back(p);
    seg_len.push_back(chunks_.back()->flat_numel());
    const int base = base_.back();
    ModelHooks hooks;
    hooks.grad_ready = [this, base](int i) {
      if (collect_) buckets_->grad_ready(base + i);
    };
    if (zero_ >= 3) {
      hooks.before_layer = [this](int l) { before_layer(l); };
      hooks.after_layer = [this](int l) { gather_->release(l); };
    }
    chunks_.back()->set_hooks(std::move(hooks));
  }
  ckpt_mode_ = parse_act_ckpt(cfg.train.act_ckpt);
  if (pc.pp > 1) make_pp_links();
  std::vector<FlatParam> fp;
  for (size_t c = 0, i = 0; c < chunks_.size(); ++c)
    for (; i < params_.size() && (c + 1 == chunks_.size() || int(i) < base_[c + 1]); ++i) {
      const Param* p = params_[i];
      fp.push_back({int(c), p->flat_off, p->g.numel(), p->row, p->layer});
    }
  BucketOptions bo;
  bo.bucket_mb = pc.dp_bucket_mb;
  bo.reduce_scatter = zero_ >= 2;
  bo.split_groups = zero_ >= 3;
  bo.reduce_dtype = parse_float_dtype(pc.grad_reduce_dtype, "parallel.grad_reduce_dtype");
  buckets_ = std::make_unique<GradBuckets>(fp, seg_len, bo, *dpcp_, be);
  opt_ = std::make_unique<AdamW>(cfg.optim, be);
  norm_sq_ = Tensor({2}, DType::F64, MemCat::Optim, dev_);
  init_masters();
  if (zero_ >= 2)
    for (auto& m : chunks_) m->release_grads();  // allocated per step, freed after the reduction
  dev_.synchronize();
}

Engine::~Engine() {
  gather_.reset();
  dev_.synchronize();
}

// The fp32 master weights and the optimizer slots over them; see engine.hpp.
void Engine::init_masters() {
  Stream& s = dev_.compute_stream();
  const bool fp32 = cdt_ == DType::F32;
  auto upload = [&](float* dst, const std::vector<float>& host) {
    if (!host.empty()) dev_.copy_from_host(dst, host.data(), host.size() * sizeof(float), s);
  };
  auto chunk_of = [&](size_t i) {
    size_t c = 0;
    while (c + 1 < chunks_.size() && int(i) >= base_[c + 1]) ++c;
    return chunks_[c].get();
  };
  if (zero_ == 0) {
    if (!fp32) {
      // A separate fp32 master in the same flat layout as the compute weights.
      int64_t total = 0;
      for (auto& m : chunks_) total += m->flat_numel();
      master_ = Tensor({std::max<int64_t>(total, 1)}, DType::F32, MemCat::Params, dev_);
      master_.zero();
    }
    int64_t seg0 = 0;
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const int end = c + 1 < chunks_.size() ? base_[c + 1] : int(params_.size());
      for (int i = base_[c]; i < end; ++i) {
        Param* p = params_[size_t(i)];
        float* w = fp32 ? p->w.data() : master_.data() + seg0 + p->flat_off;
        if (!fp32) {
          std::vector<float> host(be_.computes() ? size_t(p->w.numel()) : 0);
          chunks_[c]->init_values(*p, 0, p->w.dim(0), host.data());
          upload(w, host);
        }
        opt_->add(p->name, w, p->g.data(), p->w.numel(), p->decay, fp32 ? nullptr : p->w.raw(),
                  cdt_);
      }
      seg0 += chunks_[c]->flat_numel();
    }
    return;
  }
  // ZeRO >= 1: slots over this rank's pieces.
  const GradBuckets& bk = *buckets_;
  const bool separate = !fp32 || zero_ >= 3;
  if (separate) {
    master_ = Tensor({std::max<int64_t>(bk.shard_numel(), 1)}, DType::F32, MemCat::Params, dev_);
    master_.zero();  // parts' alignment padding
  }
  if (zero_ >= 3 && !fp32) {
    cshard_ = Tensor({std::max<int64_t>(bk.shard_numel(), 1)}, cdt_, MemCat::Params, dev_);
    cshard_.zero();
  }
  const size_t es = dtype_size(cdt_);
  for (const ShardPiece& sp : bk.pieces()) {
    Param* p = params_[size_t(sp.param)];
    Model* m = chunk_of(size_t(sp.param));
    float* w = nullptr;
    if (separate) {
      w = master_.data() + sp.shard_off;
      std::vector<float> host(be_.computes() ? size_t(sp.len) : 0);
      m->init_values(*p, sp.param_off / p->row, sp.len / p->row, host.data());
      upload(w, host);
    } else {
      w = p->w.data() + sp.param_off;
    }
    void* wc = nullptr;
    if (zero_ >= 3 && !fp32)
      wc = static_cast<char*>(cshard_.raw()) + size_t(sp.shard_off) * es;
    else if (zero_ < 3 && !fp32)
      wc = static_cast<char*>(p->w.raw()) + size_t(sp.param_off) * es;
    const float* g = zero_ >= 2 ? buckets_->shard_grads() + sp.shard_off : nullptr;
    // ZeRO 1 reads the all-reduced gradient in place; the gradient buffer of
    // a chunk never moves under ZeRO 1.
    if (zero_ == 1) g = p->g.data() + sp.param_off;
    opt_->add(p->name, w, g, sp.len, p->decay, wc, cdt_);
  }
  if (zero_ >= 3) {
    const void* shard = fp32 ? master_.raw() : cshard_.raw();
    if (!fp32) be_.ops().cast(s, master_.raw(), DType::F32, cshard_.raw(), cdt_, bk.shard_numel());
    gather_ = std::make_unique<ParamGather>(*buckets_, *chunks_[0], shard, cdt_);
  }
}

TrainState Engine::train_state() {
  TrainState t{params_,
               opt_.get(),
               &cfg_,
               mesh_.dpcp().rank(),
               mesh_.dpcp().size(),
               zero_,
               mesh_.coords().tp,
               buckets_.get(),
               {},
               &dev_,
               dpcp_};
  if (zero_ == 0)
    for (auto& slot : opt_->slots()) t.master.push_back(slot.w);
  return t;
}

void Engine::after_restore() {
  Stream& s = dev_.compute_stream();
  Ops& ops = be_.ops();
  if (cdt_ != DType::F32)
    for (auto& slot : opt_->slots())
      if (slot.wc) ops.cast(s, slot.w, DType::F32, slot.wc, slot.wc_t, slot.n);
  if (zero_ == 1 || zero_ == 2) gather_shards(nullptr);
  dev_.synchronize();
}

void Engine::begin_step() { dev_.reset_peaks(); }

EngineMemory Engine::memory() const {
  const MemoryStats s = dev_.memory();
  EngineMemory m;
  m.peak_total = s.peak_total;
  m.params = s.cur(MemCat::Params);
  m.grads = s.cur(MemCat::Grads);
  m.optim = s.cur(MemCat::Optim);
  m.activations_peak = s.pk(MemCat::Activations);
  return m;
}

std::vector<Communicator*> Engine::comms() {
  std::vector<Communicator*> out;
  auto add = [&](Communicator* c) {
    for (Communicator* o : out)
      if (o == c) return;
    out.push_back(c);
  };
  // The MPI groups carry the host scalars; the device communicators (the
  // same objects on CPU ranks) are only those already made, so asking for
  // statistics creates no NCCL communicator.
  for (Communicator* g : mesh_.groups()) add(g);
  for (Communicator* c : used_) add(c);
  return out;
}

int64_t Engine::num_params() const {
  int64_t n = 0;
  for (auto& m : chunks_) n += m->num_params();
  return n;
}

void Engine::ensure_grads() {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    Model& m = *chunks_[c];
    if (!m.grads_allocated())
      m.allocate_grads();  // zeroed
    else
      m.zero_grad();
    buckets_->set_buffer(int(c), m.grads());
  }
}

// ZeRO 3: make `layer` resident, then start the gather of the layer the
// model walks to next: l+1 in forward, l-1 in backward (the direction is
// read off the sequence of layers). At either end of the stack the walk turns
// (forward's head is followed by its backward; backward's embedding by the
// next micro-batch's forward, when there is one), so the layer on the other
// side is fetched instead.
void Engine::before_layer(int l) {
  gather_->acquire(l);
  if (l > last_layer_)
    dir_ = 1;
  else if (l < last_layer_)
    dir_ = -1;
  last_layer_ = l;
  if (gather_->has_layer(l + dir_))
    gather_->prefetch(l + dir_);
  else if (dir_ == 1 || more_micro_)
    gather_->prefetch(l - dir_);
}

StepOut Engine::forward_backward(long step, const DataLoader& loader) {
  StepOut o;
  Stream& s = dev_.compute_stream();
  ensure_grads();
  last_layer_ = -2;
  dir_ = 1;
  GradBuckets& bk = *buckets_;
  bk.start();
  const int accum = cfg_.train.grad_accum;
  // d(loss) of each micro-batch: a SUM over dp x cp is then the gradient of
  // the global mean loss.
  const float scale = 1.0f / float(accum * mesh_.dims().dp);
  double t_p2p = 0;
  if (cfg_.parallel.pp == 1) {
    Model& model = *chunks_[0];
    MicroBatch mb;
    for (int m = 0; m < accum; ++m) {
      double td = wall_time();
      loader.get(step, m, mb);
      o.data_s += wall_time() - td;
      collect_ = m == accum - 1;  // reductions start during the last backward
      more_micro_ = m + 1 < accum;
      model.stage_forward(m, mb.tokens.data(), nullptr, mb.targets.data(), mb.B, mb.T, ckpt_mode_,
                          scale, nullptr);
      model.stage_backward(m, nullptr, scale, nullptr);
    }
  } else {
    t_p2p = run_pipeline(step, loader, o);
  }
  collect_ = false;
  if (gather_) gather_->drain();  // before the shard is updated
  Interval tail(dev_);
  tail.begin(s);
  bk.finish();
  tail.end(s);
  if (zero_ >= 2)
    for (auto& m : chunks_) m->release_grads();  // freed in stream order, after the wait

  // Global gradient norm: [tp-sharded, replicated] sums of squares, each
  // element counted once over dp x cp (ZeRO shards), tp and pp.
  std::vector<F32Span> spans;
  if (zero_ == 0) {
    for (Param* p : params_) spans.push_back({p->g.data(), p->g.numel(), p->tp_sharded ? 0 : 1});
  } else {
    const auto& pieces = bk.pieces();
    auto& slots = opt_->slots();
    for (size_t k = 0; k < pieces.size(); ++k)
      spans.push_back(
          {slots[k].g, slots[k].n, params_[size_t(pieces[k].param)]->tp_sharded ? 0 : 1});
  }
  be_.ops().sumsq(s, spans, 2, norm_sq_.as<double>());
  double sq[2] = {0, 0};
  dev_.copy_to_host(sq, norm_sq_.raw(), sizeof sq, s);
  double loss_sum = 0;
  for (auto& m : chunks_) loss_sum += m->take_loss();  // synchronises the stream
  for (auto& m : chunks_) {
    const PhaseTimes pt = m->take_times();
    o.fwd_s += pt.fwd_s;
    o.bwd_s += pt.bwd_s;
  }
  o.exposed_s = tail.seconds() + t_p2p + (gather_ ? gather_->take_wait_seconds() : 0.0);
  o.async_total_s = bk.async_seconds();

  // Global loss: the last stage's micro-batch means summed over dp x cp, / dp,
  // then handed to every stage. Only the reductions count as exposed
  // communication, not the sums of squares computed between them.
  double t0 = wall_time();
  double red[1] = {mesh_.last_stage() ? loss_sum / accum : 0.0};
  mesh_.dpcp().all_reduce_sum(red, 1);
  if (mesh_.dims().pp > 1) mesh_.pp().all_reduce_sum(red, 1);
  o.loss = red[0] / mesh_.dims().dp;
  if (zero_ > 0) mesh_.dpcp().all_reduce_sum(sq, 2);
  if (mesh_.dims().tp > 1) mesh_.tp().all_reduce_sum(sq, 1);
  double total = sq[0] + sq[1];
  if (mesh_.dims().pp > 1) mesh_.pp().all_reduce_sum(&total, 1);
  o.exposed_s += wall_time() - t0;
  o.grad_norm = std::sqrt(total);
  o.finite = std::isfinite(o.loss) && std::isfinite(o.grad_norm);
  return o;
}

double Engine::gather_shards(double* exposed) {
  if (mesh_.dpcp().size() == 1) return 0;
  Stream& s = dev_.compute_stream();
  Interval iv(dev_);
  iv.begin(s);
  std::vector<CommHandle> hs;
  for (int b = 0; b < buckets_->num_buckets(); ++b) {
    Model& m = *chunks_[size_t(buckets_->bucket_segment(b))];
    hs.push_back(buckets_->all_gather_bucket(b, m.weights_at(0), cdt_));
  }
  for (auto& h : hs) h.wait(s);
  iv.end(s);
  dev_.synchronize();
  const double t = iv.seconds();
  if (exposed) *exposed += t;
  return t;
}

double Engine::apply(long step, double lr, double grad_norm, bool skip, double* exposed_s) {
  Stream& s = dev_.compute_stream();
  Interval iv(dev_);
  iv.begin(s);
  if (!skip) opt_->step(lr, clip_coef(grad_norm, cfg_.optim.grad_clip), step);
  if ((zero_ == 1 || zero_ == 2) && !skip) gather_shards(exposed_s);
  iv.end(s);
  dev_.synchronize();
  return iv.seconds();
}
}  // namespace st
