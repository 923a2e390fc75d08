// The CUDA engine (step_engine.hpp): one GPU per rank, the bf16 training
// step of kernels/cuda/train_step.hpp (CudaLlama), data and tensor
// parallelism over NCCL, and host views of the fp32 state for checkpoints.
//
//  - Device: the node-local rank's GPU (select_device; CUDA_VISIBLE_DEVICES
//    respected). Peak for MFU: runtime.gpu_peak_tflops, else the device's
//    dense bf16 entry in lib/metrics' table.
//  - Weights start as the CPU model's (st::Model built on the host with the
//    same seed and this rank's tp slice, then copied up), so a GPU run and a
//    CPU run of one config start from the same parameters, whatever the
//    layout.
//  - NCCL: one world communicator from MPI, split into the tp group (ranks
//    of one dp index) and the dp group (ranks of one tp index). Tensor
//    parallelism lives in CudaLlama (Megatron split, no sequence
//    parallelism); the engine reduces gradients over dp.
//  - Gradients: every micro-batch's d(loss) is 1/(grad_accum * dp), so a SUM
//    over dp is the global mean. During the last micro-batch's backward,
//    finished layers are packed into buckets of parallel.dp_bucket_mb (the
//    flat gradient buffer keeps a layer's gradients contiguous) and each
//    bucket's ncclAllReduce starts on the communicator's stream, ordered
//    after the compute stream by an event, while backward continues. With
//    parallel.grad_reduce_dtype=bf16 a bucket is cast to bf16 first and the
//    reduced values are cast back (half the bytes on the wire).
//  - Exposed communication: device time between the end of backward and the
//    end of the last reduction (CUDA events on the compute stream).
//  - Checkpoints: the host views are the CPU model's tensors and a host
//    AdamW's moments, page-locked in place (HostPin); a save copies the rows
//    this rank writes (checkpoint_state splits replicated tensors over the
//    dp ranks) on a copy stream: that copy is the loop's stall. Resume fills
//    the views (any layout, any device wrote them) and copies them up.
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "comm/nccl_communicator.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/util.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/cuda/train_step.hpp"
#include "metrics/metrics.hpp"
#include "model/model.hpp"
#include "optim/optim.hpp"
#include "parallel/grad_buckets.hpp"
#include "step_engine.hpp"

namespace st {
namespace {
namespace kc = kernels::cuda;
using st::cuda::DeviceBuffer;

// Collective-free checks shared by preflight and the constructor.
std::string select(const Runtime& rt, int* ordinal, std::string* name) {
  std::string why = st::cuda::select_device(rt.local_rank(), rt.local_size(), ordinal, name);
  if (!why.empty())
    return "runtime.device=cuda on host " + rt.host() + " (rank " + std::to_string(rt.rank()) +
           "): " + why + "; use runtime.device=cpu on a machine without GPUs";
  return "";
}

// The peak MFU is reported against: runtime.gpu_peak_tflops, else the
// device's dense bf16 row of the metrics table; "" or why there is none.
std::string gpu_peak(const Config& cfg, const std::string& name, DevicePeak* out) {
  if (cfg.runtime.gpu_peak_tflops > 0) {
    *out = {cfg.runtime.gpu_peak_tflops * 1e12, "config runtime.gpu_peak_tflops"};
  } else if (auto p = metrics::peak_flops(name, "bf16")) {
    *out = {p->flops, "table: " + p->device + " " + p->precision + " (" + p->source + ")"};
  } else {
    return "runtime.device=cuda: no peak bf16 FLOP/s is known for '" + name +
           "' (lib/metrics peak table); set runtime.gpu_peak_tflops to its dense bf16 TFLOP/s "
           "for MFU";
  }
  return "";
}

int select_or_throw(const Runtime& rt, std::string* name) {
  int ordinal = 0;
  const std::string why = select(rt, &ordinal, name);
  if (!why.empty()) throw UsageError(why);
  return ordinal;
}

class CudaEngine final : public StepEngine {
 public:
  CudaEngine(const Config& cfg, Mesh& mesh, MpiCommunicator& world, const Runtime& rt);
  ~CudaEngine() override;

  StepOut forward_backward(long step, const DataLoader& loader) override;
  double apply(long step, double lr, double grad_norm, bool skip, double* exposed_s) override;
  TrainState train_state() override;
  double sync_state_to_host() override;
  void sync_state_from_host() override;
  void begin_step() override { st::cuda::DeviceAllocator::instance().reset_peaks(); }
  EngineMemory memory() const override;
  int num_buckets() const override { return int(buckets_.size()); }
  std::vector<Communicator*> extra_comms() override {
    std::vector<Communicator*> c;
    if (dp_) c.push_back(dp_.get());
    if (tp_) c.push_back(tp_.get());
    return c;
  }
  std::optional<DevicePeak> device_peak() const override { return peak_; }
  std::string device_name() const override { return name_; }
  std::string device_id() const override { return "cuda:" + std::to_string(ordinal_); }

 private:
  void plan_buckets();
  void launch_bucket(int b);

  const Config& cfg_;
  Mesh& mesh_;
  // First: selecting the device (again: the same answer as preflight) must
  // precede every member that creates CUDA objects (streams, events).
  std::string name_;
  int ordinal_;
  DevicePeak peak_;
  bool full_ckpt_ = false;
  bool bf16_reduce_ = false;
  std::unique_ptr<DeviceCommunicator> world_;  // NCCL over every rank (null for 1 rank)
  std::unique_ptr<DeviceCommunicator> dp_;     // over the dp group (null for dp = 1)
  std::unique_ptr<DeviceCommunicator> tp_;     // over the tp group (null for tp = 1)
  std::unique_ptr<kc::CudaLlama> model_;
  // Host views: the CPU model's tensors (weights) and a host AdamW (moments).
  std::unique_ptr<Model> host_;
  std::unique_ptr<AdamW> host_opt_;
  std::vector<Param*> hparams_;
  std::vector<kc::CudaParam*> dev_;  // device twin of hparams_[i]
  std::vector<st::cuda::HostPin> pins_;
  st::cuda::CopyStream copy_;
  // Buckets: ranges of the flat gradient buffer, in backward order.
  std::vector<LayerBucket> buckets_;
  std::vector<int> bucket_of_layer_;  // index layer + 1 -> bucket closed by it, or -1
  DeviceBuffer red16_;                // bf16 staging (grad_reduce_dtype=bf16)
  st::cuda::Event bwd_done_{true}, comm_done_{true};
};

CudaEngine::CudaEngine(const Config& cfg, Mesh& mesh, MpiCommunicator& world, const Runtime& rt)
    : cfg_(cfg), mesh_(mesh), ordinal_(select_or_throw(rt, &name_)) {
  full_ckpt_ = cfg.train.act_ckpt == "full";
  bf16_reduce_ = cfg.parallel.grad_reduce_dtype == "bf16";

  const std::string no_peak = gpu_peak(cfg, name_, &peak_);  // preflight checked it
  if (!no_peak.empty()) throw UsageError(no_peak);

  ST_CHECK(mesh.dims().pp == 1 && mesh.dims().cp == 1,
           "CUDA engine: pipeline and context parallelism are refused at config load");
  // NCCL: the world, then the tp and dp groups (collective, same order on
  // every rank).
  const auto& co = mesh.coords();
  if (world.size() > 1) {
    world_ = make_nccl_communicator(world, "world", cfg.runtime.timeout_s);
    if (mesh.dims().tp > 1) tp_ = world_->split(co.dp, co.tp, "tp");
    if (mesh.dims().dp > 1) dp_ = world_->split(co.tp, co.dp, "dp");
  }

  // Host model: the initial weights (same seed, same values as on CPU ranks)
  // and the checkpoint views. Its gradient buffers are never used.
  ModelParallel hp;
  hp.tp = &mesh.tp();
  host_ = std::make_unique<Model>(cfg.model, cfg.train.seed, hp);
  hparams_ = host_->params();
  host_opt_ = std::make_unique<AdamW>(cfg.optim);
  for (Param* p : hparams_) {
    p->g.release();
    host_opt_->add(p->name, p->w.data(), nullptr, p->w.numel(), p->decay);
  }
  kc::AdamWCfg oc;
  oc.beta1 = float(cfg.optim.beta1);
  oc.beta2 = float(cfg.optim.beta2);
  oc.eps = float(cfg.optim.eps);
  oc.weight_decay = float(cfg.optim.weight_decay);
  kc::TensorParallel tpar;
  tpar.comm = tp_.get();
  model_ = std::make_unique<kc::CudaLlama>(cfg.model, oc, tpar);
  std::unordered_map<std::string, kc::CudaParam*> by_name;
  for (const auto& p : model_->params()) by_name[p->name] = p.get();
  for (Param* p : hparams_) {
    auto it = by_name.find(p->name);
    ST_CHECK(it != by_name.end() && it->second->numel == p->w.numel(),
             "CUDA engine: host parameter '", p->name, "' has no device twin of its size");
    dev_.push_back(it->second);
  }
  ST_CHECK(dev_.size() == model_->params().size(), "CUDA engine: ", model_->params().size(),
           " device parameters for ", dev_.size(), " host ones");
  // Page-lock the host views so snapshot copies are DMA on the copy stream.
  // Only tensors that own whole pages (tensor.hpp); the small ones (norm
  // weights) share pages with other allocations and are copied pageable.
  auto& slots = host_opt_->slots();
  auto pin = [this](Tensor& t) {
    if (t.bytes() >= Tensor::kPageOwnedBytes) pins_.emplace_back(t.data(), t.bytes());
  };
  for (size_t i = 0; i < hparams_.size(); ++i) {
    pin(hparams_[i]->w);
    pin(slots[i].m);
    pin(slots[i].v);
  }
  for (size_t i = 0; i < hparams_.size(); ++i)
    model_->state_from_host(*dev_[i], hparams_[i]->w.data(), nullptr, nullptr);

  // Gradient reduction over dp, in buckets.
  if (dp_) {
    dp_->set_compute_stream(model_->stream());
    plan_buckets();
    if (bf16_reduce_)
      red16_ = DeviceBuffer(size_t(model_->grads_numel()) * sizeof(kc::bf16), MemCat::Comm);
  }
}

CudaEngine::~CudaEngine() {
  if (model_) cudaStreamSynchronize(model_->stream());
  for (auto* c : {dp_.get(), tp_.get()})
    if (c) c->synchronize();
  copy_.sync();
}

// Buckets over the flat gradient buffer, filled in backward order
// (parallel/grad_buckets.hpp: plan_layer_buckets).
void CudaEngine::plan_buckets() {
  const int L = cfg_.model.n_layers;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int l = -1; l <= L; ++l) ranges.push_back(model_->layer_grad_range(l));
  buckets_ = plan_layer_buckets(
      ranges, std::max<int64_t>(1, int64_t(cfg_.parallel.dp_bucket_mb * 1048576.0 / 4)));
  bucket_of_layer_.assign(size_t(L) + 2, -1);
  for (size_t b = 0; b < buckets_.size(); ++b)
    bucket_of_layer_[size_t(buckets_[b].close_layer + 1)] = int(b);
}

void CudaEngine::launch_bucket(int b) {
  const LayerBucket& k = buckets_[size_t(b)];
  float* g = model_->grads() + k.off;
  if (bf16_reduce_) {
    kc::bf16* h = red16_.as<kc::bf16>() + k.off;
    kc::cast_f32_to_bf16(g, h, k.n, model_->stream());
    dp_->all_reduce_sum_typed(h, k.n, CommDType::BF16);
  } else {
    dp_->all_reduce_sum_typed(g, k.n, CommDType::F32);
  }
}

StepOut CudaEngine::forward_backward(long step, const DataLoader& loader) {
  StepOut o;
  st::cuda::NvtxRange nv("forward_backward");
  const int accum = cfg_.train.grad_accum, dp = mesh_.dims().dp;
  const float scale = 1.0f / float(accum * dp);
  const cudaStream_t s = model_->stream();
  model_->reset_times();
  MicroBatch mb;
  double loss_sum = 0;
  for (int m = 0; m < accum; ++m) {
    const double td = wall_time();
    loader.get(step, m, mb);
    o.data_s += wall_time() - td;
    kc::GradsReadyFn ready;
    if (dp_ && m == accum - 1)
      ready = [this](int layer) {
        const int b = bucket_of_layer_[size_t(layer + 1)];
        if (b >= 0) launch_bucket(b);
      };
    loss_sum += model_->forward_backward(mb.tokens.data(), mb.targets.data(), mb.B, mb.T,
                                         full_ckpt_, m == 0, scale, ready);
  }
  bwd_done_.record(s);
  if (dp_) {
    dp_->wait_on(s);
    if (bf16_reduce_)
      for (const LayerBucket& k : buckets_)
        kc::cast_bf16_to_f32(red16_.as<kc::bf16>() + k.off, model_->grads() + k.off, k.n, s);
  }
  comm_done_.record(s);
  // Gradients are now the global mean on every rank: the norm needs no
  // further reduction (grad_sumsq synchronises the compute stream).
  o.grad_norm = std::sqrt(model_->grad_sumsq());
  const kc::StepTimes& t = model_->last_times();
  o.fwd_s = t.fwd_s;
  o.bwd_s = t.bwd_s;
  float ms = 0.f;
  ST_CUDA_CHECK(cudaEventElapsedTime(&ms, bwd_done_.get(), comm_done_.get()));
  o.exposed_s = double(ms) * 1e-3;
  if (dp_) {
    dp_->synchronize();  // already done; counts the collectives into the stats
    o.async_total_s = dp_->stats(CollKind::AllReduce).seconds;
  }
  // Loss: micro-batch means, averaged over dp (host scalars over MPI).
  double red = loss_sum / accum;
  const double t0 = wall_time();
  if (dp > 1) mesh_.dpcp().all_reduce_sum(&red, 1);
  o.exposed_s += wall_time() - t0;
  o.loss = red / dp;
  o.finite = std::isfinite(o.loss) && std::isfinite(o.grad_norm);
  return o;
}

double CudaEngine::apply(long step, double lr, double /*grad_norm*/, bool skip,
                         double* /*exposed_s*/) {
  if (skip) return 0.0;
  // Clip coefficient and AdamW on the device (the squared norm grad_sumsq
  // left there); every rank applies the same update to its replica.
  model_->optimizer_step(float(lr), float(cfg_.optim.grad_clip), step);
  return model_->last_times().opt_s;
}

TrainState CudaEngine::train_state() {
  TrainState t{hparams_, host_opt_.get(), &cfg_, mesh_.dpcp().rank(), mesh_.dpcp().size()};
  t.zero_stage = 0;
  t.tp_rank = mesh_.coords().tp;
  return t;
}

double CudaEngine::sync_state_to_host() {
  st::cuda::NvtxRange nv("checkpoint snapshot");
  const double t0 = wall_time();
  auto& slots = host_opt_->slots();
  const int r = mesh_.dpcp().rank(), n = mesh_.dpcp().size();
  for (size_t i = 0; i < hparams_.size(); ++i) {
    Param* p = hparams_[i];
    if (!p->tp_sharded && mesh_.coords().tp != 0) continue;  // tp rank 0 saves replicated ones
    const auto& shape = p->w.shape();
    auto [lo, hi] = replica_rows(shape[0], r, n);
    if (hi <= lo) continue;
    const int64_t row = p->w.numel() / shape[0];
    const size_t bytes = size_t((hi - lo) * row) * sizeof(float);
    const size_t at = size_t(lo * row);
    const kc::CudaParam& d = *dev_[i];
    copy_.copy_to_host(p->w.data() + at, d.w.as<const float>() + at, bytes, model_->stream());
    copy_.copy_to_host(slots[i].m.data() + at, d.m.as<const float>() + at, bytes,
                       model_->stream());
    copy_.copy_to_host(slots[i].v.data() + at, d.v.as<const float>() + at, bytes,
                       model_->stream());
  }
  copy_.sync();
  return wall_time() - t0;
}

void CudaEngine::sync_state_from_host() {
  auto& slots = host_opt_->slots();
  for (size_t i = 0; i < hparams_.size(); ++i)
    model_->state_from_host(*dev_[i], hparams_[i]->w.data(), slots[i].m.data(),
                            slots[i].v.data());
}

EngineMemory CudaEngine::memory() const {
  const auto s = st::cuda::DeviceAllocator::instance().stats();
  EngineMemory m;
  m.peak_total = s.in_use_peak;
  m.params = s.cat_current[size_t(MemCat::Params)];
  m.grads = s.cat_current[size_t(MemCat::Grads)];
  m.optim = s.cat_current[size_t(MemCat::Optim)];
  m.activations_peak = s.cat_peak[size_t(MemCat::Activations)];
  return m;
}
}  // namespace

std::string cuda_engine_preflight(const Config& cfg, const Runtime& rt) {
  int ordinal = 0;
  std::string name;
  std::string why = select(rt, &ordinal, &name);
  DevicePeak peak;
  if (why.empty()) why = gpu_peak(cfg, name, &peak);
  return why;
}

std::unique_ptr<StepEngine> make_cuda_engine(const Config& cfg, Mesh& mesh, MpiCommunicator& world,
                                             const Runtime& rt) {
  return std::make_unique<CudaEngine>(cfg, mesh, world, rt);
}
}  // namespace st
