// Implementation of train_state.hpp.
#include "engine/train_state.hpp"

#include <filesystem>
#include <functional>

#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace st {
namespace {

// Rows [lo, hi) of piece `p` (counted from the piece's first row) as a
// hyperslab of the global tensor named `prefix` + the piece's name, over
// `data` (the piece's first element, of the piece's state dtype: a bf16
// piece's view carries its bits in `bf16`, which only saving reads).
ShardView rows_of(const std::string& prefix, const StatePiece& p, void* data, int64_t lo,
                  int64_t hi) {
  const int64_t row = p.row();
  ST_CHECK(p.off % row == 0 && p.len % row == 0, "checkpoint: piece [", p.off, ", ", p.off + p.len,
           ") of '", p.name, "' is not whole rows of ", row);
  ShardView v;
  v.name = prefix + p.name;
  v.global_shape = p.block_shape;
  if (!p.global_shape.empty()) v.global_shape = p.global_shape;
  v.offset = p.block_offset;
  if (v.offset.empty()) v.offset.assign(p.block_shape.size(), 0);
  v.offset[0] += p.off / row + lo;
  v.shape = p.block_shape;
  v.shape[0] = hi - lo;
  if (p.state_t == DType::BF16)
    v.bf16 = static_cast<const uint16_t*>(data) + lo * row;
  else
    v.data = static_cast<float*>(data) + lo * row;
  return v;
}

// The rows of `p` this rank saves and reads first: a replica's share of a
// replicated piece, else all of it.
std::pair<int64_t, int64_t> my_rows(const StateTable& t, const StatePiece& p) {
  const int64_t rows = p.len / p.row();
  return t.replicated ? replica_rows(rows, t.replica, t.replicas)
                      : std::pair<int64_t, int64_t>{0, rows};
}

// The three tensors a piece contributes: master weights and both moments.
std::vector<std::pair<std::string, void*>> tensors_of(StatePiece& p) {
  return {{"params/", p.master}, {"exp_avg/", p.m.raw()}, {"exp_avg_sq/", p.v.raw()}};
}

json model_fingerprint(const ModelCfg& m) {
  return {{"n_layers", m.n_layers},     {"d_model", m.d_model},       {"n_heads", m.n_heads},
          {"n_kv_heads", m.n_kv_heads}, {"ffn_hidden", m.ffn_hidden}, {"vocab_size", m.vocab_size}};
}
}  // namespace

CkptState checkpoint_state(StateTable& t, const Config& cfg, long step, uint64_t samples_consumed) {
  CkptState st;
  st.device = t.device;
  for (StatePiece& p : t.pieces) {
    if (!p.tp_sharded && t.tp_rank != 0) continue;  // tp rank 0 writes replicated tensors
    const auto [lo, hi] = my_rows(t, p);
    if (hi == lo) continue;  // nothing left for this replica
    for (const auto& [prefix, data] : tensors_of(p))
      st.tensors.push_back(rows_of(prefix, p, data, lo, hi));
  }
  st.scalars = {{"step", step},
                {"optimizer_step", step},
                {"samples_consumed", samples_consumed},
                {"seed", cfg.train.seed},
                {"total_steps", cfg.train.steps},
                {"model", model_fingerprint(cfg.model)}};
  // Training draws no random numbers after init (data is a pure function of
  // (seed, sample)); the seed is the whole RNG state.
  uint64_t seed = cfg.train.seed;
  st.rng.assign(reinterpret_cast<uint8_t*>(&seed), reinterpret_cast<uint8_t*>(&seed) + 8);
  return st;
}

std::optional<std::string> pick_resume(const CheckpointCfg& c, const std::string& dir,
                                       HostGroup& world, long before_step) {
  if (c.resume == "none") return std::nullopt;
  VerifyOptions o;
  o.data = false;  // restore() checks every data block it reads: each byte read once
  o.before_step = before_step;
  o.part = world.rank();
  o.nparts = world.size();
  o.all_good = [&world](bool good) {
    double bad = good ? 0.0 : 1.0;
    world.all_reduce_max(&bad, 1);
    return bad == 0.0;
  };
  std::vector<std::string> rejected;
  if (c.resume == "auto") {
    if (!fs::exists(dir)) return std::nullopt;
    auto r = find_latest_good(dir, o, &rejected);
    for (auto& x : rejected) log0("checkpoint skipped: ", x);
    return r;
  }
  const std::string& p = c.resume;
  if (!fs::exists(p))
    throw UsageError(
        "checkpoint.resume: '" + p +
        "' does not exist (valid: auto, none, a step_N folder or a checkpoints folder)");
  if (fs::exists(fs::path(p) / "index.json")) {
    o.all_good = nullptr;  // the caller's start-up agreement stops every rank
    std::string why = verify_checkpoint(p, o);
    if (!why.empty()) throw UsageError("checkpoint.resume: '" + p + "' is not loadable: " + why);
    return p;
  }
  auto r = find_latest_good(p, o, &rejected);
  for (auto& x : rejected) log0("checkpoint skipped: ", x);
  if (!r) throw UsageError("checkpoint.resume: no good checkpoint under '" + p + "'");
  return r;
}

namespace {
// A piece's rows to fill: where they go on the device and in what dtype.
struct Fill {
  ShardView view;  // what to read (host memory when staged)
  void* dst;       // the device rows
  DType t;
};

// Reads `fills` through `read` into host staging buffers, about 1 GiB a
// batch, and copies each batch up (bf16 rows rounded to nearest, which
// gives back exactly the values a bf16 state saved). Returns the step read.
long fill_staged(Device* dev, std::vector<Fill>& fills,
                 const std::function<long(std::vector<ShardView>&)>& read) {
  constexpr size_t kBatchBytes = size_t(1) << 30;
  long step = -1;
  size_t i = 0;
  bool first = true;
  while (i < fills.size() || first) {
    first = false;
    std::vector<ShardView> batch;
    std::vector<std::vector<float>> host;
    std::vector<const Fill*> to;
    size_t bytes = 0;
    while (i < fills.size() && (batch.empty() || bytes < kBatchBytes)) {
      const Fill& f = fills[i++];
      ShardView v = f.view;
      const size_t n = size_t(numel_of(v.shape));
      host.emplace_back(n);
      v.data = host.back().data();
      batch.push_back(std::move(v));
      to.push_back(&f);
      bytes += n * sizeof(float);
    }
    step = read(batch);
    for (size_t k = 0; k < batch.size(); ++k) {
      const std::vector<float>& h = host[k];
      if (to[k]->t == DType::BF16) {
        std::vector<uint16_t> half(h.size());
        for (size_t e = 0; e < h.size(); ++e) half[e] = f32_to_bf16(h[e]);
        dev->copy_from_host(to[k]->dst, half.data(), half.size() * 2, dev->compute_stream());
      } else {
        dev->copy_from_host(to[k]->dst, h.data(), h.size() * sizeof(float), dev->compute_stream());
      }
    }
    // The staging buffers die with this batch: the copies must be done.
    dev->synchronize();
  }
  return step;
}

// Fills the master weights (and, with `moments`, the AdamW moments) of every
// piece of `t` through `read`, which fills a batch of views in host memory
// and returns the step it read. Replicated pieces are read in shares and
// all-gathered over the replica group; on a device that is not
// host-accessible, and for bf16 state, through host staging buffers.
long fill_pieces(StateTable& t, bool moments,
                 const std::function<long(std::vector<ShardView>&)>& read) {
  std::vector<ShardView> direct;  // fp32 rows the loader writes in place
  std::vector<Fill> staged;
  // Replicated pieces with replicas: this replica's rows, gathered below.
  struct Gather {
    char* data;
    DType t;
    std::vector<int64_t> counts;  // elements per replica
    int64_t offset;               // this replica's first element
  };
  std::vector<Gather> gathers;
  Device* dev = t.device;
  const bool in_place = !dev || dev->host_accessible();
  const bool share = t.replicated && t.replicas > 1 && t.replica_group;
  for (StatePiece& p : t.pieces) {
    const int64_t rows = p.len / p.row();
    const auto [lo, hi] = share ? my_rows(t, p) : std::pair<int64_t, int64_t>{0, rows};
    auto tensors = tensors_of(p);
    if (!moments) tensors.resize(1);
    const size_t es = dtype_size(p.state_t);
    for (const auto& [prefix, data] : tensors) {
      if (hi > lo) {
        ShardView v = rows_of(prefix, p, data, lo, hi);
        if (in_place && p.state_t == DType::F32) {
          direct.push_back(std::move(v));
        } else {
          ST_CHECK(dev, "checkpoint: ", dtype_name(p.state_t), " state of '", p.name,
                   "' needs its device to be filled");
          v.bf16 = nullptr;
          staged.push_back(
              {std::move(v), static_cast<char*>(data) + size_t(lo * p.row()) * es, p.state_t});
        }
      }
      if (!share) continue;
      Gather g{static_cast<char*>(data), p.state_t, {}, lo * p.row()};
      for (int r = 0; r < t.replicas; ++r) {
        const auto [a, b] = replica_rows(rows, r, t.replicas);
        g.counts.push_back((b - a) * p.row());
      }
      gathers.push_back(std::move(g));
    }
  }
  long step = -1;
  if (!direct.empty() || staged.empty()) {
    if (dev) dev->synchronize();
    step = read(direct);
  }
  if (!staged.empty()) step = fill_staged(dev, staged, read);
  if (!gathers.empty()) {
    ST_CHECK(dev, "checkpoint: a shared resume needs the device the replica group runs on");
    Stream& cs = dev->compute_stream();
    for (const Gather& g : gathers)
      t.replica_group
          ->all_gather(g.data + size_t(g.offset) * dtype_size(g.t), g.data, g.counts, g.t, cs)
          .wait(cs);
  }
  if (dev) dev->synchronize();
  return step;
}
}  // namespace

long restore(StateTable& t, const Config& cfg, const std::string& step_dir) {
  // Check the model shape first, for a clear message instead of a missing tensor.
  json idx = json::parse(read_file(step_dir + "/index.json"));
  json saved = idx.value("scalars", json::object()).value("model", json());
  if (!saved.is_null() && saved != model_fingerprint(cfg.model))
    throw UsageError("checkpoint '" + step_dir + "' holds a different model (" + saved.dump() +
                     ") than the config (" + model_fingerprint(cfg.model).dump() +
                     "); set checkpoint.resume=none or point checkpoint.dir elsewhere");
  // A damaged block stops this rank's reads but not the fill's collectives.
  std::string damaged;
  const long step = fill_pieces(t, true, [&](std::vector<ShardView>& batch) {
    if (!damaged.empty()) return -1L;
    try {
      LoadResult r = load(step_dir, batch, -1);
      return long(r.scalars.value("step", r.step));
    } catch (const Error& e) {
      damaged = e.what();
      return -1L;
    }
  });
  if (!damaged.empty()) throw Error(damaged);
  return step;
}

void init_params(StateTable& t, const std::function<void(std::vector<ShardView>&)>& read) {
  fill_pieces(t, false, [&](std::vector<ShardView>& batch) {
    read(batch);
    return 0L;
  });
}
}  // namespace st
