// The resolved, validated run configuration. Every key lives in one schema
// (schema.cpp) with type, default, range and doc; loading, --set overrides,
// --help, validation errors and docs/config.md are all generated from it.
// Sections and key names follow docs/design.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace st {

// Defaults are the `default` preset (configs/models/default.yaml, ~19.7M params).
struct ModelCfg {
  std::string name = "default";  // preset name or "custom"
  std::string preset;            // model preset loaded first ("" = none)
  int n_layers = 8;
  int d_model = 512;
  int n_heads = 8;
  int n_kv_heads = 2;
  int ffn_hidden = 1152;
  int vocab_size = 256;
  int seq_len = 256;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  double init_std = 0.02;
  std::string init_from;  // Hugging Face Llama folder of initial weights ("" = draw them)
};

struct ParallelCfg {
  int dp = 0;  // 0: world / (tp*pp*cp)
  int tp = 1;
  int pp = 1;
  int cp = 1;
  bool sp = false;
  int zero_stage = 0;
  double dp_bucket_mb = 25.0;
  int num_model_chunks = 1;
  std::string pipeline_layers;             // layers per model chunk, forward order ("" = even)
  std::string grad_reduce_dtype = "fp32";  // fp32|bf16
  bool zero_full_grads = false;            // ZeRO 2/3: full-size gradients across micro-batches
  int grad_staging_layers = 2;             // ZeRO 2/3: layers of gradient staging alive at once
};

struct TrainCfg {
  int steps = 50;
  int micro_batch = 4;
  int grad_accum = 1;
  uint64_t seed = 1234;
  std::string act_ckpt = "none";   // none|selective|full
  std::string precision = "fp32";  // fp32|bf16|auto (app/precision.hpp resolves auto at start)
  std::string precision_choice;    // not a key: why auto chose, set when it is resolved
  int log_every = 1;
  int warmup_steps_excluded = 3;  // steps ignored by throughput summaries
  int stop_after = 0;             // stop cleanly after this global step (0: run all steps)
  int eval_interval = 0;          // evaluate on data.val_path every N steps (0: never)
};

struct OptimCfg {
  double lr = 3e-4;
  double min_lr_ratio = 0.1;
  int warmup_steps = 10;
  std::string schedule = "cosine";  // constant|linear|cosine
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;            // 0 disables
  std::string state_dtype = "fp32";  // fp32|bf16: master weights and moments
};

struct DataCfg {
  std::string source = "synthetic";  // synthetic|file
  std::string path;                  // token file(s) for source=file: file, folder, glob, prefix
  std::string format = "auto";       // auto|raw|llmc|megatron
  std::string dtype = "uint16";      // uint16|uint32 (raw files)
  std::string verify = "read";       // read|full: ids checked as read, or all at start-up too
  std::string val_path;              // held-out token file(s), same forms; "" = no evaluation
  int val_batches = 4;               // global batches per evaluation
};

struct CheckpointCfg {
  int interval = 0;       // 0 disables
  bool save_last = true;  // with interval > 0: the last step is saved too
  std::string dir;        // default: <out>/checkpoints
  int keep_last_n = 2;
  std::string resume = "auto";        // auto|none|PATH
  std::string mode = "async";         // async|sync
  std::string on_error = "continue";  // continue|abort
  double test_busy_write_s = 0;       // fault injection: the writer spins this long per save
  int probe_mb = 64;                  // storage probe at start (MiB by one writer); 0 = off
};

struct RuntimeCfg {
  std::string device = "cpu";  // cpu|cuda
  bool strict_device = false;  // CPU: worker-thread streams, NaN-filled allocations (tests)
  std::string out;             // default: results/runs/<name>-<timestamp>
  std::string name = "run";
  int threads = 0;             // OpenMP threads/rank; 0 = cores (quota-capped) / ranks
  double timeout_s = 600.0;    // collective / wait timeout
  bool mpi_ring = true;        // CPU ranks: large collectives round the communicator's own ring
  double cpu_peak_gflops = 0;  // 0 = measure at start (for MFU on CPU)
  double gpu_peak_tflops = 0;  // 0 = the device's entry in the metrics peak table
  std::string attention_backward = "fast";  // fast|deterministic (CUDA: cuDNN or block kernels)
  int head_chunk_mb = 0;  // LM head chunk: logits MiB per chunk; 0 = 2^22 logits (>= 64 rows)
  std::string trace = "collectives";  // off|phases|collectives: telemetry trace records
  int flight_recorder = 256;          // collectives kept per communicator; 0 = off
  bool tensorboard = true;            // rank 0 writes <out>/tensorboard/ event files
  std::string profile_steps;          // A-B: the CUDA profiler's capture window; "" = off
  std::string cluster;                // the cluster file of where it runs; "" = default
};

struct Config {
  ModelCfg model;
  ParallelCfg parallel;
  TrainCfg train;
  OptimCfg optim;
  DataCfg data;
  CheckpointCfg checkpoint;
  RuntimeCfg runtime;
  std::string config_path;             // the --config file, if any
  std::vector<std::string> overrides;  // the --set lines, as given
};

// Loads a YAML file (may include a model preset via `model: {preset: NAME}`),
// applies `a.b=c` overrides, checks every key against the schema and the
// cross-field rules that do not need the world size. Throws UsageError whose
// message names the key, the value and what would be valid.
Config load_config(const std::string& yaml_path, const std::vector<std::string>& overrides);

// The cross-field checks load_config runs (model shape, the layout against
// the shape, the backend), for a Config changed in code (scaletrain-plan's
// layouts). Throws UsageError naming the keys.
void validate_config(const Config& cfg);

// The layers of every model chunk (virtual pipeline stage) in forward order:
// pp * num_model_chunks counts; chunk c of pipeline stage s is entry c*pp + s.
// parallel.pipeline_layers when set ("15,16*6,15": a count, or COUNT*REPEAT),
// else the even split. Throws UsageError naming the key and what is valid.
std::vector<int> pipeline_layer_counts(const Config& cfg);

// Checks that need the world size (dp*tp*pp*cp == world, ...); fills dp=0.
void resolve_layout(Config& cfg, int world_size);

// The resolved config as YAML (for --dry-run and run.json's text form).
std::string config_to_yaml(const Config& cfg);
// The resolved config as a JSON object string (for run.json).
std::string config_to_json(const Config& cfg);

// Throws the loader's own UsageError when `value` is not one of the
// schema's choices for section.name, so code handed such a value outside a
// Config (a shard's format, say) checks it against the one list. `where`
// names the source in the message, as in load_config's ("" for none).
void check_choice(const std::string& section, const std::string& name, const std::string& value,
                  const std::string& where = "");

// Every key with type, default, range and doc, as text for --help.
std::string config_help();
// The same, as Markdown (docs/config.md is generated from this).
std::string config_reference_markdown();

// Directory holding model presets (configs/models), found relative to the
// source tree or SCALETRAIN_CONFIG_DIR.
std::string preset_dir();
}  // namespace st
