// run.json reader (schema scaletrain.run/1, docs/telemetry.md): extracts the
// fields the analysis needs, strictly typed; each problem names the field.
#include <fstream>
#include <sstream>

#include "telemetry/reader.hpp"

namespace st::telemetry {
namespace {

const nlohmann::json* at_path(const nlohmann::json& j, const std::string& dotted) {
  const nlohmann::json* cur = &j;
  std::stringstream ss(dotted);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(part);
    if (it == cur->end() || it->is_null()) return nullptr;
    cur = &*it;
  }
  return cur;
}

struct Getter {
  const nlohmann::json& j;
  std::string path;
  std::vector<std::string>& errors;

  template <typename T>
  void operator()(const std::string& field, T& out, bool required) {
    const nlohmann::json* v = at_path(j, field);
    if (!v) {
      if (required) errors.push_back(path + ": missing required field '" + field + "'");
      return;
    }
    bool ok;
    if constexpr (std::is_same_v<T, bool>)
      ok = v->is_boolean();
    else if constexpr (std::is_integral_v<T>)
      ok = detail::fits<T>(*v);
    else if constexpr (std::is_floating_point_v<T>)
      ok = v->is_number();
    else
      ok = v->is_string();
    if (!ok) {
      errors.push_back(path + ": field '" + field + "': wrong type, got " + v->dump());
      return;
    }
    out = v->get<T>();
  }
};

}  // namespace

RunInfo read_run_json(const std::string& path, std::vector<std::string>& errors) {
  RunInfo ri;
  std::ifstream f(path);
  if (!f) {
    errors.push_back(path + ": cannot open");
    return ri;
  }
  try {
    ri.raw = nlohmann::json::parse(f);
  } catch (const nlohmann::json::parse_error& ex) {
    errors.push_back(path + ": not valid JSON: " + ex.what());
    return ri;
  }
  if (!ri.raw.is_object()) {
    errors.push_back(path + ": expected a JSON object");
    return ri;
  }
  const size_t before = errors.size();
  Getter g{ri.raw, path, errors};
  g("schema", ri.schema, true);
  if (!ri.schema.empty() && schema_major(ri.schema, kRunSchemaPrefix) != 1)
    errors.push_back(path + ": field 'schema': \"" + ri.schema +
                     "\" is not supported; this reader reads scaletrain.run/1");
  g("name", ri.name, false);
  g("git_commit", ri.git_commit, false);
  g("version", ri.version, false);
  g("run_id", ri.run_id, false);
  g("world_size", ri.world_size, true);
  if (errors.size() == before && (ri.world_size <= 0 || ri.world_size > kMaxWorldSize))
    errors.push_back(path + ": field 'world_size': must be in [1, " +
                     std::to_string(kMaxWorldSize) + "], got " + std::to_string(ri.world_size));
  if (auto* m = at_path(ri.raw, "mesh"); m && m->is_object())
    for (auto& [k, v] : m->items())
      if (detail::fits<int>(v)) ri.mesh[k] = v.get<int>();
  if (auto* h = at_path(ri.raw, "hosts"); h) {
    if (!h->is_array()) {
      errors.push_back(path + ": field 'hosts': expected a list, got " + h->dump());
    } else {
      for (auto& e : *h) {
        RunInfo::Host host;
        if (e.is_string())
          host.name = e.get<std::string>();
        else if (e.is_object()) {
          host.name = e.value("name", e.value("host", std::string()));
          if (auto r = e.find("ranks"); r != e.end() && r->is_array())
            for (auto& x : *r)
              if (detail::fits<int>(x)) host.ranks.push_back(x.get<int>());
        }
        ri.hosts.push_back(host);
      }
    }
  }
  g("config.model.preset", ri.model_name, false);
  g("model.name", ri.model_name, false);
  g("model.n_params", ri.n_params, true);
  g("model.n_layers", ri.n_layers, true);
  g("model.d_model", ri.d_model, true);
  g("model.n_heads", ri.n_heads, true);
  g("model.seq_len", ri.seq_len, true);
  g("model.n_kv_heads", ri.n_kv_heads, false);
  g("model.ffn_hidden", ri.ffn_hidden, false);
  g("model.vocab_size", ri.vocab_size, false);
  g("global_batch", ri.global_batch, false);
  g("global_batch_tokens", ri.global_batch_tokens, false);
  g("config.train.micro_batch", ri.micro_batch, false);
  g("config.train.grad_accum", ri.grad_accum, false);
  g("config.train.act_ckpt", ri.act_ckpt, false);
  g("config.train.precision", ri.precision, false);
  g("config.parallel.zero_stage", ri.zero_stage, false);
  g("device.name", ri.device_name, false);
  g("device.kind", ri.device_kind, false);
  g("device.peak_flops", ri.peak_flops, false);
  g("device.peak_source", ri.peak_source, false);
  g("device.precision_choice", ri.precision_choice, false);
  g("device.memory_capacity_bytes", ri.mem_capacity_bytes, false);
  g("device.memory_capacity_source", ri.mem_capacity_source, false);
  if (ri.global_batch_tokens == 0 && ri.global_batch > 0)
    ri.global_batch_tokens = ri.global_batch * ri.seq_len;
  if (ri.global_batch == 0 && ri.global_batch_tokens > 0 && ri.seq_len > 0)
    ri.global_batch = ri.global_batch_tokens / ri.seq_len;
  return ri;
}

}  // namespace st::telemetry
