// The model's weights in Hugging Face's Llama layout (LlamaForCausalLM):
// the name of each tensor there, the row permutation of the query and key
// weights between the interleaved RoPE used here (Meta's) and Hugging
// Face's rotate-half RoPE, config.json, and a folder of safetensors shards
// opened against a model config, from which any rank reads the slices it
// holds. docs/convert.md describes the mapping.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/state.hpp"
#include "config/config.hpp"
#include "convert/safetensors.hpp"

namespace st::hf {

// One weight of the model: its name here (docs/model.md), in Hugging Face's
// Llama, its global shape, and for q/k weights the heads whose rows permute.
struct Weight {
  std::string name;  // "layers.0.attention.wq.weight"
  std::string hf;    // "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  int rope_heads = 0;  // > 0: rows are `rope_heads` heads of head_dim, permuted
};

// Every weight of `m`, in docs/model.md's order.
std::vector<Weight> weights(const ModelCfg& m);

// Row of a Hugging Face q/k weight that holds row `r` here, for heads of
// `hd` rows: here head h's rows are pairs (2i, 2i+1), there they are
// (i, i + hd/2) (convert_llama_weights_to_hf.py's permute).
inline int64_t hf_row(int64_t r, int64_t hd) {
  const int64_t h = r / hd, w = r % hd;
  return h * hd + (w % 2) * (hd / 2) + w / 2;
}

// config.json for `m` (LlamaForCausalLM; torch_dtype "float32" or "bfloat16").
nlohmann::json config_json(const ModelCfg& m, const std::string& torch_dtype);

// The shards an export of `m` in `dtype` ("F32" or "BF16") writes with at
// most `shard_bytes` of tensor data each (a weight never splits): file name
// and the weights in it. One shard is named model.safetensors, several
// model-0000K-of-0000N.safetensors.
struct ShardPlan {
  std::string file;
  std::vector<Weight> weights;
  uint64_t data_bytes = 0;
};
std::vector<ShardPlan> plan_shards(const ModelCfg& m, const std::string& dtype,
                                   uint64_t shard_bytes);
// model.safetensors.index.json: {"metadata": {"total_size"}, "weight_map"}.
nlohmann::json index_json(const nlohmann::json& weight_map, uint64_t total_size);
// Bytes of the files an export writes (exactly: written with dump(2)): each shard's 8 + header +
// data, the index and config.json.
uint64_t export_bytes(const ModelCfg& m, const std::string& dtype, uint64_t shard_bytes);

// What an export of `m` in `dtype` costs (docs/convert.md, Size and time):
// it reads 16 bytes a parameter from the step folder (12 to verify the
// CRC32C of the masters and both moments, then the 4-byte masters) and
// writes export_bytes; its CPU time is the parameters times the CPU per
// parameter measured on the 2-core development VM (the larger of two
// measurements of a 134M-parameter export: 41 ns fp32, 31 ns bf16).
// seconds(Bps) adds the storage time at `Bps` bytes/s for reading and writing.
struct ExportCost {
  uint64_t params = 0, read_bytes = 0, write_bytes = 0;
  double cpu_s = 0;
  double seconds(double Bps) const { return cpu_s + double(read_bytes + write_bytes) / Bps; }
};
ExportCost export_cost(const ModelCfg& m, const std::string& dtype, uint64_t shard_bytes);

// A Hugging Face Llama folder (config.json, and model.safetensors or
// model.safetensors.index.json with its shards), checked against the model
// config: the shape in config.json, every weight present with a float dtype
// (F32, BF16 or F16) and the shape `m` gives it, no weight it does not know.
// Throws UsageError naming the folder's file, the tensor and what was
// expected. Only the headers are read here; read() maps the slices asked for.
class Folder {
 public:
  Folder(const std::string& dir, const ModelCfg& m);
  ~Folder();
  const std::string& dir() const { return dir_; }
  bool tied() const { return tied_; }
  // Fills each view (name "params/NAME" or "NAME" as here, its global
  // shape, offset and box): the rows it covers, q/k rows through hf_row,
  // widened to fp32.
  void read(std::vector<ShardView>& want) const;

 private:
  struct Source {
    const safetensors::File* file;
    const safetensors::TensorInfo* info;
    Weight w;
  };
  std::string dir_;
  bool tied_ = false;
  std::vector<std::unique_ptr<safetensors::File>> files_;
  std::map<std::string, Source> by_name_;  // our name -> where it is
};

}  // namespace st::hf
