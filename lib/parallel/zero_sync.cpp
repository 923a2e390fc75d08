// Implementation of zero_sync.hpp: every decision that depends on the ZeRO
// stage reads ZeroMode here, so the engine has none.
#include "parallel/zero_sync.hpp"

#include <algorithm>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "model/model.hpp"

namespace st {

ZeroMode zero_mode(const ParallelCfg& pc, int replicas) {
  ZeroMode z;
  z.shard_optim = pc.zero_stage >= 1;
  z.shard_grads = pc.zero_stage >= 2;
  z.shard_weights = pc.zero_stage >= 3;
  // Staged gradients need every bucket complete before the next
  // micro-batch's backward writes it again: one model chunk per stage.
  z.staged = z.shard_grads && !pc.zero_full_grads && pc.num_model_chunks == 1;
  // Compute weights whole while the masters are sharded.
  z.regather = z.shard_optim && !z.shard_weights && replicas > 1;
  return z;
}

ZeroSync::ZeroSync(const ZeroMode& mode, std::vector<Model*> chunks, const ParallelCfg& pc,
                   Communicator& group, HostGroup& host_group, Backend& be, DType compute,
                   DType state)
    : mode_(mode),
      chunks_(std::move(chunks)),
      group_(group),
      host_group_(host_group),
      be_(be),
      cdt_(compute),
      state_t_(state) {
  ST_CHECK(!chunks_.empty(), "ZeRO: no model chunk");
  ST_CHECK(state_t_ == DType::F32 || (state_t_ == DType::BF16 && cdt_ == DType::BF16),
           "ZeRO: ", dtype_name(state_t_), " state needs bf16 compute weights, not ",
           dtype_name(cdt_));
  n_layers_ = chunks_[0]->cfg().n_layers;
  std::vector<int64_t> seg_len;
  std::vector<FlatParam> fp;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    base_.push_back(int(params_.size()));
    for (Param* p : chunks_[c]->params()) {
      params_.push_back(p);
      fp.push_back({int(c), p->flat_off, p->g.numel(), p->row, p->layer});
    }
    seg_len.push_back(chunks_[c]->flat_numel());
  }
  BucketOptions bo;
  bo.bucket_mb = pc.dp_bucket_mb;
  bo.reduce_scatter = mode_.shard_grads;
  // Staged buckets hold one layer, as ZeRO 3's, so a staging buffer is never
  // bigger than one layer's gradients (or one bucket).
  bo.split_groups = mode_.shard_weights || mode_.staged;
  bo.staged = mode_.staged;
  bo.reduce_dtype = parse_float_dtype(pc.grad_reduce_dtype, "parallel.grad_reduce_dtype");
  buckets_ = std::make_unique<GradBuckets>(fp, seg_len, bo, group_, be_);
  if (mode_.staged) {  // enough staging for every bucket one layer's backward touches
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
}

ZeroSync::~ZeroSync() { gather_.reset(); }

void ZeroSync::build_state(StateTable& st, int tp_rank) {
  Device& dev = be_.device();
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
  if (mode_.shard_optim) {
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
  // A separate master unless the compute weights are whole here and of the
  // state's dtype (fp32 compute with fp32 state, bf16 with bf16).
  const bool own = cdt_ == state_t_;
  const bool separate = !own || mode_.shard_weights;
  const size_t ms = dtype_size(state_t_);
  if (separate) {
    master_ = Tensor({std::max<int64_t>(master_n, 1)}, state_t_, MemCat::Params, dev);
    master_.zero();  // the partition's alignment padding
  }
  st.replicated = !mode_.shard_optim;
  st.replica = group_.rank();
  st.replicas = group_.size();
  st.tp_rank = tp_rank;
  st.replica_group = &group_;
  st.device = &dev;
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
    sp.state_t = state_t_;
    if (separate) {
      sp.master = static_cast<char*>(master_.raw()) + size_t(c.shard_off) * ms;
      fill_initial(*p, c.chunk, c.param_off, c.len, sp.master);
    } else {
      sp.master = static_cast<char*>(p->w.raw()) + size_t(c.param_off) * es;
    }
    // With sharded weights no compute copy of the piece exists: a layer's
    // gather casts the master just in time (ParamGather); masters of the
    // compute dtype are the compute weights.
    if (!own && !mode_.shard_weights)
      sp.compute = static_cast<char*>(p->w.raw()) + size_t(c.param_off) * es;
    sp.compute_t = cdt_;
    // The reduced gradient: the persistent shard when gradients are
    // reduce-scattered, else in place in the chunk's gradient buffer (which
    // never moves then).
    sp.grad = mode_.shard_grads ? buckets_->shard_grads() + c.shard_off : p->g.data() + c.param_off;
    st.pieces.push_back(std::move(sp));
  }
  state_ = &st;
  if (mode_.shard_weights)
    gather_ = std::make_unique<ParamGather>(*buckets_, *chunks_[0], master_.raw(), state_t_, cdt_);
}

// The seeded initial values of rows [off, off + len) of `p` into a separate
// master of the state's dtype (rounded to nearest for bf16: the compute
// weights' own rounding, so both start equal).
void ZeroSync::fill_initial(const Param& p, int chunk, int64_t off, int64_t len, void* dst) {
  if (!be_.computes()) return;  // the recording backend draws nothing
  Device& dev = be_.device();
  std::vector<float> host(static_cast<size_t>(len));
  chunks_[size_t(chunk)]->init_values(p, off / p.row, len / p.row, host.data());
  if (state_t_ == DType::F32) {
    dev.copy_from_host(dst, host.data(), host.size() * sizeof(float), dev.compute_stream());
    return;
  }
  std::vector<uint16_t> half(host.size());
  for (size_t i = 0; i < host.size(); ++i) half[i] = f32_to_bf16(host[i]);
  dev.copy_from_host(dst, half.data(), half.size() * sizeof(uint16_t), dev.compute_stream());
}

void ZeroSync::free_full_grads() {
  if (mode_.shard_grads)
    for (Model* m : chunks_) m->release_grads();
}

void ZeroSync::refresh_params() {
  Stream& s = be_.device().compute_stream();
  for (const StatePiece& p : state_->pieces)
    if (p.compute) be_.ops().cast(s, p.master, p.state_t, p.compute, p.compute_t, p.len);
  gather_params(nullptr);
}

void ZeroSync::start_step() {
  if (!mode_.staged)  // staged: staging buffers, taken in finish_param_sync
    for (size_t c = 0; c < chunks_.size(); ++c) {
      Model& m = *chunks_[c];
      if (!m.grads_allocated())
        m.allocate_grads();  // zeroed
      else
        m.zero_grad();
      buckets_->set_buffer(int(c), m.grads());
    }
  last_layer_ = -2;
  dir_ = 1;
  buckets_->start();
}

void ZeroSync::start_pass(bool backward, bool last, bool more_forward) {
  // Reductions start during the chunk's last backward, or every one when
  // staged.
  collect_ = backward && (mode_.staged || last);
  in_backward_ = backward;
  more_forward_ = more_forward;
}

void ZeroSync::end_pass() {
  collect_ = false;
  in_backward_ = false;
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
void ZeroSync::finish_param_sync(int chunk, int l) {
  if (mode_.staged && (in_backward_ || l == n_layers_)) {
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
  gather_->acquire(l, in_backward_);
  if (l > last_layer_)
    dir_ = 1;
  else if (l < last_layer_)
    dir_ = -1;
  last_layer_ = l;
  if (gather_->has_layer(l + dir_))
    gather_->prefetch(l + dir_);
  else if (dir_ == 1 || more_forward_)
    gather_->prefetch(l - dir_);
}

void ZeroSync::release_params(int layer) {
  if (gather_) gather_->release(layer);
}

void ZeroSync::grad_ready(int param) {
  if (collect_) buckets_->grad_ready(param);
}

void ZeroSync::finish_grad_sync(StreamInterval& tail) {
  collect_ = false;
  if (gather_) gather_->drain();  // before the shard is updated
  Stream& s = be_.device().compute_stream();
  tail.begin(s);
  buckets_->finish();
  tail.end(s);
  if (mode_.shard_grads && !mode_.staged)
    for (Model* m : chunks_) m->release_grads();  // freed in stream order, after the wait
}

void ZeroSync::sum_norm_sq(double* sq, int n) {
  if (mode_.shard_optim) host_group_.all_reduce_sum(sq, n);
}

void ZeroSync::gather_params(double* exposed) {
  if (!mode_.regather) return;
  Device& dev = be_.device();
  Stream& s = dev.compute_stream();
  StreamInterval iv(dev);
  iv.begin(s);
  std::vector<void*> bases;
  for (Model* m : chunks_) bases.push_back(m->weights_at(0));
  buckets_->gather_all(bases, cdt_);
  iv.end(s);
  dev.synchronize();
  if (exposed) *exposed += iv.seconds();
}

StepMeasured ZeroSync::take_param_waits() {
  return gather_ ? gather_->take_wait_seconds() : StepMeasured{};
}
}  // namespace st
