// Implementation of engine.hpp (the pipeline schedule runner is in
// engine_pipeline.cpp).
#include "engine/engine.hpp"

#include <algorithm>
#include <cmath>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/span_log.hpp"
#include "core/util.hpp"
#include "tensor/interval.hpp"

namespace st {
Engine::Engine(const Config& cfg, Mesh& mesh, Backend& be)
    : cfg_(cfg),
      mesh_(mesh),
      be_(be),
      dev_(be.device()),
      zero_(zero_mode(cfg.parallel, mesh.dpcp().size())),
      cdt_(parse_float_dtype(cfg.train.precision, "train.precision")) {
  const auto& pc = cfg.parallel;
  const DType state_t = parse_float_dtype(cfg.optim.state_dtype, "optim.state_dtype");
  const bool masters_are_compute = cdt_ == state_t;
  if (state_t == DType::BF16 && cdt_ != DType::BF16)
    throw UsageError(
        "optim.state_dtype=bf16 needs bf16 compute weights (the masters are the "
        "compute weights), but train.precision resolved to " +
        std::string(dtype_name(cdt_)) + "; set train.precision=bf16 or optim.state_dtype=fp32");
  // Every device communicator of the run, made here in one order every rank
  // computes alike (backend.hpp): nothing is made lazily later.
  if (pc.pp > 1) make_pp_links();
  std::vector<Communicator*> groups = {&mesh.dpcp(), &mesh.tp(), &mesh.cp()};
  for (auto& l : pp_links_) groups.push_back(l.get());
  const std::vector<Communicator*> made = be.make_communicators(groups);
  comms_.dpcp = made.at(0);
  comms_.tp = made.at(1);
  comms_.cp = made.at(2);
  comms_.pp.assign(made.begin() + 3, made.end());
  dpcp_ = comms_.dpcp;
  const auto ranges = stage_layers(cfg, mesh.coords().pp);
  std::vector<Model*> chunks;
  for (size_t c = 0; c < ranges.size(); ++c) {
    ModelParallel par;
    par.tp = comms_.tp;
    par.sp = pc.sp;
    par.cp = comms_.cp;
    par.layer_begin = ranges[c].first;
    par.layer_end = ranges[c].second;
    par.has_embedding = mesh.first_stage() && c == 0;
    par.has_head = mesh.last_stage() && c + 1 == ranges.size();
    ModelOptions mo;
    mo.backend = &be;
    mo.compute = cdt_;
    mo.per_layer_weights = zero_.shard_weights;
    mo.head_chunk_bytes = int64_t(cfg.runtime.head_chunk_mb) << 20;
    // The seeded initial values are drawn once: by the model where its
    // compute weights are the masters, else into the masters (ZeroSync,
    // this rank's shard under ZeRO 1-3), whose cast and gather fill the
    // compute weights below.
    mo.init_weights = masters_are_compute;
    chunks_.push_back(std::make_unique<Model>(cfg.model, cfg.train.seed, par, mo));
    chunks.push_back(chunks_.back().get());
    base_.push_back(int(params_.size()));
    for (Param* p : chunks_.back()->params()) params_.push_back(p);
    // The ZeRO verbs are the model's layer hooks, whatever the stage.
    const int base = base_.back(), chunk = int(c);
    ModelHooks hooks;
    hooks.grad_ready = [this, base](int i) { sync_->grad_ready(base + i); };
    // The embedding (layer -1) and the head and loss (layer n_layers) are
    // the stage's own work outside its layers: a range of the backend's
    // inside the schedule op's (engine_pipeline.cpp), so the recording tags
    // them (the planner reports the imbalance they cause apart).
    const int L = cfg.model.n_layers;
    hooks.before_layer = [this, chunk, L](int l) {
      if (l < 0 || l >= L)
        if (auto* r = be_.ranges()) r->push(l < 0 ? "embedding" : "head and loss");
      sync_->finish_param_sync(chunk, l);
      progress_pp_sends();
    };
    hooks.after_layer = [this, L](int l) {
      sync_->release_params(l);
      if (l < 0 || l >= L)
        if (auto* r = be_.ranges()) r->pop();
    };
    chunks_.back()->set_hooks(std::move(hooks));
  }
  ckpt_mode_ = parse_act_ckpt(cfg.train.act_ckpt);
  sync_ = std::make_unique<ZeroSync>(zero_, chunks, pc, *dpcp_, mesh.dpcp(), be, cdt_, state_t);
  opt_ = std::make_unique<AdamW>(cfg.optim, be, cfg.train.seed);
  norm_sq_ = Tensor({2}, DType::F64, MemCat::Optim, dev_);
  sync_->build_state(state_, mesh.coords().tp);
  opt_->init(state_);
  sync_->free_full_grads();
  if (!masters_are_compute) sync_->refresh_params();  // compute weights from the masters
  dev_.synchronize();
}

Engine::~Engine() {
  sync_.reset();
  dev_.synchronize();
}

void Engine::after_restore() {
  sync_->refresh_params();
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
  for (Communicator* c : {comms_.dpcp, comms_.tp, comms_.cp}) add(c);
  for (Communicator* c : comms_.pp) add(c);
  return out;
}

int64_t Engine::num_params() const {
  int64_t n = 0;
  for (auto& m : chunks_) n += m->num_params();
  return n;
}

// Micro-batch m of the step from the loader, timed (StepOut::t.data and a
// `data` span on the host track of the trace).
void Engine::load(const DataLoader& loader, long step, int m, MicroBatch& mb, StepOut& o) {
  const double t0 = wall_time(), h0 = spans::on() ? spans::epoch_now() : 0.0;
  loader.get(step, m, mb);
  o.t.data += wall_time() - t0;
  if (spans::on()) spans::add({"data", "host", h0, spans::epoch_now(), m});
}

StepOut Engine::forward_backward(long step, const DataLoader& loader) {
  StepOut o;
  Stream& s = dev_.compute_stream();
  const int accum = cfg_.train.grad_accum;
  sync_->start_step();
  const double t_p2p = run_schedule(step, loader, o);
  StreamInterval tail(dev_);
  sync_->finish_grad_sync(tail);

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
    const StepMeasured pt = m->take_times();
    o.t.fwd += pt.fwd;
    o.t.bwd += pt.bwd;
  }
  // ZeRO 3's waits for parameter gathers happen inside the passes: exposed
  // communication, not compute (each second of the step in one part,
  // core/step_parts.hpp).
  const StepMeasured pw = sync_->take_param_waits();
  o.t.fwd = std::max(0.0, o.t.fwd - pw.fwd);
  o.t.bwd = std::max(0.0, o.t.bwd - pw.bwd);
  o.t.comm_exposed = tail.seconds() + t_p2p + pw.fwd + pw.bwd;
  o.async_total_s = sync_->async_seconds();

  // Global loss: the last stage's micro-batch means summed over dp x cp, / dp,
  // then handed to every stage. Only the reductions count as exposed
  // communication, not the sums of squares computed between them.
  double t0 = wall_time();
  double red[1] = {mesh_.last_stage() ? loss_sum / accum : 0.0};
  mesh_.dpcp().all_reduce_sum(red, 1);
  if (mesh_.dims().pp > 1) mesh_.pp().all_reduce_sum(red, 1);
  o.loss = red[0] / mesh_.dims().dp;
  sync_->sum_norm_sq(sq, 2);
  if (mesh_.dims().tp > 1) mesh_.tp().all_reduce_sum(sq, 1);
  double total = sq[0] + sq[1];
  if (mesh_.dims().pp > 1) mesh_.pp().all_reduce_sum(&total, 1);
  o.t.comm_exposed += wall_time() - t0;
  o.grad_norm = std::sqrt(total);
  o.finite = std::isfinite(o.loss) && std::isfinite(o.grad_norm);
  return o;
}

double Engine::apply(long step, double lr, double grad_norm, bool skip, double* exposed_s) {
  Stream& s = dev_.compute_stream();
  StreamInterval iv(dev_);
  double gather_wait = 0;
  iv.begin(s);
  if (!skip) {
    opt_->step(state_, lr, clip_coef(grad_norm, cfg_.optim.grad_clip), step);
    sync_->gather_params(&gather_wait);
  }
  iv.end(s);
  dev_.synchronize();
  // The wait for ZeRO's gathers is exposed communication, not optimizer
  // time: each second of the step in one part (core/step_parts.hpp).
  if (exposed_s) *exposed_s += gather_wait;
  return std::max(0.0, iv.seconds() - gather_wait);
}
}  // namespace st
