// The recording backend (lib/record): the device counts bytes by category
// and finds the peak and where it happened, its addresses are distinct and
// never readable; the real Model run on it records the GEMMs a step must do
// (2MNK summed over the step equals the textbook 6 x matmul parameters x
// tokens, 8 x for the blocks but w2 under full recompute; half on each of two
// tensor-parallel ranks), the tensor-parallel collectives each block needs,
// and frees every activation it allocated; the engine's gradient buckets
// (lib/parallel, MPI-free part) reduce the real model's whole flat buffer.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/model.hpp"
#include "parallel/grad_buckets.hpp"
#include "parallel/stages.hpp"
#include "record/record_backend.hpp"
#include "tensor/tensor.hpp"

namespace {
using st::MemCat;
using st::record::RecordBackend;

st::ModelCfg tiny() {
  st::ModelCfg c;
  c.n_layers = 3;
  c.d_model = 64;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.ffn_hidden = 128;
  c.vocab_size = 96;
  c.seq_len = 32;
  return c;
}

// Matmul parameters of the blocks and the head (the embedding is a lookup).
double block_matmul_params(const st::ModelCfg& c) {
  const double hd = double(c.d_model) / c.n_heads;
  const double attn = 2.0 * c.d_model * c.n_heads * hd + 2.0 * c.d_model * c.n_kv_heads * hd;
  return c.n_layers * (attn + 3.0 * c.d_model * c.ffn_hidden);
}

double gemm_flops(const st::record::Recording& r) {
  double f = 0;
  for (const auto& k : r.kernels())
    if (k.op == "gemm") f += 2.0 * double(k.dims[0]) * double(k.dims[1]) * double(k.dims[2]);
  return f;
}

struct Step {
  double flops = 0;
  int64_t act_peak = 0, act_left = 0, params = 0, grads = 0;
  std::map<std::string, int> colls;  // "tp all_reduce" -> calls
};

Step run(const st::ModelCfg& c, st::ActCkpt mode, int tp, bool sp, int B, int T) {
  RecordBackend be;
  st::ModelParallel par;
  if (tp > 1) par.tp = &be.group("tp", 0, tp);
  par.sp = sp;
  st::ModelOptions opt;
  opt.backend = &be;
  opt.init_weights = false;
  st::Model m(c, 1, par, opt);
  std::vector<int32_t> tok(size_t(B * T), 1), tgt(size_t(B * T), 2);
  be.recording().clear();
  m.forward_backward(tok.data(), tgt.data(), B, T, 1.0f, mode);
  Step s;
  const auto& r = be.recording();
  s.flops = gemm_flops(r);
  s.act_peak = r.memory().pk(MemCat::Activations);
  s.act_left = r.memory().cur(MemCat::Activations);
  s.params = r.memory().cur(MemCat::Params);
  s.grads = r.memory().cur(MemCat::Grads);
  for (const auto& k : r.collectives()) s.colls[k.group + " " + st::coll_name(k.kind)] += 1;
  return s;
}
}  // namespace

TEST(RecordDevice, CountsBytesByCategoryAndFindsThePeak) {
  RecordBackend be;
  st::Device& d = be.device();
  auto& r = be.recording();
  EXPECT_FALSE(d.host_accessible());
  r.set_phase("setup");
  void* w = d.allocate(1000, MemCat::Params);
  void* a = d.allocate(5000, MemCat::Activations);
  r.set_phase("forward");
  float* x = nullptr;
  be.ops().scale(d.compute_stream(), x, 10, 2.0f);
  void* b = d.allocate(3000, MemCat::Activations);  // the peak: 9000
  EXPECT_NE(a, b);
  EXPECT_NE(w, a);
  d.deallocate(b, 3000, MemCat::Activations);
  d.deallocate(a, 5000, MemCat::Activations);
  void* c = d.allocate(2000, MemCat::Grads);
  const st::MemoryStats m = d.memory();
  EXPECT_EQ(m.current_total, 3000);
  EXPECT_EQ(m.peak_total, 9000);
  EXPECT_EQ(m.pk(MemCat::Activations), 8000);
  EXPECT_EQ(m.cur(MemCat::Grads), 2000);
  const auto& p = r.peak();
  EXPECT_EQ(p.phase, "forward");
  EXPECT_EQ(p.last_kernel, "scale");
  EXPECT_EQ(p.kernel_index, 1);
  EXPECT_EQ(p.cat, MemCat::Activations);
  EXPECT_EQ(p.bytes, 3000);
  EXPECT_EQ(p.at.cur(MemCat::Activations), 8000);
  EXPECT_EQ(p.at.cur(MemCat::Params), 1000);
  // A freed block of the same size is handed out again; live ones never.
  void* b2 = d.allocate(3000, MemCat::Workspace);
  EXPECT_EQ(b2, b);
  d.reset_peaks();
  EXPECT_EQ(d.memory().peak_total, 6000);
  d.deallocate(b2, 3000, MemCat::Workspace);
  d.deallocate(c, 2000, MemCat::Grads);
  d.deallocate(w, 1000, MemCat::Params);
  EXPECT_EQ(d.memory().current_total, 0);
  EXPECT_EQ(r.allocations(), 5);
}

TEST(RecordDeviceDeathTest, ItsMemoryIsNeverReadable) {
  RecordBackend be;
  auto* p = static_cast<volatile char*>(be.device().allocate(64, MemCat::Activations));
  EXPECT_DEATH({ (void)p[0]; }, "");
  // Nor anywhere inside a large buffer, nor written.
  auto* big = static_cast<volatile char*>(be.device().allocate(size_t(40) << 30, MemCat::Params));
  EXPECT_DEATH({ (void)big[size_t(20) << 30]; }, "");
  EXPECT_DEATH({ big[(size_t(40) << 30) - 1] = 1; }, "");
}

// Under an address-space limit (ulimit -v) far below what it hands out, the
// device still records: its addresses are arithmetic, nothing is reserved.
// Run in a child (the limit stays there); exits 0 when 1 TiB was handed out.
static void record_under_4gib_limit() {
  rlimit lim{};
  getrlimit(RLIMIT_AS, &lim);
  lim.rlim_cur = rlim_t(4) << 30;
  if (setrlimit(RLIMIT_AS, &lim) != 0) std::_Exit(3);
  RecordBackend be;
  st::Device& d = be.device();
  std::vector<void*> ps;
  for (int i = 0; i < 64; ++i) ps.push_back(d.allocate(size_t(16) << 30, MemCat::Params));
  const auto first = reinterpret_cast<uintptr_t>(ps.front());
  const auto last = reinterpret_cast<uintptr_t>(ps.back());
  const bool ok = d.memory().current_total == (int64_t(1) << 40) &&
                  last - first == (uintptr_t(63) << 34) && first % 256 == 0;
  std::_Exit(ok ? 0 : 4);
}

TEST(RecordDeviceDeathTest, RecordsUnderAnAddressSpaceLimit) {
  EXPECT_EXIT(record_under_4gib_limit(), ::testing::ExitedWithCode(0), "");
}

TEST(RecordCommunicator, RecordsEachCollectiveAndNeverReportsItDone) {
  RecordBackend be;
  st::Stream& s = be.device().compute_stream();
  st::Communicator& g = be.group("dp_cp", 1, 4);
  EXPECT_EQ(&be.group("dp_cp", 1, 4), &g);
  EXPECT_THROW(be.group("dp_cp", 0, 4), st::Error);
  char buf[1];
  st::CommHandle h = g.all_reduce(buf, 1000, st::DType::BF16, st::ReduceOp::Sum, s);
  EXPECT_FALSE(h.test());  // a poll finds it in flight: the engine waits where it must
  h.wait(s);               // and the wait returns at once, on the timeline
  g.reduce_scatter(buf, buf, {10, 10, 10, 12}, st::DType::F32, s);
  g.all_reduce(buf, 0, st::DType::F32, st::ReduceOp::Sum, s);  // nothing to send: no call
  const auto& c = be.recording().collectives();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].kind, st::CollKind::AllReduce);
  EXPECT_EQ(c[0].bytes, 2000);
  EXPECT_EQ(c[0].ranks, 4);
  EXPECT_EQ(c[0].group, "dp_cp");
  EXPECT_EQ(c[0].stream, "compute");
  EXPECT_EQ(c[1].bytes, 42 * 4);
  EXPECT_EQ(g.stats(st::CollKind::AllReduce).calls, 1);
  // One rank: no collective, as MpiCommunicator does.
  st::Communicator& one = be.group("tp", 0, 1);
  one.all_reduce(buf, 100, st::DType::F32, st::ReduceOp::Sum, s);
  EXPECT_EQ(c.size(), 2u);
}

TEST(RecordModel, GemmFlopsOfAStepAreTheTextbookCount) {
  const st::ModelCfg c = tiny();
  const int B = 2, T = 32;
  const double tokens = B * T;
  const double head = double(c.d_model) * c.vocab_size;
  const double blocks = block_matmul_params(c);
  for (auto mode : {st::ActCkpt::None, st::ActCkpt::Selective})
    EXPECT_DOUBLE_EQ(run(c, mode, 1, false, B, T).flops, 6 * tokens * (blocks + head));
  // Full recompute re-runs each block's forward but its last GEMM (w2: the
  // backward needs its input, not its output).
  const double w2 = double(c.n_layers) * c.d_model * c.ffn_hidden;
  EXPECT_DOUBLE_EQ(run(c, st::ActCkpt::Full, 1, false, B, T).flops,
                   tokens * (8 * blocks - 2 * w2 + 6 * head));
  // Two tensor-parallel ranks each do half, with or without sp.
  EXPECT_DOUBLE_EQ(run(c, st::ActCkpt::None, 2, false, B, T).flops, 3 * tokens * (blocks + head));
  EXPECT_DOUBLE_EQ(run(c, st::ActCkpt::None, 2, true, B, T).flops, 3 * tokens * (blocks + head));
}

TEST(RecordModel, MemoryFollowsTheLayoutAndEveryActivationIsFreed) {
  const st::ModelCfg c = tiny();
  const int64_t n = st::count_params(c);
  const Step one = run(c, st::ActCkpt::None, 1, false, 2, 32);
  // fp32 weights and gradients: each parameter padded to 64 elements at most.
  EXPECT_GE(one.params, n * 4);
  EXPECT_LT(one.params, (n + 64 * 16 * c.n_layers) * 4);
  EXPECT_EQ(one.grads, one.params);
  EXPECT_EQ(one.act_left, 0);
  const Step full = run(c, st::ActCkpt::Full, 1, false, 2, 32);
  EXPECT_LT(full.act_peak, one.act_peak);
  EXPECT_EQ(full.act_left, 0);
  // Twice the micro-batch: more activations kept.
  EXPECT_GT(run(c, st::ActCkpt::None, 1, false, 4, 32).act_peak, one.act_peak);
  // Under tp the matrices are split: fewer parameter bytes per rank.
  EXPECT_LT(run(c, st::ActCkpt::None, 2, false, 2, 32).params, one.params);
}

TEST(RecordModel, TensorParallelCollectivesOfEachBlock) {
  const st::ModelCfg c = tiny();
  const Step plain = run(c, st::ActCkpt::None, 2, false, 2, 32);
  const Step sp = run(c, st::ActCkpt::None, 2, true, 2, 32);
  const Step one = run(c, st::ActCkpt::None, 1, false, 2, 32);
  EXPECT_TRUE(one.colls.empty());
  // Megatron: two all-reduces per block forward (after wo and w2) and two in
  // backward (the input gradients of the column-parallel layers).
  EXPECT_GE(plain.colls.at("tp all_reduce"), 4 * c.n_layers);
  EXPECT_EQ(plain.colls.count("tp all_gather"), 0u);
  // Sequence parallelism turns them into all-gathers and reduce-scatters.
  EXPECT_GE(sp.colls.at("tp all_gather"), 2 * c.n_layers);
  EXPECT_GE(sp.colls.at("tp reduce_scatter"), 2 * c.n_layers);
}

// The pure parts of lib/parallel on the recording backend: the engine's
// gradient buckets over a real model's flat gradient buffer reduce every
// element once (padding included), one collective per bucket, and the ZeRO
// partition gives every rank a part of every bucket.
TEST(RecordParallel, BucketsOfTheRealModelReduceTheWholeFlatBuffer) {
  const st::ModelCfg c = tiny();
  RecordBackend be;
  st::ModelOptions opt;
  opt.backend = &be;
  opt.init_weights = false;
  const auto layers = st::stage_layers(c.n_layers, 1, 1, 0);
  ASSERT_EQ(layers.size(), 1u);
  st::ModelParallel par;
  par.layer_begin = layers[0].first;
  par.layer_end = layers[0].second;
  st::Model m(c, 1, par, opt);
  std::vector<st::FlatParam> fp;
  for (st::Param* p : m.params()) fp.push_back({0, p->flat_off, p->w.numel(), p->row, p->layer});
  for (bool rs : {false, true}) {
    st::BucketOptions o;
    o.bucket_mb = 0.01;  // several buckets on the tiny model
    o.reduce_scatter = rs;
    st::Communicator& g = be.group("dp_cp", 2, 4);
    st::GradBuckets b(fp, {m.flat_numel()}, o, g, be);
    b.set_buffer(0, m.grads());
    be.recording().clear();
    b.reduce_all();
    const auto& cs = be.recording().collectives();
    ASSERT_EQ(int(cs.size()), b.num_buckets());
    EXPECT_GT(b.num_buckets(), 2);
    int64_t bytes = 0;
    for (const auto& x : cs) {
      EXPECT_EQ(x.kind, rs ? st::CollKind::ReduceScatter : st::CollKind::AllReduce);
      bytes += x.bytes;
    }
    // Reduce-scatter: each bucket padded to 4 equal parts (grad_buckets.hpp).
    int64_t padded = 0;
    for (int i = 0; i < b.num_buckets(); ++i) {
      EXPECT_EQ(b.bucket_part(i) % st::kPartAlign, 0);
      EXPECT_GE(4 * b.bucket_part(i), b.bucket_len(i));
      padded += 4 * b.bucket_part(i);
    }
    EXPECT_EQ(bytes, (rs ? padded : m.flat_numel()) * 4);
  }
}
