// Implementation of engine.hpp.
#include "engine.hpp"

#include <cmath>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/util.hpp"

namespace st {

Engine::Engine(const Config& cfg, Mesh& mesh)
    : cfg_(cfg), mesh_(mesh), zero_(cfg.parallel.zero_stage) {
  const auto& pc = cfg.parallel;
  const auto ranges =
      stage_layers(cfg.model.n_layers, pc.pp, pc.num_model_chunks, mesh.coords().pp);
  for (size_t c = 0; c < ranges.size(); ++c) {
    ModelParallel par;
    par.tp = &mesh.tp();
    par.sp = pc.sp;
    par.cp = &mesh.cp();
    par.layer_begin = ranges[c].first;
    par.layer_end = ranges[c].second;
    par.has_embedding = mesh.first_stage() && c == 0;
    par.has_head = mesh.last_stage() && c + 1 == ranges.size();
    chunks_.push_back(std::make_unique<Model>(cfg.model, cfg.train.seed, par));
    base_.push_back(int(params_.size()));
    for (Param* p : chunks_.back()->params()) params_.push_back(p);
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
  std::vector<GradView> views;
  for (Param* p : params_) {
    // Shard cuts fall on rows: a piece is then a rectangle of the global
    // tensor, whatever dims tensor parallelism splits (checkpoints).
    const auto& sh = p->w.shape();
    views.push_back(
        {p->g.data(), p->g.numel(), p->layer, sh.size() > 1 ? p->w.numel() / sh[0] : 1});
  }
  BucketOptions bo;
  bo.bucket_mb = pc.dp_bucket_mb;
  bo.reduce_scatter = zero_ >= 2;
  bo.split_groups = zero_ >= 3;
  bo.scale = 1.0f / float(mesh.dims().dp);  // SUM over dp x cp, / dp: the global mean
  buckets_ = std::make_unique<GradBuckets>(views, bo, &mesh.dpcp());
  opt_ = std::make_unique<AdamW>(cfg.optim);
  if (zero_ >= 3) {
    // Keep only this rank's shard of the initial weights; layers are
    // gathered on use.
    master_ = Tensor({std::max<int64_t>(1, buckets_->shard_numel())}, MemCat::Params);
    std::vector<const float*> src;
    std::vector<Tensor*> ws;
    for (Param* p : params_) {
      src.push_back(p->w.data());
      ws.push_back(&p->w);
    }
    buckets_->pack_shard(src, master_.data());
    gather_ = std::make_unique<ParamGather>(*buckets_, mesh.dpcp(), ws, master_.data());
    for (Param* p : params_) p->w.release();
  }
  if (zero_ == 0) {
    for (Param* p : params_) opt_->add(p->name, p->w.data(), p->g.data(), p->w.numel(), p->decay);
  } else {
    // One optimizer slot per piece of this rank's shard.
    for (const ShardPiece& s : buckets_->pieces()) {
      Param* p = params_[size_t(s.param)];
      const float* g =
          zero_ >= 2 ? buckets_->shard_grads() + s.shard_off : p->g.data() + s.param_off;
      float* w = zero_ >= 3 ? master_.data() + s.shard_off : p->w.data() + s.param_off;
      opt_->add(p->name, w, g, s.len, p->decay);
    }
  }
  if (zero_ >= 2)
    for (Param* p : params_) p->g.release();  // allocated per step, freed after the reduction
}

std::unique_ptr<StepEngine> make_cpu_engine(const Config& cfg, Mesh& mesh) {
  return std::make_unique<Engine>(cfg, mesh);
}

TrainState Engine::train_state() {
  return TrainState{params_,          opt_.get(),        &cfg_,          mesh_.dpcp().rank(),
                    mesh_.dpcp().size(), zero_,          mesh_.coords().tp, buckets_.get(),
                    master_shard()};
}

void Engine::begin_step() { MemStats::reset_peaks(); }

EngineMemory Engine::memory() const {
  EngineMemory m;
  m.peak_total = MemStats::peak_total();
  m.params = MemStats::current(MemCat::Params);
  m.grads = MemStats::current(MemCat::Grads);
  m.optim = MemStats::current(MemCat::Optim);
  m.activations_peak = MemStats::peak(MemCat::Activations);
  return m;
}

int64_t Engine::num_params() const {
  int64_t n = 0;
  for (auto& m : chunks_) n += m->num_params();
  return n;
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

// ZeRO 3: make `layer` resident, then start the gather of the layer the
// model walks to next: l+1 in forward, l-1 in backward (the direction is
// read off the sequence of layers). At either end of the stack the walk turns
// (forward's head is followed by its backward; backward's embedding by the
// next micro-batch's forward, when there is one), so the layer on the other
// side is fetched instead.
void Engine::before_layer(int l) {
  gather_wait_s_ += gather_->acquire(l);
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
  ensure_grads();
  gather_wait_s_ = 0;
  last_layer_ = -2;
  dir_ = 1;
  for (auto& m : chunks_) m->zero_grad();
  GradBuckets& bk = *buckets_;
  bk.start();
  const int accum = cfg_.train.grad_accum;
  double loss_sum = 0, t_p2p = 0;
  if (cfg_.parallel.pp == 1) {
    MicroBatch mb;
    for (int m = 0; m < accum; ++m) {
      double td = wall_time();
      loader.get(step, m, mb);
      o.data_s += wall_time() - td;
      PhaseTimes pt;
      collect_ = m == accum - 1;  // reductions start during the last backward
      more_micro_ = m + 1 < accum;
      loss_sum += chunks_[0]->forward_backward(mb.tokens.data(), mb.targets.data(), mb.B, mb.T,
                                               1.0f / float(accum), ckpt_mode_, &pt);
      o.fwd_s += pt.fwd_s;
      o.bwd_s += pt.bwd_s;
    }
  } else {
    t_p2p = run_pipeline(step, loader, o);
    loss_sum = o.loss;
  }
  collect_ = false;
  if (gather_) gather_wait_s_ += gather_->drain();  // before the shard is updated
  o.exposed_s = bk.finish() + t_p2p + gather_wait_s_;
  o.async_total_s = bk.async_seconds();
  if (zero_ >= 2)
    for (Param* p : params_) p->g.release();

  // Global loss: the last stage's micro-batch means summed over dp x cp, / dp,
  // then handed to every stage.
  // Only the reductions count as exposed communication, not the sums of
  // squares computed between them.
  double t_red = 0, t0 = wall_time();
  double red[1] = {mesh_.last_stage() ? loss_sum / accum : 0.0};
  mesh_.dpcp().all_reduce_sum(red, 1);
  if (mesh_.dims().pp > 1) mesh_.pp().all_reduce_sum(red, 1);
  t_red += wall_time() - t0;
  o.loss = red[0] / mesh_.dims().dp;
  // Global gradient norm: [tp-sharded, replicated] sums of squares, each
  // element counted once over dp x cp (ZeRO shards), tp and pp.
  double sq[2] = {0, 0};
  if (zero_ == 0) {
    for (Param* p : params_) sq[p->tp_sharded ? 0 : 1] += sum_squares(p->g.data(), p->g.numel());
  } else {
    const auto& pieces = bk.pieces();
    auto& slots = opt_->slots();
    for (size_t k = 0; k < pieces.size(); ++k)
      sq[params_[size_t(pieces[k].param)]->tp_sharded ? 0 : 1] +=
          sum_squares(slots[k].g, slots[k].n);
  }
  t0 = wall_time();
  if (zero_ > 0) mesh_.dpcp().all_reduce_sum(sq, 2);
  if (mesh_.dims().tp > 1) mesh_.tp().all_reduce_sum(sq, 1);
  double total = sq[0] + sq[1];
  if (mesh_.dims().pp > 1) mesh_.pp().all_reduce_sum(&total, 1);
  o.exposed_s += t_red + (wall_time() - t0);
  o.grad_norm = std::sqrt(total);
  o.finite = std::isfinite(o.loss) && std::isfinite(o.grad_norm);
  return o;
}

// Runs this stage's 1F1B or interleaved schedule. Boundary tensors go to the
// neighbouring virtual stage (chunk c of stage s is virtual stage c*pp + s)
// with non-blocking sends (kept alive until the step's end) and blocking
// receives. Returns the seconds spent waiting in receives and sends.
double Engine::run_pipeline(long step, const DataLoader& loader, StepOut& o) {
  const int P = mesh_.dims().pp, s = mesh_.coords().pp, v = int(chunks_.size());
  const int M = cfg_.train.grad_accum;
  MpiCommunicator& pp = mesh_.pp_mpi();
  const int prev = (s + P - 1) % P, next = (s + 1) % P;
  auto tag = [&](int m, int vs, int dir) { return (m * P * v + vs) * 2 + dir; };
  struct Pending {
    MPI_Request req;
    std::vector<float> buf;
    double t0;
  };
  std::vector<Pending> sends;
  auto isend = [&](std::vector<float>&& buf, int peer, int t) {
    sends.push_back({MPI_REQUEST_NULL, std::move(buf), wall_time()});
    Pending& p = sends.back();
    ST_MPI_CHECK(MPI_Isend(p.buf.data(), int(p.buf.size()), MPI_FLOAT, peer, t, pp.mpi(), &p.req));
  };
  double waited = 0;
  // In-flight outputs' receive buffers: x_in per (micro, chunk).
  std::vector<std::vector<float>> x_in(size_t(M * v)), x_out(size_t(M * v));
  MicroBatch mb;
  const float scale = 1.0f / float(M);
  double loss_sum = 0;
  for (const PipeOp& op : pipeline_schedule(P, v, M, s)) {
    Model& model = *chunks_[size_t(op.chunk)];
    const int vs = op.chunk * P + s;
    const bool first = vs == 0, last = vs == P * v - 1;
    double td = wall_time();
    loader.get(step, op.micro, mb);
    o.data_s += wall_time() - td;
    const size_t slot = size_t(op.micro * v + op.chunk);
    PhaseTimes pt;
    if (op.forward) {
      std::vector<float>& in = x_in[slot];
      if (!first) {
        in.resize(size_t(model.boundary_elems(mb.B, mb.T)));
        const double t = wall_time();
        pp.recv(in.data(), int64_t(in.size()), prev, tag(op.micro, vs - 1, 0));
        waited += wall_time() - t;
      }
      std::vector<float> out;
      const float l = model.stage_forward(op.micro, mb.tokens.data(), first ? nullptr : in.data(),
                                          mb.targets.data(), mb.B, mb.T, ckpt_mode_, &out, &pt);
      if (last)
        loss_sum += l;
      else
        isend(std::move(out), next, tag(op.micro, vs, 0));
      std::vector<float>().swap(in);
    } else {
      std::vector<float> dy;
      if (!last) {
        dy.resize(size_t(model.boundary_elems(mb.B, mb.T)));
        const double t = wall_time();
        pp.recv(dy.data(), int64_t(dy.size()), next, tag(op.micro, vs, 1));
        waited += wall_time() - t;
      }
      std::vector<float> dx;
      collect_ = op.micro == M - 1;  // this chunk's last backward
      model.stage_backward(op.micro, last ? nullptr : dy.data(), scale, first ? nullptr : &dx, &pt);
      collect_ = false;
      if (!first) isend(std::move(dx), prev, tag(op.micro, vs - 1, 1));
    }
    o.fwd_s += pt.fwd_s;
    o.bwd_s += pt.bwd_s;
    for (auto& p : sends)  // let sends progress
      if (p.req != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Test(&p.req, &done, MPI_STATUS_IGNORE);
        if (done)
          mesh_.pp().add_stat(CollKind::SendRecv, int64_t(p.buf.size()) * 4, wall_time() - p.t0);
      }
  }
  const double t = wall_time();
  for (auto& p : sends)
    if (p.req != MPI_REQUEST_NULL) {
      pp.wait_request(&p.req, "pipeline send");
      mesh_.pp().add_stat(CollKind::SendRecv, int64_t(p.buf.size()) * 4, wall_time() - p.t0);
    }
  waited += wall_time() - t;
  o.loss = loss_sum;
  return waited;
}

double Engine::apply(long step, double lr, double grad_norm, bool skip, double* exposed_s) {
  const double t0 = wall_time();
  if (!skip) opt_->step(lr, clip_coef(grad_norm, cfg_.optim.grad_clip), step);
  if (zero_ >= 1 && zero_ <= 2 && !skip && mesh_.dpcp().size() > 1) {
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
