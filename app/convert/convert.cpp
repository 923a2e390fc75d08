// scaletrain-convert: a committed checkpoint to a Hugging Face Llama folder
// (config.json, safetensors shards and their index; model weights only, fp32
// or bf16), and a check of such a folder against a model config before a run
// takes it as model.init_from. The full tensors are read through the
// checkpoint loader's resharding (lib/checkpoint), whatever layout wrote
// them; the format and the name/RoPE mapping are lib/convert's.
// Its command line is lib/cli's, as scaletrain-analyze's and scaletrain-plan's. docs/convert.md.
//
//   scaletrain-convert export --from RUN|CHECKPOINTS|STEP --out DIR [--dtype fp32|bf16]
//                             [--config F.yaml] [--set key=value ...] [--shard-mb N]
//   scaletrain-convert check DIR --config F.yaml [--set key=value ...]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "cli/subcommands.hpp"
#include "config/config.hpp"
#include "config/schema.hpp"
#include "convert/hf_llama.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "tensor/dtype.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace st {
namespace {

const char* kFooter =
    "exit codes: 0 ok, 1 internal error, 2 bad input (the message names the option, file or\n"
    "  tensor); docs/convert.md describes the folder and the mapping\n";

// The committed step folder PATH names: a step folder, a checkpoints folder
// (its newest good step) or a run folder (its checkpoints/).
std::string step_folder(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw UsageError("--from: '" + path + "' does not exist");
  if (fs::exists(fs::path(path) / "index.json", ec)) {
    const std::string why = verify_checkpoint(path);
    if (!why.empty()) throw UsageError("--from: '" + path + "' is not loadable: " + why);
    return path;
  }
  std::string dir = path;
  if (fs::is_directory(fs::path(path) / "checkpoints", ec))
    dir = (fs::path(path) / "checkpoints").string();
  std::vector<std::string> rejected;
  auto r = find_latest_good(dir, {}, &rejected);
  if (!r) {
    std::string why;
    for (auto& x : rejected) why += "\n  " + x;
    throw UsageError("--from: no committed, verified checkpoint under '" + dir + "'" + why);
  }
  return *r;
}

// The model of the run that wrote `step_dir`: --config/--set when given,
// else the run's run.json (two folders up from the step, or in --from).
ModelCfg model_of(const std::string& from, const std::string& step_dir, const std::string& config,
                  const std::vector<std::string>& sets) {
  if (!config.empty() || !sets.empty()) return load_config(config, sets).model;
  std::error_code ec;
  for (const fs::path& p :
       {fs::path(step_dir).parent_path().parent_path() / "run.json", fs::path(from) / "run.json"}) {
    if (!fs::exists(p, ec)) continue;
    json r = json::parse(read_file(p.string()), nullptr, false);
    if (r.is_discarded() || !r.contains("config") || !r["config"].contains("model"))
      throw UsageError("'" + p.string() + "' has no config.model (pass --config)");
    Config c;
    for (const auto& [k, v] : r["config"]["model"].items()) {
      if (k == "preset" || k == "name" || k == "init_from") continue;
      const config_detail::Key* key = config_detail::find_key("model", k);
      if (!key) continue;
      config_detail::set_value(*key, c, v.is_string() ? v.get<std::string>() : v.dump(),
                               p.string());
    }
    return c.model;
  }
  throw UsageError("no run.json found for '" + step_dir +
                   "' (looked two folders up and in --from); pass --config F.yaml [--set ...] "
                   "with the run's model");
}

int run_export(const std::string& from, const std::string& out, const std::string& dtype_arg,
               const std::string& config, const std::vector<std::string>& sets, double shard_mb) {
  if (dtype_arg != "fp32" && dtype_arg != "bf16")
    throw UsageError("--dtype: '" + dtype_arg + "' is not valid; choose fp32 or bf16");
  if (!(shard_mb > 0)) throw UsageError("--shard-mb: must be > 0");
  if (out.empty()) throw UsageError("--out: required (the folder to write)");
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    throw UsageError("--out: '" + out +
                     "' exists and is not an empty folder (nothing is "
                     "overwritten; choose a new folder)");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string step_dir = step_folder(from);
  const ModelCfg m = model_of(from, step_dir, config, sets);
  // The checkpoint's model against the config, before reading gigabytes.
  const json idx = json::parse(read_file(step_dir + "/index.json"));
  const json saved = idx.value("scalars", json::object()).value("model", json());
  const json want = {{"n_layers", m.n_layers},     {"d_model", m.d_model},
                     {"n_heads", m.n_heads},       {"n_kv_heads", m.n_kv_heads},
                     {"ffn_hidden", m.ffn_hidden}, {"vocab_size", m.vocab_size}};
  if (!saved.is_null() && saved != want)
    throw UsageError("checkpoint '" + step_dir + "' holds the model " + saved.dump() +
                     " but the config gives " + want.dump());

  const std::string dt = dtype_arg == "bf16" ? "BF16" : "F32";
  const auto plan = hf::plan_shards(m, dt, uint64_t(shard_mb * 1e6));
  const std::string tmp = out + ".partial-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  json weight_map = json::object();
  uint64_t total = 0;
  try {
    for (const hf::ShardPlan& s : plan) {
      std::vector<safetensors::OutTensor> header;
      for (const hf::Weight& w : s.weights) header.push_back({w.hf, dt, w.shape, nullptr});
      safetensors::Writer file((fs::path(tmp) / s.file).string(), header, {{"format", "pt"}});
      // One weight at a time, whole, in fp32, through the loader's resharding.
      for (const hf::Weight& w : s.weights) {
        int64_t n = 1;
        for (int64_t d : w.shape) n *= d;
        std::vector<float> full(static_cast<size_t>(n));
        std::vector<ShardView> view(1);
        view[0].name = "params/" + w.name;
        view[0].global_shape = w.shape;
        view[0].offset.assign(w.shape.size(), 0);
        view[0].shape = w.shape;
        view[0].data = full.data();
        load(step_dir, view, -1);
        const int64_t rows = w.shape[0], cols = n / std::max<int64_t>(rows, 1);
        const int64_t hd = w.rope_heads ? rows / w.rope_heads : 0;
        const size_t eb = dt == "BF16" ? 2 : 4;
        std::vector<uint8_t> bytes(size_t(n) * eb);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t to = hd ? hf::hf_row(r, hd) : r;  // rotate-half order for q/k
          uint8_t* dst = bytes.data() + size_t(to * cols) * eb;
          const float* row = full.data() + r * cols;
          if (eb == 4) {
            std::memcpy(dst, row, size_t(cols) * 4);
          } else {
            for (int64_t c = 0; c < cols; ++c) {
              const uint16_t h = f32_to_bf16(row[c]);
              std::memcpy(dst + 2 * c, &h, 2);
            }
          }
        }
        file.append(bytes.data(), bytes.size());
        weight_map[w.hf] = s.file;
        total += bytes.size();
      }
      file.close();
    }
    write_file_atomic((fs::path(tmp) / "model.safetensors.index.json").string(),
                      hf::index_json(weight_map, total).dump(2));
    write_file_atomic((fs::path(tmp) / "config.json").string(),
                      hf::config_json(m, dt == "BF16" ? "bfloat16" : "float32").dump(2));
  } catch (...) {
    fs::remove_all(tmp, ec);  // no half folder left behind
    throw;
  }
  if (fs::exists(out, ec)) fs::remove(out, ec);  // the empty folder checked above
  fs::rename(tmp, out);
  uint64_t files = 0;
  for (const auto& e : fs::directory_iterator(out)) files += uint64_t(e.file_size());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "exported " << step_dir << " to " << out << ": " << plan.size()
            << " safetensors file(s), " << dtype_arg << ", " << total << " tensor bytes, " << files
            << " bytes in all (" << hf::export_bytes(m, dt, uint64_t(shard_mb * 1e6))
            << " predicted), " << secs << " s\n";
  return 0;
}

int run_check(const std::string& dir, const std::string& config,
              const std::vector<std::string>& sets) {
  const Config c = load_config(config, sets);
  const hf::Folder f(dir, c.model);
  std::cout << dir << ": a Llama of this config (" << hf::weights(c.model).size() << " weights"
            << (f.tied() ? ", tied embeddings: the head starts as the embedding" : "")
            << "); model.init_from=" << dir << " can start a run from it\n";
  return 0;
}

int main_impl(const std::vector<std::string>& args) {
  using cli::checked;
  using cli::text;
  std::string from, out, dtype = "fp32", config;
  std::vector<std::string> sets;
  double shard_mb = 5000;
  // clang-format off
  cli::po::options_description export_o("export options");
  export_o.add_options()
      ("from", text(&from, "PATH"),
       "a run folder, a checkpoints folder (its newest good step) or a step_N folder")
      ("out", text(&out, "DIR"), "the folder to write (new or empty)")
      ("dtype", text(&dtype, "fp32|bf16"), "tensor dtype (default fp32; bf16 rounds to nearest even)")
      ("shard-mb", checked("MB", [&shard_mb](const std::string& v) {
         char* end = nullptr;
         shard_mb = std::strtod(v.c_str(), &end);
         if (v.empty() || *end || !(shard_mb > 0))
           throw UsageError("--shard-mb: '" + v + "' is not a size in MB > 0");
       }),
       "at most this many MB (1e6 bytes) of tensor data per safetensors file (default 5000)");
  cli::po::options_description model_o("model (export: default the run's run.json)");
  model_o.add_options()
      ("config", text(&config, "F.yaml"), "run config or model preset file")
      ("set", cli::po::value(&sets)->composing()->value_name("section.key=value"),
       "any config key, repeatable (e.g. model.n_layers=32)");
  cli::Program p("scaletrain-convert", kFooter);
  p.add({"export", "", "a committed checkpoint to a Hugging Face Llama folder (safetensors)",
         0, 0, {&export_o, &model_o},
         [&](const auto&) {
           if (from.empty()) throw UsageError("export: --from is required");
           return run_export(from, out, dtype, config, sets, shard_mb);
         }});
  p.add({"check", "DIR", "a Hugging Face Llama folder against a model config (model.init_from)",
         1, 1, {&model_o},
         [&](const auto& dirs) {
           if (config.empty() && sets.empty())
             throw UsageError("check: --config (the model the folder must match) is required");
           return run_check(dirs[0], config, sets);
         }});
  // clang-format on
  return p.main(args, std::cout, std::cerr);
}
}  // namespace
}  // namespace st

int main(int argc, char** argv) {
  try {
    return st::main_impl(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const st::UsageError& e) {
    std::cerr << "scaletrain-convert: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "scaletrain-convert: error: " << e.what() << "\n";
    return 1;
  }
}
