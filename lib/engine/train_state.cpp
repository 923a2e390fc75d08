// Implementation of train_state.hpp.
#include "engine/train_state.hpp"

#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace st {
std::pair<int64_t, int64_t> replica_rows(int64_t rows, int r, int n) {
  int64_t base = rows / n, rem = rows % n;
  int64_t lo = r * base + std::min<int64_t>(r, rem);
  int64_t hi = lo + base + (r < rem ? 1 : 0);
  return {lo, hi};
}

namespace {

// Rows [lo, hi) of dim 0 of this rank's block of `p` (its tp slice of the
// global tensor), as a hyperslab of the global tensor.
ShardView slice(const std::string& name, const Param* p, float* data, int r, int n) {
  const auto& shape = p->g.shape();
  ShardView v;
  v.name = name;
  v.global_shape = p->global_shape.empty() ? shape : p->global_shape;
  auto [lo, hi] = replica_rows(shape[0], r, n);
  int64_t row = 1;
  for (size_t i = 1; i < shape.size(); ++i) row *= shape[i];
  v.offset = p->offset.empty() ? std::vector<int64_t>(shape.size(), 0) : p->offset;
  v.offset[0] += lo;
  v.shape = shape;
  v.shape[0] = hi - lo;
  v.data = data + lo * row;
  return v;
}

// This rank's whole block of `p`.
ShardView block(const std::string& name, const Param* p, float* data) {
  return slice(name, p, data, 0, 1);
}

// Piece [off, off+len) of this rank's block of `p` (flat offsets within the
// block). The ZeRO partition cuts on rows (grad_buckets.hpp), so the piece
// is whole rows: a hyperslab of the global tensor even when tensor
// parallelism splits a dim other than 0 (row-parallel wo, w2).
ShardView row_piece(const std::string& name, const Param* p, int64_t off, int64_t len,
                    float* data) {
  const auto& shape = p->g.shape();
  int64_t row = 1;
  for (size_t i = 1; i < shape.size(); ++i) row *= shape[i];
  ST_CHECK(off % row == 0 && len % row == 0, "checkpoint: ZeRO piece [", off, ", ", off + len,
           ") of '", p->name, "' is not whole rows of ", row);
  ShardView v = block(name, p, data);
  v.offset[0] += off / row;
  v.shape[0] = len / row;
  return v;
}

json model_fingerprint(const ModelCfg& m) {
  return {{"n_layers", m.n_layers},     {"d_model", m.d_model},       {"n_heads", m.n_heads},
          {"n_kv_heads", m.n_kv_heads}, {"ffn_hidden", m.ffn_hidden}, {"vocab_size", m.vocab_size}};
}
}  // namespace

CkptState checkpoint_state(const TrainState& s, long step, uint64_t samples_consumed) {
  CkptState st;
  st.device = s.device;
  auto& slots = s.opt->slots();
  const int r = s.replica, n = s.replicas;
  if (s.zero_stage == 0) {
    for (size_t i = 0; i < s.params.size(); ++i) {
      Param* p = s.params[i];
      const auto& shape = p->g.shape();
      if (shape[0] < n && r >= shape[0]) continue;     // nothing left for this rank
      if (!p->tp_sharded && s.tp_rank != 0) continue;  // tp rank 0 writes replicated tensors
      st.tensors.push_back(slice("params/" + p->name, p, s.master[i], r, n));
      st.tensors.push_back(slice("exp_avg/" + p->name, p, slots[i].m.data(), r, n));
      st.tensors.push_back(slice("exp_avg_sq/" + p->name, p, slots[i].v.data(), r, n));
    }
  } else {
    const auto& pieces = s.zero->pieces();
    for (size_t k = 0; k < pieces.size(); ++k) {
      const Param* p = s.params[size_t(pieces[k].param)];
      if (!p->tp_sharded && s.tp_rank != 0) continue;
      const int64_t off = pieces[k].param_off, len = pieces[k].len;
      st.tensors.push_back(row_piece("params/" + p->name, p, off, len, slots[k].w));
      st.tensors.push_back(row_piece("exp_avg/" + p->name, p, off, len, slots[k].m.data()));
      st.tensors.push_back(row_piece("exp_avg_sq/" + p->name, p, off, len, slots[k].v.data()));
    }
  }
  st.scalars = {{"step", step},
                {"optimizer_step", step},
                {"samples_consumed", samples_consumed},
                {"seed", s.cfg->train.seed},
                {"total_steps", s.cfg->train.steps},
                {"model", model_fingerprint(s.cfg->model)}};
  // Training draws no random numbers after init (data is a pure function of
  // (seed, sample)); the seed is the whole RNG state.
  uint64_t seed = s.cfg->train.seed;
  st.rng.assign(reinterpret_cast<uint8_t*>(&seed), reinterpret_cast<uint8_t*>(&seed) + 8);
  return st;
}

std::optional<std::string> pick_resume(const CheckpointCfg& c, const std::string& dir,
                                       HostGroup& world) {
  if (c.resume == "none") return std::nullopt;
  VerifyOptions o;
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

long restore(const TrainState& s, const std::string& step_dir) {
  std::vector<ShardView> want;
  auto& slots = s.opt->slots();
  // ZeRO 0 with replicas: this replica's rows of each block, gathered below.
  struct Gather {
    float* data;
    std::vector<int64_t> counts;  // elements per replica
    int64_t offset;               // this replica's first element
  };
  std::vector<Gather> gathers;
  const bool share = s.zero_stage == 0 && s.replicas > 1 && s.replica_group;
  if (s.zero_stage == 0) {
    for (size_t i = 0; i < s.params.size(); ++i) {
      Param* p = s.params[i];
      for (auto [name, data] : {std::pair<std::string, float*>{"params/", s.master[i]},
                                {"exp_avg/", slots[i].m.data()},
                                {"exp_avg_sq/", slots[i].v.data()}}) {
        ShardView v = block(name + p->name, p, data);
        if (!share) {
          want.push_back(std::move(v));
          continue;
        }
        const int64_t rows = v.shape[0], row = numel_of(v.shape) / std::max<int64_t>(1, rows);
        Gather g{data, {}, 0};
        for (int r = 0; r < s.replicas; ++r) {
          auto [lo, hi] = replica_rows(rows, r, s.replicas);
          g.counts.push_back((hi - lo) * row);
          if (r == s.replica) {
            g.offset = lo * row;
            v.offset[0] += lo;
            v.shape[0] = hi - lo;
            v.data = data + lo * row;
          }
        }
        if (v.shape[0] > 0) want.push_back(std::move(v));
        gathers.push_back(std::move(g));
      }
    }
  } else {
    const auto& pieces = s.zero->pieces();
    for (size_t k = 0; k < pieces.size(); ++k) {
      const Param* p = s.params[size_t(pieces[k].param)];
      const int64_t off = pieces[k].param_off, len = pieces[k].len;
      want.push_back(row_piece("params/" + p->name, p, off, len, slots[k].w));
      want.push_back(row_piece("exp_avg/" + p->name, p, off, len, slots[k].m.data()));
      want.push_back(row_piece("exp_avg_sq/" + p->name, p, off, len, slots[k].v.data()));
    }
  }
  // Check the model shape first, for a clear message instead of a missing tensor.
  json idx = json::parse(read_file(step_dir + "/index.json"));
  json saved = idx.value("scalars", json::object()).value("model", json());
  if (!saved.is_null() && saved != model_fingerprint(s.cfg->model))
    throw UsageError("checkpoint '" + step_dir + "' holds a different model (" + saved.dump() +
                     ") than the config (" + model_fingerprint(s.cfg->model).dump() +
                     "); set checkpoint.resume=none or point checkpoint.dir elsewhere");
  Device* dev = s.device;
  long step = -1;
  if (!dev || dev->host_accessible()) {
    if (dev) dev->synchronize();
    LoadResult r = load(step_dir, want, -1);
    step = r.scalars.value("step", r.step);
  } else {
    // Device memory: load into host staging buffers, a batch of about 1 GiB
    // at a time, and copy each batch up.
    constexpr size_t kBatchBytes = size_t(1) << 30;
    size_t i = 0;
    while (i < want.size() || step < 0) {
      std::vector<ShardView> batch;
      std::vector<std::vector<float>> host;
      std::vector<float*> dst;
      size_t bytes = 0;
      while (i < want.size() && (batch.empty() || bytes < kBatchBytes)) {
        ShardView v = want[i++];
        const size_t n = size_t(numel_of(v.shape));
        host.emplace_back(n);
        dst.push_back(v.data);
        v.data = host.back().data();
        batch.push_back(std::move(v));
        bytes += n * sizeof(float);
      }
      LoadResult r = load(step_dir, batch, -1);
      step = r.scalars.value("step", r.step);
      for (size_t k = 0; k < batch.size(); ++k)
        dev->copy_from_host(dst[k], host[k].data(), host[k].size() * sizeof(float),
                            dev->compute_stream());
      if (want.empty()) break;
    }
  }
  if (!gathers.empty()) {
    ST_CHECK(dev, "checkpoint: a shared resume needs the device the replica group runs on");
    Stream& cs = dev->compute_stream();
    for (const Gather& g : gathers)
      s.replica_group->all_gather(g.data + g.offset, g.data, g.counts, DType::F32, cs).wait(cs);
  }
  if (dev) dev->synchronize();
  return step;
}
}  // namespace st
