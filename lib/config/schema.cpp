// The one table of config keys (type, range or choices, doc, target field),
// and the typed parse/format of a single value. Parsing, --help, validation
// messages and docs/config.md all read this table; defaults come from the
// structs in config.hpp through each entry's field pointer.
#include "config/schema.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/error.hpp"
#include "core/util.hpp"

namespace st::config_detail {
namespace {

template <class T>
constexpr Type type_of(bool has_choices) {
  if constexpr (std::is_same_v<T, int>) return Type::Int;
  if constexpr (std::is_same_v<T, uint64_t>) return Type::UInt64;
  if constexpr (std::is_same_v<T, double>) return Type::Float;
  if constexpr (std::is_same_v<T, bool>) return Type::Bool;
  if constexpr (std::is_same_v<T, std::string>) return has_choices ? Type::Enum : Type::String;
}

template <class S, class T>
Key make(S Config::*sec, const char* section, const char* name, T S::*member, std::string doc,
         std::vector<std::string> choices = {}, bool ranged = false, double lo = 0, double hi = 0) {
  Key k;
  k.section = section;
  k.name = name;
  k.type = type_of<T>(!choices.empty());
  k.choices = std::move(choices);
  k.ranged = ranged;
  k.min = lo;
  k.max = hi;
  k.doc = std::move(doc);
  k.field = [sec, member](Config& c) -> void* { return &((c.*sec).*member); };
  return k;
}

// F(model, n_layers) expands to the section pointer, both names, and the member.
#define F(sec, key) &Config::sec, #sec, #key, &decltype(Config::sec)::key

template <class S, class T>
Key num(S Config::*sec, const char* s, const char* n, T S::*m, double lo, double hi,
        std::string doc) {
  return make(sec, s, n, m, std::move(doc), {}, true, lo, hi);
}
template <class S, class T>
Key any(S Config::*sec, const char* s, const char* n, T S::*m, std::string doc) {
  return make(sec, s, n, m, std::move(doc));
}
template <class S>
Key choice(S Config::*sec, const char* s, const char* n, std::string S::*m,
           std::vector<std::string> choices, std::string doc) {
  return make(sec, s, n, m, std::move(doc), std::move(choices));
}

constexpr double kBig = 1e9;

std::vector<Key> model_keys() {
  return {
      // model: the transformer's shape (Llama style: RMSNorm, RoPE, GQA, SwiGLU, untied head).
      any(F(model, preset),
          "model preset loaded first from configs/models/NAME.yaml; keys set next to it override "
          "it"),
      any(F(model, name),
          "label of the model shape in run.json and reports (preset name by default)"),
      num(F(model, n_layers), 1, 4096, "number of transformer blocks"),
      num(F(model, d_model), 1, 1 << 20, "hidden size"),
      num(F(model, n_heads), 1, 4096, "attention (query) heads; head_dim = d_model / n_heads"),
      num(F(model, n_kv_heads), 1, 4096,
          "key/value heads (grouped-query attention); divides n_heads"),
      num(F(model, ffn_hidden), 1, 1 << 22, "SwiGLU MLP inner size"),
      num(F(model, vocab_size), 2, 1 << 26, "vocabulary size (256 = bytes)"),
      num(F(model, seq_len), 1, 1 << 22, "tokens per sequence"),
      num(F(model, rope_theta), 1, 1e9, "RoPE base frequency"),
      num(F(model, norm_eps), 1e-12, 0.1, "RMSNorm epsilon"),
      num(F(model, init_std), 0, 1, "std of the normal initialization of weights"),
      any(F(model, init_from),
          "initial weights from a Hugging Face Llama folder (config.json and safetensors, "
          "e.g. written by scaletrain-convert export) instead of drawing them: its shape must "
          "be the model keys', each rank reads only the slices it holds (docs/convert.md); a "
          "resumed checkpoint takes precedence; empty = draw with init_std"),
  };
}

std::vector<Key> parallel_keys() {
  return {
      // parallel: Megatron's names; the mesh is pp x dp x cp x tp.
      num(F(parallel, dp), 0, 1 << 24, "data-parallel size; 0 = world / (tp*pp*cp)"),
      num(F(parallel, tp), 1, 4096, "tensor-parallel size"),
      num(F(parallel, pp), 1, 4096, "pipeline-parallel stages"),
      num(F(parallel, cp), 1, 4096, "context-parallel size (ring attention over the sequence)"),
      any(F(parallel, sp), "sequence parallelism on the tensor-parallel group (needs tp > 1)"),
      num(F(parallel, zero_stage), 0, 3,
          "ZeRO stage: 0 none, 1 optimizer state, 2 + gradients, 3 + parameters sharded over dp"),
      num(F(parallel, dp_bucket_mb), 0.001, 1e5, "gradient bucket size in MiB for the dp reduce"),
      choice(F(parallel, grad_reduce_dtype), {"fp32", "bf16"},
             "precision of the data-parallel gradient reduction (bf16 halves the bytes)"),
      any(F(parallel, zero_full_grads),
          "ZeRO 2/3: keep full-size fp32 gradients across the micro-batches and reduce-scatter "
          "once per step (fewer collectives, the whole gradient in memory); false: backward "
          "writes each bucket into a staging buffer and every micro-batch is reduce-scattered "
          "into the gradient shard"),
      num(F(parallel, grad_staging_layers), 1, 64,
          "ZeRO 2/3: layers of gradient staging buffers alive at once; 2 lets a layer's "
          "reduce-scatter overlap the next layer's backward, 1 holds the least memory"),
      num(F(parallel, num_model_chunks), 1, 1024,
          "model chunks per pipeline stage (> 1 = interleaved 1F1B)"),
      any(F(parallel, pipeline_layers),
          "uneven pipeline split: the layers of each model chunk in forward order, pp * "
          "num_model_chunks comma-separated counts (chunk c of stage s is entry c*pp + s), each "
          ">= 1 and summing to model.n_layers; COUNT*REPEAT repeats a count (\"15,16*6,15\" is "
          "torchtitan's split of Llama 3.1 405B over pp 8); \"\" = the even split, which needs "
          "n_layers divisible by pp * num_model_chunks"),
  };
}

std::vector<Key> train_keys() {
  return {
      // train
      num(F(train, steps), 1, kBig, "optimizer steps to run"),
      num(F(train, micro_batch), 1, 1 << 20, "sequences per micro-batch per dp rank"),
      num(F(train, grad_accum), 1, 1 << 20,
          "micro-batches per step (gradient accumulation / pipeline micro-batches)"),
      any(F(train, seed), "random seed (weights, synthetic data); same result for any layout"),
      choice(F(train, act_ckpt), {"none", "selective", "full"},
             "activation checkpointing: none, selective (attention core), full (whole block)"),
      choice(F(train, precision), {"fp32", "bf16", "auto"},
             "compute precision: activations and the weights the GEMMs read (gradients stay "
             "fp32, master weights and optimizer state as optim.state_dtype says); bf16 GEMMs "
             "accumulate in fp32 (oneDNN's "
             "bf16 matmul on CPUs with AVX512-BF16 or AMX, else widened to fp32 sgemm), the "
             "other kernels round where the CUDA kernels do; auto: bf16 on GPUs and where every "
             "rank's CPU multiplies bf16 in hardware, else fp32 (the log, run.json and the "
             "report say which and why)"),
      num(F(train, log_every), 1, kBig, "print a progress line on rank 0 every N steps"),
      num(F(train, warmup_steps_excluded), 0, kBig, "first steps left out of throughput summaries"),
      num(F(train, stop_after), 0, kBig,
          "stop cleanly after this global step, keeping train.steps for the LR schedule (0: off)"),
      num(F(train, eval_interval), 0, kBig,
          "evaluate the loss on data.val_path every N steps and after the last (0: never)"),
  };
}

std::vector<Key> optim_keys() {
  return {
      // optim: AdamW
      num(F(optim, lr), 0, 10, "peak learning rate"),
      num(F(optim, min_lr_ratio), 0, 1, "final learning rate as a fraction of lr"),
      num(F(optim, warmup_steps), 0, kBig, "linear warm-up steps"),
      choice(F(optim, schedule), {"constant", "linear", "cosine"}, "decay after warm-up"),
      num(F(optim, weight_decay), 0, 10, "AdamW decoupled weight decay"),
      num(F(optim, beta1), 0, 0.999999, "AdamW beta1"),
      num(F(optim, beta2), 0, 0.999999, "AdamW beta2"),
      num(F(optim, eps), 0, 1, "AdamW epsilon"),
      num(F(optim, grad_clip), 0, 1e6, "clip the global gradient norm to this; 0 disables"),
      choice(F(optim, state_dtype), {"fp32", "bf16"},
             "master weights and AdamW moments: fp32 (separate fp32 masters beside the bf16 "
             "compute weights; 18 B a parameter with fp32 gradients) or bf16 (the compute "
             "weights are the masters, moments in bf16, each stored with stochastic rounding; "
             "10 B a parameter, what fits an 8B model on one 141 GB GPU); bf16 needs "
             "train.precision=bf16"),
  };
}

std::vector<Key> data_keys() {
  return {
      // data
      choice(F(data, source), {"synthetic", "file"},
             "synthetic (seeded tokens) or file (memory-mapped token file)"),
      any(F(data, path),
          "token file(s) for source=file: a file, a folder (its *.bin in name order), a glob, or "
          "a Megatron prefix (relative to the working directory; docs/data.md)"),
      choice(F(data, format), {"auto", "raw", "llmc", "megatron"},
             "token file format; auto: llm.c magic -> llmc, a .idx beside -> megatron, else raw"),
      choice(F(data, dtype), {"uint16", "uint32"},
             "id width of raw files (llmc and megatron headers carry their own)"),
      choice(F(data, verify), {"read", "full"},
             "when token ids are checked: read (each id as a sample first reads it; an id no "
             "sample reads is never checked) or full (also every id and index entry of every "
             "file once at start-up, reporting each bad id with its shard and byte offset)"),
      any(F(data, val_path),
          "held-out token file(s) for train.eval_interval, same forms and format as data.path"),
      num(F(data, val_batches), 1, 1 << 20, "global batches of held-out windows per evaluation"),
  };
}

std::vector<Key> checkpoint_keys() {
  return {
      // checkpoint
      num(F(checkpoint, interval), 0, kBig, "save every N steps; 0 disables"),
      any(F(checkpoint, save_last),
          "with checkpoints on, also save the last step when it is not a multiple of interval"),
      any(F(checkpoint, dir), "checkpoint folder; empty = <runtime.out>/checkpoints"),
      num(F(checkpoint, keep_last_n), 1, 1 << 20, "committed checkpoints kept; older are removed"),
      any(F(checkpoint, resume),
          "auto (newest committed checkpoint in dir, if any), none, or a step folder path"),
      choice(F(checkpoint, mode), {"async", "sync"},
             "async: snapshot then write in background; sync: write before the next step"),
      choice(F(checkpoint, on_error), {"continue", "abort"},
             "on a failed save: keep training (previous checkpoint stays) or stop"),
      num(F(checkpoint, probe_mb), 0, 4096,
          "with checkpoints on, the storage probe at start: MiB written (fdatasync) and read "
          "cold in checkpoint.dir by one rank alone, then by every rank of the node at once "
          "(each at most the node's largest save per rank, at least probe_mb / ranks and 1 MiB); "
          "recorded in run.json `storage`, each checkpoint's bandwidth reported as a share of "
          "it (below a rank's checkpoint bytes, caches may inflate it); 0 = no probe"),
      num(F(checkpoint, test_busy_write_s), 0, 3600,
          "fault injection for tests: the background writer keeps a core busy this many "
          "seconds per save after writing its file, so the report's background interference "
          "shows; 0 = off"),
  };
}

std::vector<Key> runtime_keys() {
  return {
      // runtime
      choice(F(runtime, device), {"cpu", "cuda"},
             "compute backend (cuda: the CUDA backend library, loaded at start-up)"),
      any(F(runtime, strict_device),
          "CPU only, for tests: run each stream on its own worker thread and fill fresh "
          "allocations with NaN, so a missing wait or a read of unwritten memory shows up on a "
          "CPU"),
      choice(F(runtime, attention_backward), {"fast", "deterministic"},
             "causal attention backward on GPUs: fast = cuDNN's fused kernel (dQ accumulated "
             "with atomics: two identical steps may differ in the last bits); deterministic = "
             "bitwise repeatable: cuDNN's deterministic backward on Hopper (sm_9x), the custom "
             "block kernels elsewhere (slower: fp32 FMAs, no tensor cores). CPU ranks are "
             "deterministic either way"),
      num(F(runtime, head_chunk_mb), 0, 1 << 20,
          "LM head and cross-entropy in row chunks whose logits take at most this many MiB "
          "(in the compute dtype; each chunk's head-gradient GEMM reads and writes the whole "
          "fp32 head gradient, so fewer, larger chunks move less memory at a large "
          "vocabulary); 0 = the former rule, about 4M logits (at least 64 rows) a chunk"),
      any(F(runtime, out), "run folder; empty = results/runs/<name>-<timestamp>"),
      any(F(runtime, name), "run name (run folder, reports)"),
      num(F(runtime, threads), 0, 4096,
          "OpenMP threads per rank; 0 = cores (capped by a cgroup CPU quota) / local ranks, at "
          "least 1"),
      num(F(runtime, timeout_s), 1, 1e7, "timeout in seconds for collectives and waits"),
      any(F(runtime, mpi_ring),
          "CPU ranks (MPI carries the collectives): large all-reduces, reduce-scatters and "
          "all-gathers go round the communicator's own ring of point-to-point messages, every "
          "link busy every round, instead of Open MPI's non-blocking calls (whose all-reduce "
          "is a reduce to one rank and a broadcast); false = Open MPI's own. The reason, "
          "measured on the emulated cluster: results/mpi-ring-emucluster-20261207 "
          "(scripts/bench-mpi-ring.sh)"),
      num(F(runtime, cpu_peak_gflops), 0, 1e9,
          "peak GFLOP/s per rank for MFU on CPU; 0 = measure at start"),
      num(F(runtime, gpu_peak_tflops), 0, 1e6,
          "peak bf16 TFLOP/s per GPU for MFU with runtime.device=cuda; 0 = the device's dense "
          "peak from the metrics table (start-up fails for a device not in it)"),
      choice(F(runtime, trace), {"off", "phases", "collectives"},
             "per-step trace records in the telemetry (`scaletrain-analyze trace`): off; "
             "phases (forward and backward per micro-batch, optimizer, signal vote, checkpoint); "
             "collectives (phases and every collective on its group's track)"),
      num(F(runtime, flight_recorder), 0, 1 << 20,
          "collectives each communicator keeps for the flight recorder, written to "
          "<runtime.out>/flight/ when the job ends abnormally; 0 = off"),
      any(F(runtime, tensorboard),
          "rank 0 writes TensorBoard event files of the telemetry (loss, lr, rates, MFU, step "
          "parts, memory, checkpoints) to <runtime.out>/tensorboard/ as the run goes "
          "(docs/tensorboard.md); needs a build with protobuf (SCALETRAIN_TENSORBOARD), "
          "without it the log says none are written"),
      any(F(runtime, profile_steps),
          "steps A-B (1-based, inclusive; e.g. 10-12) between cudaProfilerStart and "
          "cudaProfilerStop, for `nsys profile --capture-range=cudaProfilerApi` "
          "(docs/cuda.md); empty = off; CPU ranks ignore it"),
      any(F(runtime, cluster),
          "the cluster file (configs/clusters/*.yaml, docs/planner.md) that describes the "
          "machines this run runs on: run.json's start-up prediction, the report and the "
          "campaign plots price the step with it and name it; the campaign drivers and "
          "scripts/multinode-study.sh pass theirs. Empty = $SCALETRAIN_CLUSTER_FILE, else for "
          "runtime.device=cpu the source tree's configs/clusters/cpu-local.yaml (this "
          "machine's calibration), else none"),
  };
}

// Every key, section by section in docs/design.md's order.
std::vector<Key> build() {
  std::vector<Key> all;
  for (auto part : {model_keys, parallel_keys, train_keys, optim_keys, data_keys, checkpoint_keys,
                    runtime_keys})
    for (Key& k : part()) all.push_back(std::move(k));
  return all;
}
#undef F

// Shortest text that reads back as the same double; whole numbers in full (1000000000, not 1e+09).
std::string fmt_double(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  return s;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string in_where(const std::string& where) { return where.empty() ? "" : " (" + where + ")"; }

[[noreturn]] void bad_type(const Key& k, const std::string& raw, const std::string& where,
                           const std::string& expected) {
  throw UsageError(k.full() + ": '" + raw + "' is not " + expected + in_where(where));
}

void check_range(const Key& k, double v, const std::string& raw, const std::string& where) {
  if (k.ranged && (v < k.min || v > k.max))
    throw UsageError(k.full() + ": " + raw + " is out of range; allowed " + range_text(k) +
                     in_where(where));
}

}  // namespace

const std::vector<Key>& schema() {
  static const std::vector<Key> table = build();
  return table;
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> s = [] {
    std::vector<std::string> out;
    for (const auto& k : schema())
      if (std::find(out.begin(), out.end(), k.section) == out.end()) out.push_back(k.section);
    return out;
  }();
  return s;
}

const Key* find_key(const std::string& section, const std::string& name) {
  for (const auto& k : schema())
    if (k.section == section && k.name == name) return &k;
  return nullptr;
}

std::string type_name(Type t) {
  switch (t) {
    case Type::Int:
      return "int";
    case Type::UInt64:
      return "uint64";
    case Type::Float:
      return "float";
    case Type::Bool:
      return "bool";
    case Type::String:
      return "string";
    case Type::Enum:
      return "enum";
  }
  return "?";
}

std::string range_text(const Key& k) {
  if (k.type == Type::Enum) {
    std::string s;
    for (const auto& c : k.choices) s += (s.empty() ? "" : "|") + c;
    return s;
  }
  if (k.type == Type::Bool) return "true|false";
  if (k.type == Type::UInt64) return "[0, 2^64-1]";
  if (!k.ranged) return "";
  return "[" + fmt_double(k.min) + ", " + fmt_double(k.max) + "]";
}

namespace {
void check_enum(const Key& k, const std::string& raw, const std::string& where) {
  if (std::find(k.choices.begin(), k.choices.end(), raw) != k.choices.end()) return;
  std::string hint = closest(raw, k.choices);
  throw UsageError(k.full() + ": '" + raw + "' is not one of " + range_text(k) +
                   (hint.empty() ? "" : "; did you mean '" + hint + "'?") + in_where(where));
}
}  // namespace

void set_value(const Key& k, Config& cfg, const std::string& raw, const std::string& where) {
  void* p = k.field(cfg);
  const char* b = raw.data();
  const char* e = raw.data() + raw.size();
  switch (k.type) {
    case Type::Int: {
      long long v = 0;
      auto r = std::from_chars(b, e, v);
      if (raw.empty() || r.ec == std::errc::invalid_argument || r.ptr != e)
        bad_type(k, raw, where, "an int (expected an integer in " + range_text(k) + ")");
      if (r.ec == std::errc::result_out_of_range)
        throw UsageError(k.full() + ": " + raw + " is out of range; allowed " + range_text(k) +
                         in_where(where));
      check_range(k, static_cast<double>(v), raw, where);
      *static_cast<int*>(p) = static_cast<int>(v);
      return;
    }
    case Type::UInt64: {
      uint64_t v = 0;
      auto r = std::from_chars(b, e, v);
      if (raw.empty() || r.ec != std::errc() || r.ptr != e)
        bad_type(k, raw, where, "a uint64 (expected an integer in [0, 2^64-1])");
      *static_cast<uint64_t*>(p) = v;
      return;
    }
    case Type::Float: {
      double v = 0;
      auto r = std::from_chars(b, e, v);
      if (raw.empty() || r.ec == std::errc::invalid_argument || r.ptr != e || std::isnan(v) ||
          std::isinf(v))
        bad_type(k, raw, where, "a float (expected a finite number in " + range_text(k) + ")");
      if (r.ec == std::errc::result_out_of_range)
        throw UsageError(k.full() + ": " + raw + " is out of range; allowed " + range_text(k) +
                         in_where(where));
      check_range(k, v, raw, where);
      *static_cast<double*>(p) = v;
      return;
    }
    case Type::Bool: {
      std::string l = lower(raw);
      bool v;
      if (l == "true" || l == "yes" || l == "on" || l == "1")
        v = true;
      else if (l == "false" || l == "no" || l == "off" || l == "0")
        v = false;
      else
        bad_type(k, raw, where, "a bool (expected true or false)");
      *static_cast<bool*>(p) = v;
      return;
    }
    case Type::String:
      // Strings land in run.json, telemetry and reports, which are UTF-8.
      if (const size_t at = utf8_invalid_at(raw); at != std::string::npos)
        throw UsageError(k.full() + ": '" + escape_bytes(raw) + "' is not valid UTF-8 (byte " +
                         std::to_string(at) + "); it is recorded in run.json and telemetry, " +
                         "which are UTF-8 JSON" + in_where(where));
      *static_cast<std::string*>(p) = raw;
      return;
    case Type::Enum: {
      check_enum(k, raw, where);
      *static_cast<std::string*>(p) = raw;
      return;
    }
  }
}

std::string get_value(const Key& k, const Config& cfg) {
  void* p = k.field(const_cast<Config&>(cfg));
  switch (k.type) {
    case Type::Int:
      return std::to_string(*static_cast<int*>(p));
    case Type::UInt64:
      return std::to_string(*static_cast<uint64_t*>(p));
    case Type::Float:
      return fmt_double(*static_cast<double*>(p));
    case Type::Bool:
      return *static_cast<bool*>(p) ? "true" : "false";
    case Type::String:
    case Type::Enum:
      return *static_cast<std::string*>(p);
  }
  return "";
}

std::string default_value(const Key& k) {
  static const Config defaults{};
  return get_value(k, defaults);
}

}  // namespace st::config_detail

namespace st {
void check_choice(const std::string& section, const std::string& name, const std::string& value,
                  const std::string& where) {
  const config_detail::Key* k = config_detail::find_key(section, name);
  ST_CHECK(k && k->type == config_detail::Type::Enum, section, ".", name,
           " is not a choice key of the schema");
  config_detail::check_enum(*k, value, where);
}
}  // namespace st
