// Implementation of hf_llama.hpp: the name table, config.json both ways, the
// shard plan of an export and the checked reader of a Hugging Face folder.
#include "convert/hf_llama.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/error.hpp"
#include "core/util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace st::hf {
namespace {

std::string shape_text(const std::vector<int64_t>& s) { return json(s).dump(); }

// Names checked in config.json against the model config: (key, value here,
// the model key, HF's default when the key is absent, or -1: required).
struct IntField {
  const char* key;
  int64_t ours;
  const char* model_key;
  int64_t dflt;
};
}  // namespace

std::vector<Weight> weights(const ModelCfg& m) {
  const int64_t d = m.d_model, hd = m.d_model / m.n_heads, F = m.ffn_hidden, V = m.vocab_size;
  const int64_t q = int64_t(m.n_heads) * hd, kv = int64_t(m.n_kv_heads) * hd;
  std::vector<Weight> w;
  w.push_back({"tok_embeddings.weight", "model.embed_tokens.weight", {V, d}, 0});
  for (int l = 0; l < m.n_layers; ++l) {
    const std::string o = "layers." + std::to_string(l) + ".";
    const std::string h = "model.layers." + std::to_string(l) + ".";
    w.push_back({o + "attention_norm.weight", h + "input_layernorm.weight", {d}, 0});
    w.push_back({o + "attention.wq.weight", h + "self_attn.q_proj.weight", {q, d}, m.n_heads});
    w.push_back({o + "attention.wk.weight", h + "self_attn.k_proj.weight", {kv, d}, m.n_kv_heads});
    w.push_back({o + "attention.wv.weight", h + "self_attn.v_proj.weight", {kv, d}, 0});
    w.push_back({o + "attention.wo.weight", h + "self_attn.o_proj.weight", {d, q}, 0});
    w.push_back({o + "ffn_norm.weight", h + "post_attention_layernorm.weight", {d}, 0});
    w.push_back({o + "feed_forward.w1.weight", h + "mlp.gate_proj.weight", {F, d}, 0});
    w.push_back({o + "feed_forward.w3.weight", h + "mlp.up_proj.weight", {F, d}, 0});
    w.push_back({o + "feed_forward.w2.weight", h + "mlp.down_proj.weight", {d, F}, 0});
  }
  w.push_back({"norm.weight", "model.norm.weight", {d}, 0});
  w.push_back({"output.weight", "lm_head.weight", {V, d}, 0});
  return w;
}

json config_json(const ModelCfg& m, const std::string& torch_dtype) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", m.d_model},
          {"intermediate_size", m.ffn_hidden},
          {"num_attention_heads", m.n_heads},
          {"num_key_value_heads", m.n_kv_heads},
          {"num_hidden_layers", m.n_layers},
          {"head_dim", m.d_model / m.n_heads},
          {"rms_norm_eps", m.norm_eps},
          {"rope_theta", m.rope_theta},
          {"rope_scaling", nullptr},
          {"vocab_size", m.vocab_size},
          {"max_position_embeddings", m.seq_len},
          {"tie_word_embeddings", false},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"mlp_bias", false},
          {"initializer_range", m.init_std},
          {"pretraining_tp", 1},
          {"use_cache", true},
          {"torch_dtype", torch_dtype}};
}

json index_json(const json& weight_map, uint64_t total_size) {
  return {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
}

std::vector<ShardPlan> plan_shards(const ModelCfg& m, const std::string& dtype,
                                   uint64_t shard_bytes) {
  const uint64_t eb = safetensors::dtype_bytes(dtype);
  std::vector<ShardPlan> plan;
  for (const Weight& w : weights(m)) {
    uint64_t bytes = eb;
    for (int64_t s : w.shape) bytes *= uint64_t(s);
    if (plan.empty() ||
        (plan.back().data_bytes > 0 && plan.back().data_bytes + bytes > shard_bytes))
      plan.emplace_back();
    plan.back().weights.push_back(w);
    plan.back().data_bytes += bytes;
  }
  const size_t n = plan.size();
  for (size_t i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    plan[i].file = n == 1 ? "model.safetensors" : name;
  }
  return plan;
}

uint64_t export_bytes(const ModelCfg& m, const std::string& dtype, uint64_t shard_bytes) {
  uint64_t total = 0, data = 0;
  json wm = json::object();
  for (const ShardPlan& s : plan_shards(m, dtype, shard_bytes)) {
    std::vector<safetensors::OutTensor> t;
    for (const Weight& w : s.weights) {
      t.push_back({w.hf, dtype, w.shape, nullptr});
      wm[w.hf] = s.file;
    }
    total += 8 + safetensors::header_json(t, {{"format", "pt"}}).size() + s.data_bytes;
    data += s.data_bytes;
  }
  total += index_json(wm, data).dump(2).size();
  total += config_json(m, dtype == "BF16" ? "bfloat16" : "float32").dump(2).size();
  return total;
}

ExportCost export_cost(const ModelCfg& m, const std::string& dtype, uint64_t shard_bytes) {
  const bool bf16 = dtype == "BF16";
  ExportCost c;
  for (const ShardPlan& s : plan_shards(m, dtype, shard_bytes))
    c.params += s.data_bytes / (bf16 ? 2 : 4);
  c.read_bytes = 16 * c.params;
  c.write_bytes = export_bytes(m, dtype, shard_bytes);
  c.cpu_s = double(c.params) * (bf16 ? 31e-9 : 41e-9);
  return c;
}

namespace {
// config.json against the model keys: a Llama of the same shape, norm eps
// and RoPE base, no RoPE scaling, SwiGLU, no biases. Returns whether the
// embedding and the head are tied.
bool check_llama_config(const std::string& cpath, const ModelCfg& m) {
  json c = json::parse(read_file(cpath), nullptr, false);
  if (c.is_discarded() || !c.is_object()) throw UsageError("'" + cpath + "' is not a JSON object");
  if (c.contains("model_type") && c["model_type"] != "llama")
    throw UsageError("'" + cpath + "': model_type is " + c["model_type"].dump() +
                     ", expected \"llama\" (LlamaForCausalLM)");
  const int64_t H = m.n_heads;
  const IntField ints[] = {
      {"hidden_size", m.d_model, "model.d_model", -1},
      {"intermediate_size", m.ffn_hidden, "model.ffn_hidden", -1},
      {"num_attention_heads", H, "model.n_heads", -1},
      {"num_key_value_heads", m.n_kv_heads, "model.n_kv_heads",
       c.value("num_attention_heads", json(-1)).is_number_integer()
           ? c.value("num_attention_heads", json(-1)).get<int64_t>()
           : -1},
      {"num_hidden_layers", m.n_layers, "model.n_layers", -1},
      {"vocab_size", m.vocab_size, "model.vocab_size", -1},
      {"head_dim", m.d_model / m.n_heads, "model.d_model / model.n_heads", m.d_model / m.n_heads}};
  for (const IntField& f : ints) {
    int64_t v = f.dflt;
    if (c.contains(f.key) && !c[f.key].is_null()) {
      if (!c[f.key].is_number_integer())
        throw UsageError("'" + cpath + "': " + f.key + " is " + c[f.key].dump() +
                         ", expected an integer");
      v = c[f.key].get<int64_t>();
    } else if (f.dflt < 0) {
      throw UsageError("'" + cpath + "': no '" + f.key + "' (expected " + std::to_string(f.ours) +
                       ", the config's " + f.model_key + ")");
    }
    if (v != f.ours)
      throw UsageError("'" + cpath + "': " + f.key + " is " + std::to_string(v) + " but " +
                       f.model_key + " is " + std::to_string(f.ours) +
                       " (set the model keys to the folder's shape)");
  }
  auto real = [&](const char* key, double ours, const char* model_key, double dflt) {
    double v = dflt;
    if (c.contains(key) && !c[key].is_null()) {
      if (!c[key].is_number())
        throw UsageError("'" + cpath + "': " + key + " is " + c[key].dump() +
                         ", expected a number");
      v = c[key].get<double>();
    }
    if (std::abs(v - ours) > 1e-12 * std::abs(ours))
      throw UsageError(detail::cat("'", cpath, "': ", key, " is ", v, " but ", model_key, " is ",
                                   ours, " (set ", model_key, "=", v, ")"));
  };
  real("rms_norm_eps", m.norm_eps, "model.norm_eps", 1e-6);
  real("rope_theta", m.rope_theta, "model.rope_theta", 10000.0);
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
    throw UsageError("'" + cpath + "': rope_scaling is " + c["rope_scaling"].dump() +
                     "; scaletrain's RoPE has no scaling (expected null)");
  if (c.value("hidden_act", std::string("silu")) != "silu")
    throw UsageError("'" + cpath + "': hidden_act is " + c["hidden_act"].dump() +
                     ", expected \"silu\" (SwiGLU)");
  for (const char* b : {"attention_bias", "mlp_bias"})
    if (c.value(b, false) != false)
      throw UsageError("'" + cpath + "': " + b + " is true; scaletrain's Llama has no biases");
  return c.value("tie_word_embeddings", false);
}

// Where each tensor is: the index's weight_map (HF name -> file name), or
// the one file (an empty map; map_source names which).
std::map<std::string, std::string> weight_map(const std::string& dir, std::string& map_source) {
  std::error_code ec;
  const std::string ipath = (fs::path(dir) / "model.safetensors.index.json").string();
  const std::string single = (fs::path(dir) / "model.safetensors").string();
  std::map<std::string, std::string> where;  // HF name -> file name
  if (fs::exists(ipath, ec)) {
    map_source = ipath;
    json idx = json::parse(read_file(ipath), nullptr, false);
    if (idx.is_discarded() || !idx.is_object() || !idx.contains("weight_map") ||
        !idx["weight_map"].is_object())
      throw UsageError("'" + ipath + "': not a JSON object with a 'weight_map' object");
    for (auto& [k, v] : idx["weight_map"].items()) {
      if (!v.is_string())
        throw UsageError("'" + ipath + "': weight_map['" + k + "'] is not a file name");
      const std::string f = v.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        throw UsageError("'" + ipath + "': weight_map['" + k + "'] is '" + f +
                         "', expected a file name in the folder");
      where[k] = f;
    }
  } else if (fs::exists(single, ec)) {
    map_source = single;
  } else {
    throw UsageError("'" + dir +
                     "' holds neither model.safetensors nor "
                     "model.safetensors.index.json");
  }
  return where;
}
}  // namespace

Folder::Folder(const std::string& dir, const ModelCfg& m) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError("'" + dir +
                     "' is not a folder (expected a Hugging Face Llama folder: "
                     "config.json and model.safetensors or model.safetensors.index.json)");
  const std::string cpath = (fs::path(dir) / "config.json").string();
  if (!fs::exists(cpath, ec)) throw UsageError("'" + cpath + "' is missing");
  tied_ = check_llama_config(cpath, m);

  const std::string single = (fs::path(dir) / "model.safetensors").string();
  std::string map_source;
  std::map<std::string, std::string> where = weight_map(dir, map_source);
  std::map<std::string, const safetensors::File*> open;
  auto file = [&](const std::string& name) {
    auto it = open.find(name);
    if (it != open.end()) return it->second;
    files_.push_back(std::make_unique<safetensors::File>((fs::path(dir) / name).string()));
    return open[name] = files_.back().get();
  };
  if (where.empty() && map_source == single)
    for (const auto& [k, t] : file("model.safetensors")->tensors()) where[k] = "model.safetensors";

  std::set<std::string> used;
  for (const Weight& w : weights(m)) {
    std::string hf = w.hf;
    if (tied_ && w.name == "output.weight") hf = "model.embed_tokens.weight";
    auto it = where.find(hf);
    if (it == where.end())
      throw UsageError("'" + map_source + "': tensor '" + hf + "' (" + w.name +
                       " here) is missing; a Llama of this config needs it with shape " +
                       shape_text(w.shape));
    used.insert(hf);
    const safetensors::File* f = file(it->second);
    const safetensors::TensorInfo* info = f->find(hf);
    if (!info)
      throw UsageError("'" + f->path() + "': tensor '" + hf + "' is missing (" + map_source +
                       " places it in this file)");
    if (info->dtype != "F32" && info->dtype != "BF16" && info->dtype != "F16")
      throw UsageError("'" + f->path() + "': tensor '" + hf + "' has dtype " + info->dtype +
                       ", expected F32, BF16 or F16");
    if (info->shape != w.shape)
      throw UsageError("'" + f->path() + "': tensor '" + hf + "' has shape " +
                       shape_text(info->shape) + " but the configured model expects " +
                       shape_text(w.shape) + " for " + w.name);
    by_name_[w.name] = Source{f, info, w};
  }
  for (const auto& [k, f] : where) {
    if (used.count(k) || k.find("rotary_emb.inv_freq") != std::string::npos) continue;
    if (tied_ && k == "lm_head.weight") continue;  // tied: the embedding is the head
    throw UsageError("'" + map_source + "' holds tensor '" + k +
                     "', which a Llama of this config does not have (no biases; "
                     "layers 0.." +
                     std::to_string(m.n_layers - 1) + ")");
  }
}

Folder::~Folder() = default;

void Folder::read(std::vector<ShardView>& want) const {
  for (ShardView& v : want) {
    std::string name = v.name;
    if (name.rfind("params/", 0) == 0) name = name.substr(7);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) throw UsageError("'" + dir_ + "': no weight for '" + v.name + "'");
    const Source& s = it->second;
    const std::string& dt = s.info->dtype;
    const size_t eb = safetensors::dtype_bytes(dt);
    ST_USAGE_CHECK(v.global_shape == s.w.shape, "'", s.file->path(), "': tensor '", s.w.hf,
                   "' has shape ", shape_text(s.w.shape), " but ", v.name, " is ",
                   shape_text(v.global_shape), " here");
    const uint8_t* base = s.file->data(*s.info);
    if (v.shape.size() == 1) {
      safetensors::to_f32(dt, base + size_t(v.offset[0]) * eb, v.data, v.shape[0]);
      continue;
    }
    ST_CHECK(v.shape.size() == 2, "hf::Folder::read: ", v.name, " is not 1-D or 2-D");
    const int64_t cols = s.w.shape[1], hd = s.w.rope_heads ? s.w.shape[0] / s.w.rope_heads : 0;
    for (int64_t r = 0; r < v.shape[0]; ++r) {
      const int64_t row = v.offset[0] + r;
      const int64_t src = hd ? hf_row(row, hd) : row;
      safetensors::to_f32(dt, base + size_t(src * cols + v.offset[1]) * eb, v.data + r * v.shape[1],
                          v.shape[1]);
    }
  }
}

}  // namespace st::hf
