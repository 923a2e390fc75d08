// Implementation of engine.hpp (the pipeline schedule runner is in
// engine_pipeline.cpp).
#include "engine/engine.hpp"

#include <algorithm>
#include <cmath>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/span_log.hpp"
#include "core/util.hpp"
#include "parallel/pipeline.hpp"
#include "tensor/interval.hpp"

namespace st {
Engine::Engine(const Config& cfg, Mesh& mesh, Backend& be)
    : cfg_(cfg),
      mesh_(mesh),
      be_(be),
      dev_(be.device()),
      shard_grads_(cfg.parallel.zero_stage >= 2),
      shard_weights_(cfg.parallel.zero_stage >= 3),
      cdt_(parse_float_dtype(cfg.train.precision, "train.precision")) {
  const auto& pc = cfg.parallel;
  // Every device communicator of the run, made here in one order every rank
  // computes alike (backend.hpp): nothing is made lazily later.
  if (pc.pp > 1) make_pp_links();
  std::vector<Communicator*> groups = {&mesh.dpcp(), &mesh.tp(), &mesh.cp()};
  for (auto& l : pp_links_) groups.push_back(l.get());
  used_ = be.make_communicators(groups);
  dpcp_ = used_[0];
  const auto ranges = stage_layers(cfg, mesh.coords().pp);
  std::vector<int64_t> seg_len;
  for (size_t c = 0; c < ranges.size(); ++c) {
    ModelParallel par;
    par.tp = used_[1];
    par.sp = pc.sp;
    par.cp = used_[2];
    par.layer_begin = ranges[c].first;
    par.layer_end = ranges[c].second;
    par.has_embedding = mesh.first_stage() && c == 0;
    par.has_head = mesh.last_stage() && c + 1 == ranges.size();
    ModelOptions mo;
    mo.backend = &be;
    mo.compute = cdt_;
    mo.per_layer_weights = shard_weights_;
    chunks_.push_back(std::make_unique<Model>(cfg.model, cfg.train.seed, par, mo));
    base_.push_back(int(params_.size()));
    for (Param* p : chunks_.back()->params()) params_.push_back(p);
    seg_len.push_back(chunks_.back()->flat_numel());
    const int base = base_.back(), chunk = int(c);
    ModelHooks hooks;
    hooks.grad_ready = [this, base](int i) {
      if (collect_) buckets_->grad_ready(base + i);
    };
    if (shard_grads_) hooks.before_layer = [this, chunk](int l) { before_layer(chunk, l); };
    if (shard_weights_) hooks.after_layer = [this](int l) { gather_->release(l); };
    chunks_.back()->set_hooks(std::move(hooks));
  }
  ckpt_mode_ = parse_act_ckpt(cfg.train.act_ckpt);
  std::vector<FlatParam> fp;
  for (size_t c = 0, i = 0; c < chunks_.size(); ++c)
    for (; i < params_.size() && (c + 1 == chunks_.size() || int(i) < base_[c + 1]); ++i) {
      const Param* p = params_[i];
      fp.push_back({int(c), p->flat_off, p->g.numel(), p->row, p->layer});
    }
  BucketOptions bo;
  bo.bucket_mb = pc.dp_bucket_mb;
  bo.reduce_scatter = shard_grads_;
  // Staged gradients (grad_buckets.hpp) need every bucket complete before the
  // next micro-batch's backward writes it again: one model chunk per stage.
  // Their buckets hold one layer, as ZeRO 3's, so a staging buffer is never
  // bigger than one layer's gradients (or one bucket).
  staged_ = shard_grads_ && !pc.zero_full_grads && pc.num_model_chunks == 1;
  bo.split_groups = shard_weights_ || staged_;
  bo.staged = staged_;
  bo.reduce_dtype = parse_float_dtype(pc.grad_reduce_dtype, "parallel.grad_reduce_dtype");
  buckets_ = std::make_unique<GradBuckets>(fp, seg_len, bo, *dpcp_, be);
  if (staged_) {  // enough staging for every bucket one layer's backward touches
    int most = 0;
    for (size_t i = 0; i < fp.size(); ++i) {
      auto& v = layer_buckets_[{fp[i].seg, fp[i].group}];
      const int b = buckets_->bucket_of(int(i));
      if (std::find(v.begin(), v.end(), b) == v.end()) v.push_back(b);
      most = std::max(most, int(v.size()));
    }
    // parallel.grad_staging_layers layers' worth of buckets.
    buckets_->set_staging(pc.grad_staging_layers * most);
  }
  opt_ = std::make_unique<AdamW>(cfg.optim, be);
  norm_sq_ = Tensor({2}, DType::F64, MemCat::Optim, dev_);
  const bool shard_optim = pc.zero_stage >= 1;
  build_state(shard_optim);
  // Compute weights whole while the masters are sharded: the updated
  // pieces are all-gathered into them after each update.
  regather_ = shard_optim && !shard_weights_ && mesh.dpcp().size() > 1;
  if (shard_grads_)
    for (auto& m : chunks_) m->release_grads();  // staged, or allocated per step (full grads)
  dev_.synchronize();
}

Engine::~Engine() {
  gather_.reset();
  dev_.synchronize();
}

// The table of sharded state (optim/state_table.hpp): the pieces this rank
// updates (whole parameters when the optimizer state is replicated, the ZeRO
// partition's pieces otherwise) and where each one's master, moments,
// compute copy and gradient live. Built once; see engine.hpp.
void Engine::build_state(bool shard_optim) {
  Stream& s = dev_.compute_stream();
  const bool fp32 = cdt_ == DType::F32;
  struct Cut {
    int chunk, param;
    int64_t param_off, len, shard_off;  // shard_off: in the separate master buffer
  };
  std::vector<Cut> cuts;
  auto chunk_of = [&](int i) {
    int c = 0;
    while (c + 1 < int(chunks_.size()) && i >= base_[size_t(c) + 1]) ++c;
    return c;
  };
  int64_t master_n = 0;
  if (shard_optim) {
    for (const ShardPiece& sp : buckets_->pieces())
      cuts.push_back({chunk_of(sp.param), sp.param, sp.param_off, sp.len, sp.shard_off});
    master_n = buckets_->shard_numel();
  } else {  // whole parameters, the chunks' flat layouts one after another
    std::vector<int64_t> seg(chunks_.size() + 1, 0);
    for (size_t c = 0; c < chunks_.size(); ++c) seg[c + 1] = seg[c] + chunks_[c]->flat_numel();
    for (int i = 0; i < int(params_.size()); ++i) {
      const int c = chunk_of(i);
      const Param* p = params_[size_t(i)];
      cuts.push_back({c, i, 0, p->w.numel(), seg[size_t(c)] + p->flat_off});
    }
    master_n = seg.back();
  }
  // A separate fp32 master unless the fp32 compute weights are whole here.
  const bool separate = !fp32 || shard_weights_;
  if (separate) {
    master_ = Tensor({std::max<int64_t>(master_n, 1)}, DType::F32, MemCat::Params, dev_);
    master_.zero();  // the partition's alignment padding
  }
  state_.replicated = !shard_optim;
  state_.replica = mesh_.dpcp().rank();
  state_.replicas = mesh_.dpcp().size();
  state_.tp_rank = mesh_.coords().tp;
  state_.replica_group = dpcp_;
  state_.device = &dev_;
  const size_t es = dtype_size(cdt_);
  for (const Cut& c : cuts) {
    Param* p = params_[size_t(c.param)];
    StatePiece sp;
    sp.name = p->name;
    sp.global_shape = p->global_shape.empty() ? p->g.shape() : p->global_shape;
    sp.block_offset = p->offset.empty() ? std::vector<int64_t>(p->g.shape().size(), 0) : p->offset;
    sp.block_shape = p->g.shape();
    sp.off = c.param_off;
    sp.len = c.len;
    sp.decay = p->decay;
    sp.tp_sharded = p->tp_sharded;
    if (separate) {
      sp.master = master_.data() + c.shard_off;
      std::vector<float> host(be_.computes() ? size_t(c.len) : 0);
      chunks_[size_t(c.chunk)]->init_values(*p, c.param_off / p->row, c.len / p->row, host.data());
      if (!host.empty())
        dev_.copy_from_host(sp.master, host.data(), host.size() * sizeof(float), s);
    } else {
      sp.master = p->w.data() + c.param_off;
    }
    // With sharded weights no compute copy of the piece exists: a layer's
    // gather casts the master just in time (ParamGather).
    if (!fp32 && !shard_weights_)
      sp.compute = static_cast<char*>(p->w.raw()) + size_t(c.param_off) * es;
    sp.compute_t = cdt_;
    // The reduced gradient: the persistent shard when gradients are
    // reduce-scattered, else in place in the chunk's gradient buffer (which
    // never moves then).
    sp.grad = shard_grads_ ? buckets_->shard_grads() + c.shard_off : p->g.data() + c.param_off;
    state_.pieces.push_back(std::move(sp));
  }
  opt_->init(state_);
  if (shard_weights_)
    gather_ = std::make_unique<ParamGather>(*buckets_, *chunks_[0], master_.data(), cdt_);
}

void Engine::after_restore() {
  Stream& s = dev_.compute_stream();
  Ops& ops = be_.ops();
  for (const StatePiece& p : state_.pieces)
    if (p.compute) ops.cast(s, p.master, DType::F32, p.compute, p.compute_t, p.len);
  if (regather_) gather_shards(nullptr);
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
  // same objects on CPU ranks) are those made at construction.
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
  if (staged_) return;  // staging buffers, taken in before_layer
  for (size_t c = 0; c < chunks_.size(); ++c) {
    Model& m = *chunks_[c];
    if (!m.grads_allocated())
      m.allocate_grads();  // zeroed
    else
      m.zero_grad();
    buckets_->set_buffer(int(c), m.grads());
  }
}

// Staged gradients: before a layer's backward (or the head's forward, which
// runs its backward), every bucket holding its parameters gets a staging
// buffer and their gradients are bound to it.
// ZeRO 3: make `layer` resident, then start the gather of the layer the
// model walks to next: l+1 in forward, l-1 in backward (the direction is
// read off the sequence of layers). At either end of the stack the walk turns
// (forward's head is followed by its backward; backward's embedding by the
// next micro-batch's forward, when there is one), so the layer on the other
// side is fetched instead.
void Engine::before_layer(int chunk, int l) {
  if (staged_ && (in_backward_ || l == cfg_.model.n_layers)) {
    auto it = layer_buckets_.find({chunk, l});
    if (it != layer_buckets_.end())
      for (int b : it->second) {
        if (buckets_->staged(b)) continue;
        float* st = buckets_->stage(b);
        for (int i : buckets_->bucket_members(b))
          params_[size_t(i)]->g.rebind(st + buckets_->bucket_pos(i));
      }
  }
  if (!gather_) return;
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

// Micro-batch m of the step from the loader, timed (StepOut::data_s and a
// `data` span on the host track of the trace).
void Engine::load(const DataLoader& loader, long step, int m, MicroBatch& mb, StepOut& o) {
  const double t0 = wall_time(), h0 = spans::on() ? spans::epoch_now() : 0.0;
  loader.get(step, m, mb);
  o.data_s += wall_time() - t0;
  if (spans::on()) spans::add({"data", "host", h0, spans::epoch_now(), m});
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
      load(loader, step, m, mb, o);
      // Reductions start during the last backward, or every one when staged.
      collect_ = staged_ || m == accum - 1;
      more_micro_ = m + 1 < accum;
      model.stage_forward(m, mb.tokens.data(), nullptr, mb.targets.data(), mb.B, mb.T, ckpt_mode_,
                          scale, nullptr);
      in_backward_ = true;
      model.stage_backward(m, nullptr, scale, nullptr);
      in_backward_ = false;
    }
  } else {
    t_p2p = run_pipeline(step, loader, o);
  }
  collect_ = false;
  if (gather_) gather_->drain();  // before the shard is updated
  StreamInterval tail(dev_);
  tail.begin(s);
  bk.finish();
  tail.end(s);
  if (shard_grads_ && !staged_)
    for (auto& m : chunks_) m->release_grads();  // freed in stream order, after the wait

  // Global gradient norm: [tp-sharded, replicated] sums of squares, each
  // element counted once over dp x cp (ZeRO shards), tp and pp.
  std::vector<F32Span> spans;
  for (const StatePiece& p : state_.pieces) spans.push_back({p.grad, p.len, p.tp_sharded ? 0 : 1});
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
  if (!state_.replicated) mesh_.dpcp().all_reduce_sum(sq, 2);
  if (mesh_.dims().tp > 1) mesh_.tp().all_reduce_sum(sq, 1);
  double total = sq[0] + sq[1];
  if (mesh_.dims().pp > 1) mesh_.pp().all_reduce_sum(&total, 1);
  o.exposed_s += wall_time() - t0;
  o.grad_norm = std::sqrt(total);
  o.finite = std::isfinite(o.loss) && std::isfinite(o.grad_norm);
  return o;
}

double Engine::gather_shards(double* exposed) {
  Stream& s = dev_.compute_stream();
  StreamInterval iv(dev_);
  iv.begin(s);
  std::vector<void*> bases;
  for (auto& m : chunks_) bases.push_back(m->weights_at(0));
  buckets_->gather_all(bases, cdt_);
  iv.end(s);
  dev_.synchronize();
  const double t = iv.seconds();
  if (exposed) *exposed += t;
  return t;
}

double Engine::apply(long step, double lr, double grad_norm, bool skip, double* exposed_s) {
  Stream& s = dev_.compute_stream();
  StreamInterval iv(dev_);
  iv.begin(s);
  if (!skip) opt_->step(state_, lr, clip_coef(grad_norm, cfg_.optim.grad_clip), step);
  if (regather_ && !skip) gather_shards(exposed_s);
  iv.end(s);
  dev_.synchronize();
  return iv.seconds();
}
}  // namespace st
