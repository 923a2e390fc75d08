// Implementation of space.hpp.
#include "plan/space.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>

#include "config/layout_tools.hpp"
#include "core/error.hpp"
#include "core/util.hpp"

namespace st::plan {
namespace {
std::vector<int> pow2_divisors(int n) {
  std::vector<int> v;
  for (int k = 1; k <= n; k *= 2)
    if (n % k == 0) v.push_back(k);
  return v;
}
template <typename T>
std::vector<T> or_default(const std::vector<T>& v, T d) {
  return v.empty() ? std::vector<T>{d} : v;
}
}  // namespace

KnobRanges default_ranges(const Config& base, const std::vector<int>& devices) {
  KnobRanges r;
  r.devices = devices;
  r.sp = {base.parallel.sp ? 1 : 0};
  r.zero_stage = {base.parallel.zero_stage};
  r.num_model_chunks = {base.parallel.num_model_chunks};
  r.micro_batch = {base.train.micro_batch};
  r.grad_accum = {base.train.grad_accum};
  r.dp_bucket_mb = {base.parallel.dp_bucket_mb};
  r.act_ckpt = {base.train.act_ckpt};
  r.pipeline_split = base.parallel.pipeline_layers.empty()
                         ? std::vector<std::string>{"even", "ends"}
                         : std::vector<std::string>{"config"};
  return r;
}

std::string Candidate::name() const {
  const auto& p = cfg.parallel;
  char b[240];
  std::snprintf(b, sizeof b, "dp%d-tp%d-pp%d%s-cp%d%s-z%d%s-mb%d-ga%d-b%g-%s", p.dp, p.tp, p.pp,
                split == "even" ? "" : ("-" + split).c_str(), p.cp, p.sp ? "-sp" : "", p.zero_stage,
                p.num_model_chunks > 1 ? ("-v" + std::to_string(p.num_model_chunks)).c_str() : "",
                cfg.train.micro_batch, cfg.train.grad_accum, p.dp_bucket_mb,
                cfg.train.act_ckpt.c_str());
  return b;
}

std::string Candidate::chunk_layers() const {
  try {
    return pipeline_layers_spec(pipeline_layer_counts(cfg));
  } catch (const UsageError&) {
    return "";
  }
}

namespace {

// The pipeline splits to try for pp * chunks model chunks: (kind,
// parallel.pipeline_layers) pairs, the ends split left out where it equals
// the even one (one chunk, or two) or leaves a chunk empty.
std::vector<std::pair<std::string, std::string>> splits_for(const Config& base, int pp, int v,
                                                            const std::vector<std::string>& kinds) {
  std::vector<std::pair<std::string, std::string>> out;
  const int n = base.model.n_layers, k = pp * v;
  // No split asked for: the config's own (its key, else even).
  const std::string own = base.parallel.pipeline_layers.empty() ? "even" : "config";
  for (const std::string& kind : or_default(kinds, own)) {
    if (kind == "even") {
      out.push_back({kind, ""});
    } else if (kind == "config") {
      out.push_back({kind, base.parallel.pipeline_layers});
    } else if (kind == "ends") {
      const std::vector<int> c = pipeline_split_ends(n, k);
      if (c.empty() || std::all_of(c.begin(), c.end(), [&](int x) { return x == c.front(); }))
        continue;
      out.push_back({kind, pipeline_layers_spec(c)});
    } else {
      throw UsageError("--pipeline-split: '" + kind + "' is not one of even, ends, config");
    }
  }
  if (out.empty()) out.push_back({"even", ""});
  return out;
}

// One layout: the base with the knobs applied, then the trainer's rules run
// once on the result (the CPU engine's complete layout support first; the
// device's limits next).
Candidate make_candidate(const Config& base, int W, const ParallelCfg& p, int mb, int ga,
                         const std::string& ck, const std::string& split, long global_batch,
                         const std::string& device) {
  Candidate c;
  c.devices = W;
  c.split = split;
  c.cfg = base;
  // Planning needs no token file: its checks are not the layout's.
  c.cfg.data.source = "synthetic";
  c.cfg.parallel = p;
  c.cfg.train.micro_batch = mb;
  c.cfg.train.act_ckpt = ck;
  if (global_batch > 0) {
    const long per = long(p.dp) * mb;
    ga = int(global_batch / per);
    if (global_batch % per != 0 || ga < 1) {
      c.cfg.train.grad_accum = 1;
      c.reason = "divisibility: global batch " + std::to_string(global_batch) +
                 " is not a multiple of dp*micro_batch = " + std::to_string(per);
      return c;
    }
  }
  c.cfg.train.grad_accum = ga;
  c.cfg.runtime.device = "cpu";
  c.cfg.train.precision = "fp32";
  c.cfg.parallel.grad_reduce_dtype = "fp32";
  c.cfg.optim.state_dtype = "fp32";  // what fp32 compute allows; GPUs take the config's below
  try {
    validate_config(c.cfg);
  } catch (const UsageError& e) {
    const std::string m = e.what();
    c.reason =
        (m.find("not supported") != std::string::npos ? "unsupported: " : "divisibility: ") + m;
    return c;
  }
  if (device == "cuda") {
    c.cfg.runtime.device = "cuda";
    c.cfg.train.precision = "bf16";
    c.cfg.parallel.grad_reduce_dtype = base.parallel.grad_reduce_dtype;
    c.cfg.optim.state_dtype = base.optim.state_dtype;
    try {
      validate_config(c.cfg);
    } catch (const UsageError& e) {
      c.not_runnable = e.what();
    }
  }
  if (device != "cuda" && base.optim.state_dtype != "fp32")
    c.not_runnable = "optim.state_dtype=" + base.optim.state_dtype +
                     " needs train.precision=bf16, which CPU clusters are planned without "
                     "(priced with fp32 state)";
  c.feasible = true;  // until sized
  return c;
}

}  // namespace

std::vector<Candidate> enumerate_layouts(const Config& base, const KnobRanges& r,
                                         const std::string& device) {
  std::vector<Candidate> out;
  const auto zs = or_default(r.zero_stage, 0);
  const auto buckets = or_default(r.dp_bucket_mb, 25.0);
  for (int W : r.devices) {
    if (W < 1) throw UsageError("--devices: " + std::to_string(W) + " is not a positive count");
    const auto all = pow2_divisors(W);
    for (int dp : r.dp.empty() ? all : r.dp)
      for (int tp : r.tp.empty() ? all : r.tp)
        for (int pp : r.pp.empty() ? all : r.pp)
          for (int cp : r.cp.empty() ? all : r.cp) {
            if (long(dp) * tp * pp * cp != W) continue;
            for (int sp : or_default(r.sp, 0)) {
              if (sp && tp < 2) continue;  // sequence parallelism runs on the tp group
              for (int z : zs) {
                if (dp * cp == 1 && z != zs.front()) continue;
                for (int v : or_default(r.num_model_chunks, 1)) {
                  if (pp == 1 && v != 1) continue;  // chunks need a pipeline
                  // One stage holds every layer: no split to choose.
                  const auto splits =
                      pp == 1 ? std::vector<std::pair<std::string, std::string>>{{"even", ""}}
                              : splits_for(base, pp, v, r.pipeline_split);
                  for (const auto& [split, layers] : splits)
                    for (int mb : or_default(r.micro_batch, 1))
                      for (int ga :
                           r.global_batch > 0 ? std::vector<int>{0} : or_default(r.grad_accum, 1))
                        for (double bucket : buckets) {
                          // No gradient reduction: the bucket size changes nothing.
                          if (dp * cp == 1 && bucket != buckets.front()) continue;
                          ParallelCfg p = base.parallel;
                          p.dp = dp, p.tp = tp, p.pp = pp, p.cp = cp, p.sp = sp != 0;
                          p.zero_stage = z, p.num_model_chunks = v, p.dp_bucket_mb = bucket;
                          p.pipeline_layers = layers;
                          for (const std::string& ck : or_default(r.act_ckpt, std::string("none")))
                            out.push_back(make_candidate(base, W, p, mb, ga, ck, split,
                                                         r.global_batch, device));
                        }
                }
              }
            }
          }
  }
  return out;
}

namespace {
// Records, sizes and times one valid candidate.
void evaluate_one(Candidate& c, const Cluster& cl) {
  try {
    c.mem = estimate_memory_worst(c.cfg);
    c.time = predict_step(c.cfg, cl);
  } catch (const UsageError&) {
    throw;  // the cluster file lacks what the layout needs: the user's to fix
  } catch (const std::exception& e) {
    c.feasible = false;
    c.reason = std::string("recording: ") + e.what();
    return;
  }
  c.available = cl.memory_bytes - cl.memory_reserved;
  c.timed = true;
  c.feasible = c.mem.peak.total() <= c.available;
  if (!c.feasible)
    c.reason = "memory: predicted peak " + human_bytes(c.mem.peak.total()) + " > " +
               human_bytes(c.available) + " available";
}
}  // namespace

void evaluate(std::vector<Candidate>& out, const Cluster& cl) {
  // Layouts are independent: one recording per thread at a time, on every core.
  std::atomic<size_t> next{0};
  std::exception_ptr err;
  std::mutex mu;
  auto work = [&] {
    for (size_t i; (i = next++) < out.size();) {
      if (!out[i].reason.empty()) continue;  // invalid layout
      try {
        evaluate_one(out[i], cl);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        if (!err) err = std::current_exception();
        next = out.size();
      }
    }
  };
  const unsigned n = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (err) std::rethrow_exception(err);
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    auto rank = [](const Candidate& c) { return c.feasible ? 0 : c.timed ? 1 : 2; };
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    if (rank(a) == 0) return a.time.tokens_per_s > b.time.tokens_per_s;
    if (rank(a) == 1) return a.mem.peak.total() - a.available < b.mem.peak.total() - b.available;
    return false;
  });
}

std::vector<Candidate> plan_space(const Config& base, const KnobRanges& r, const Cluster& cl) {
  std::vector<Candidate> out = enumerate_layouts(base, r, cl.gpu() ? "cuda" : "cpu");
  evaluate(out, cl);
  return out;
}

}  // namespace st::plan
