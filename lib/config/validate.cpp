// Cross-field rules of a config: model shape consistency, what the parallel
// layout needs from the shape, and (resolve_layout) the checks that need the
// world size. Every message names the keys, their values and a valid choice.
#include <filesystem>
#include <string>

#include "config/schema.hpp"
#include "core/error.hpp"
#include "core/ranges.hpp"

namespace st {
namespace config_detail {
namespace {

std::string kv(const char* key, long long v) { return std::string(key) + "=" + std::to_string(v); }

// "a multiple of 6 (e.g. 378 or 384)".
std::string multiple_hint(long long value, long long of) {
  long long lo = value / of * of, hi = lo + of;
  std::string s = "a multiple of " + std::to_string(of) + " (e.g. ";
  if (lo > 0) s += std::to_string(lo) + " or ";
  return s + std::to_string(hi) + ")";
}

void need_divisible(const char* key, long long value, const char* by_key, long long by) {
  if (by > 0 && value % by != 0)
    throw UsageError(kv(key, value) + " is not divisible by " + kv(by_key, by) + "; choose " +
                     std::string(key) + " " + multiple_hint(value, by));
}

}  // namespace

namespace {
// The model's shape: heads divide d_model, an even head_dim for RoPE,
// grouped-query heads that divide the heads.
void validate_model(const ModelCfg& m) {
  need_divisible("model.d_model", m.d_model, "model.n_heads", m.n_heads);
  const int head_dim = m.d_model / m.n_heads;
  if (head_dim % 2 != 0)
    throw UsageError("model.d_model / model.n_heads = " + std::to_string(m.d_model) + " / " +
                     std::to_string(m.n_heads) + " = head_dim " + std::to_string(head_dim) +
                     " is odd; RoPE needs an even head_dim (e.g. d_model=" +
                     std::to_string((head_dim + 1) * m.n_heads) + ")");
  if (m.n_kv_heads > m.n_heads)
    throw UsageError(kv("model.n_kv_heads", m.n_kv_heads) + " exceeds " +
                     kv("model.n_heads", m.n_heads) + "; valid: a divisor of n_heads, at most " +
                     std::to_string(m.n_heads));
  if (m.n_heads % m.n_kv_heads != 0)
    throw UsageError(kv("model.n_heads", m.n_heads) + " is not divisible by " +
                     kv("model.n_kv_heads", m.n_kv_heads) +
                     "; n_kv_heads must divide n_heads (grouped-query attention)");
}

// The token files and the validation split.
void validate_data(const Config& c) {
  const auto& m = c.model;
  if (c.data.source == "file" && c.data.path.empty())
    throw UsageError(
        "data.source=file needs data.path (a token file); set data.path=FILE or "
        "data.source=synthetic");
  // Raw files (also what data.format=auto may find) take their width from
  // data.dtype; llm.c and Megatron headers carry their own.
  if (c.data.source == "file" && (c.data.format == "raw" || c.data.format == "auto") &&
      c.data.dtype == "uint16" && m.vocab_size > 65536)
    throw UsageError(kv("model.vocab_size", m.vocab_size) +
                     " does not fit data.dtype=uint16 (at most 65536); set data.dtype=uint32 "
                     "(the width of raw token files; llm.c and Megatron headers carry their own)");
  if (c.train.eval_interval > 0 && c.data.val_path.empty())
    throw UsageError(kv("train.eval_interval", c.train.eval_interval) +
                     " needs data.val_path (held-out token files); set data.val_path=FILE or "
                     "train.eval_interval=0");
  if (!c.data.val_path.empty() && c.train.eval_interval == 0)
    throw UsageError(
        "data.val_path is set but train.eval_interval=0, so it would never be read; "
        "set train.eval_interval=N (evaluate every N steps) or data.val_path=\"\"");
  if (!c.data.val_path.empty() && c.data.source != "file")
    throw UsageError("data.val_path is set but data.source=" + c.data.source +
                     "; a validation split needs data.source=file");
}

// The parallel layout against the shape, the pipeline split and ZeRO.
void validate_layout(const Config& c) {
  const auto& m = c.model;
  const auto& p = c.parallel;
  need_divisible("model.n_heads", m.n_heads, "parallel.tp", p.tp);
  need_divisible("model.n_kv_heads", m.n_kv_heads, "parallel.tp", p.tp);
  need_divisible("model.ffn_hidden", m.ffn_hidden, "parallel.tp", p.tp);
  need_divisible("model.vocab_size", m.vocab_size, "parallel.tp", p.tp);
  if (p.sp && p.tp < 2)
    throw UsageError(
        "parallel.sp=true needs parallel.tp > 1 (sequence parallelism runs on the "
        "tensor-parallel group); set parallel.tp>=2 or parallel.sp=false");
  if (p.sp) need_divisible("model.seq_len", m.seq_len, "parallel.tp (sp)", p.tp);
  if (p.cp > 1 && m.seq_len % (2 * p.cp) != 0)
    throw UsageError(kv("model.seq_len", m.seq_len) + " is not divisible by 2*parallel.cp = " +
                     std::to_string(2 * p.cp) + " (load-balanced ring attention); choose seq_len " +
                     multiple_hint(m.seq_len, 2 * p.cp));
  if (p.num_model_chunks > 1 && p.pp < 2)
    throw UsageError(
        kv("parallel.num_model_chunks", p.num_model_chunks) +
        " needs parallel.pp > 1 (interleaved pipeline); set parallel.num_model_chunks=1");
  pipeline_layer_counts(c);  // the even split, or parallel.pipeline_layers (pipeline_split.cpp)
  if (p.num_model_chunks > 1 && c.train.grad_accum % p.pp != 0)
    throw UsageError(kv("train.grad_accum", c.train.grad_accum) +
                     " (micro-batches) is not divisible by " + kv("parallel.pp", p.pp) +
                     " as the interleaved schedule needs; choose grad_accum " +
                     multiple_hint(c.train.grad_accum, p.pp));
  if (p.zero_stage < 0 || p.zero_stage > 3)
    throw UsageError(kv("parallel.zero_stage", p.zero_stage) + " is not one of 0|1|2|3");
  if (p.zero_stage == 3 && p.pp > 1)
    throw UsageError(kv("parallel.zero_stage", 3) + " with " + kv("parallel.pp", p.pp) +
                     " is not supported (ZeRO-3 gathers parameters per layer, which the pipeline "
                     "schedules do not interleave); valid: parallel.zero_stage 0|1|2 with pp > 1, "
                     "or parallel.pp=1");
}

// The device, checkpoints and the run's own settings.
void validate_run(const Config& c) {
  // What a device can run is the backend's answer (lib/backend: Backend::supports),
  // asked by the trainer and the dry run; nothing device-specific is refused here.
  if (c.runtime.strict_device && c.runtime.device != "cpu")
    throw UsageError(
        "runtime.strict_device=true is a CPU device for tests; it needs "
        "runtime.device=cpu (got runtime.device=" +
        c.runtime.device + ")");

  // Checkpoint, runtime.
  if (c.checkpoint.keep_last_n < 1)
    throw UsageError(kv("checkpoint.keep_last_n", c.checkpoint.keep_last_n) +
                     " must be >= 1 (the last good checkpoint is never removed)");
  if (const auto w = ranges::parse_step_window("runtime.profile_steps", c.runtime.profile_steps);
      !w.empty() && w.first > long(c.train.steps))
    throw UsageError("runtime.profile_steps: '" + c.runtime.profile_steps +
                     "' starts after the last step (" + kv("train.steps", c.train.steps) +
                     "); nothing would be captured");
  if (c.runtime.name.empty() || c.runtime.name.find('/') != std::string::npos)
    throw UsageError("runtime.name: '" + c.runtime.name +
                     "' is not a valid run name; use a non-empty name without '/'");
  if (c.checkpoint.resume.empty())
    throw UsageError("checkpoint.resume: '' is not valid; use auto, none or a checkpoint path");
  if (!c.runtime.cluster.empty() && !std::filesystem::is_regular_file(c.runtime.cluster))
    throw UsageError("runtime.cluster: '" + c.runtime.cluster +
                     "': no such file (a cluster file: configs/clusters/*.yaml, or one "
                     "`scaletrain-plan calibrate` wrote)");
}
}  // namespace

void validate(const Config& c) {
  validate_model(c.model);
  validate_data(c);
  // Optimizer state: bf16 masters are the bf16 compute weights.
  if (c.optim.state_dtype == "bf16" && c.train.precision == "fp32")
    throw UsageError(
        "optim.state_dtype=bf16 needs bf16 compute weights (the masters are the compute "
        "weights), but train.precision=fp32; set train.precision=bf16 (or auto on a GPU) or "
        "optim.state_dtype=fp32");
  validate_layout(c);
  validate_run(c);
}

}  // namespace config_detail

void validate_config(const Config& cfg) { config_detail::validate(cfg); }

void resolve_layout(Config& cfg, int world_size) {
  auto& p = cfg.parallel;
  if (world_size < 1) throw UsageError("world size " + std::to_string(world_size) + " is < 1");
  const long long model_ranks = 1LL * p.tp * p.pp * p.cp;
  const std::string tpc = "tp*pp*cp = " + std::to_string(p.tp) + "*" + std::to_string(p.pp) + "*" +
                          std::to_string(p.cp) + " = " + std::to_string(model_ranks);
  if (p.dp == 0) {
    if (world_size % model_ranks != 0)
      throw UsageError("parallel.dp=0 derives dp = world / (tp*pp*cp), but world size " +
                       std::to_string(world_size) + " is not divisible by " + tpc +
                       "; run on a multiple of " + std::to_string(model_ranks) +
                       " ranks or change parallel.tp/pp/cp");
    p.dp = static_cast<int>(world_size / model_ranks);
    return;
  }
  const long long product = p.dp * model_ranks;
  if (product != world_size) {
    std::string msg = "parallel layout dp*tp*pp*cp = " + std::to_string(p.dp) + "*" +
                      std::to_string(p.tp) + "*" + std::to_string(p.pp) + "*" +
                      std::to_string(p.cp) + " = " + std::to_string(product) +
                      " does not match the world size " + std::to_string(world_size) + "; ";
    if (world_size % model_ranks == 0)
      msg += "parallel.dp=" + std::to_string(world_size / model_ranks) + " would fit (or " +
             "parallel.dp=0 to derive it)";
    else
      msg += "no dp fits: world size is not divisible by " + tpc +
             "; change parallel.tp/pp/cp or the number of ranks";
    throw UsageError(msg);
  }
}

}  // namespace st
