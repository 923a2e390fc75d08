// scaletrain-convert: a committed checkpoint to a Hugging Face Llama folder
// (config.json, safetensors shards and their index; model weights only, fp32
// or bf16), and a check of such a folder against a model config before a run
// takes it as model.init_from. The full tensors are read through the
// checkpoint loader's resharding (lib/checkpoint), whatever layout wrote
// them; the format and the name/RoPE mapping are lib/convert's.
// docs/convert.md.
//
//   scaletrain-convert export --from RUN|CHECKPOINTS|STEP --out DIR [--dtype fp32|bf16]
//                             [--config F.yaml] [--set key=value ...] [--shard-mb N]
//   scaletrain-convert check DIR --config F.yaml [--set key=value ...]
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "config/config.hpp"
#include "config/schema.hpp"
#include "convert/hf_llama.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "tensor/dtype.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using nlohmann::json;

namespace st {
namespace {

const char* kUsage =
    "usage: scaletrain-convert export --from PATH --out DIR [--dtype fp32|bf16] [--config F.yaml]\n"
    "                                 [--set key=value ...] [--shard-mb N]\n"
    "       scaletrain-convert check DIR --config F.yaml [--set key=value ...]\n";

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

int main_impl(int argc, char** argv) {
  if (argc < 2) throw UsageError(std::string("no sub-command given\n") + kUsage);
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd != "export" && cmd != "check")
    throw UsageError("unknown sub-command '" + cmd + "' (valid: export, check)\n" + kUsage);
  std::string from, out, dtype = "fp32", config;
  std::vector<std::string> sets, pos;
  double shard_mb = 5000;
  po::options_description desc("scaletrain-convert " + cmd + " options");
  desc.add_options()("help,h", "show this help")(
      "from", po::value(&from), "export: a run folder, a checkpoints folder or a step folder")(
      "out,o", po::value(&out), "export: the folder to write (new or empty)")(
      "dtype", po::value(&dtype)->default_value("fp32"),
      "export: fp32 or bf16 (rounded to nearest even)")(
      "shard-mb", po::value(&shard_mb)->default_value(5000),
      "export: at most this many MB (1e6 bytes) of tensor data per safetensors file")(
      "config", po::value(&config), "the run's config (export: default the run's run.json)")(
      "set", po::value(&sets)->composing(), "a config override key=value (repeatable)")(
      "path", po::value(&pos)->composing(), "check: the Hugging Face folder");
  po::positional_options_description p;
  p.add("path", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc - 1, argv + 1).options(desc).positional(p).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "\n" + kUsage);
  }
  if (vm.count("help")) {
    std::cout << kUsage << desc << "\n";
    return 0;
  }
  if (cmd == "export") {
    if (!pos.empty()) throw UsageError("export takes no positional argument ('" + pos[0] + "')");
    if (from.empty()) throw UsageError("export: --from is required\n" + std::string(kUsage));
    return run_export(from, out, dtype, config, sets, shard_mb);
  }
  if (pos.size() != 1) throw UsageError("check: give exactly one folder\n" + std::string(kUsage));
  if (config.empty() && sets.empty())
    throw UsageError("check: --config (the model the folder must match) is required");
  return run_check(pos[0], config, sets);
}
}  // namespace
}  // namespace st

int main(int argc, char** argv) {
  try {
    return st::main_impl(argc, argv);
  } catch (const st::UsageError& e) {
    std::cerr << "scaletrain-convert: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "scaletrain-convert: error: " << e.what() << "\n";
    return 1;
  }
}
