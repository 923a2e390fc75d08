// load_config: YAML file (with an optional model preset) + `section.key=value`
// overrides -> a validated Config. Precedence, lowest first: struct defaults,
// the preset's model section, the file's own keys, the overrides in order.
// `--set model.preset=NAME` replaces the file's whole model section by the
// preset (then the other model overrides apply).
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "config/layout_tools.hpp"
#include "config/schema.hpp"
#include "config/yaml_text.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "scaletrain/build_config.hpp"

namespace st {
namespace fs = std::filesystem;
using namespace config_detail;

namespace {

std::string at(const std::string& file, const YAML::Node& n) {
  const auto m = n.Mark();
  if (m.is_null()) return file;
  return file + ":" + std::to_string(m.line + 1);
}

std::vector<std::string> full_keys() {
  std::vector<std::string> out;
  for (const auto& k : schema()) out.push_back(k.full());
  return out;
}

std::string keys_of(const std::string& section) {
  std::string s;
  for (const auto& k : schema())
    if (k.section == section) s += (s.empty() ? "" : ", ") + k.name;
  return s;
}

[[noreturn]] void unknown_section(const std::string& sec, const std::string& where) {
  std::string hint = closest(sec, sections());
  std::string all;
  for (const auto& s : sections()) all += (all.empty() ? "" : ", ") + s;
  throw UsageError("unknown config section '" + sec + "'" + (where.empty() ? "" : " in " + where) +
                   (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                   " (valid sections: " + all + ")");
}

const Key& lookup(const std::string& sec, const std::string& name, const std::string& where) {
  if (std::find(sections().begin(), sections().end(), sec) == sections().end())
    unknown_section(sec, where);
  if (const Key* k = find_key(sec, name)) return *k;
  std::string hint = closest(sec + "." + name, full_keys());
  throw UsageError("unknown config key '" + sec + "." + name + "'" +
                   (where.empty() ? "" : " in " + where) +
                   (hint.empty() ? "" : "; did you mean '" + hint + "'?") + " (valid keys in " +
                   sec + ": " + keys_of(sec) + ")");
}

YAML::Node parse_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw UsageError("config file '" + path + "' not found");
  if (fs::is_directory(path, ec))
    throw UsageError("config file '" + path + "' is a directory, not a YAML file");
  YAML::Node root = parse_yaml_text(read_file(path), path);
  if (!root.IsNull() && !root.IsMap())
    throw UsageError("config file " + path + " must be a map of sections (model:, train:, ...)");
  return root;
}

// Applies one section's keys; `skip` names keys to leave out; records what was set.
void apply_section(Config& cfg, const std::string& file, const std::string& sec,
                   const YAML::Node& body, const std::set<std::string>& skip,
                   std::set<std::string>& set_keys) {
  if (body.IsNull()) return;
  if (!body.IsMap())
    throw UsageError("section '" + sec + "' in " + at(file, body) +
                     " must be a map of keys (e.g. " + sec + ": {" + schema_first_key(sec) +
                     ": ...})");
  std::set<std::string> seen;
  for (const auto& it : body) {
    const std::string name = it.first.as<std::string>();
    const Key& k = lookup(sec, name, at(file, it.first));
    if (!seen.insert(name).second)
      throw UsageError("key '" + k.full() + "' is set twice in " + at(file, it.first) +
                       "; keep one");
    if (skip.count(name)) continue;
    const YAML::Node& v = it.second;
    std::string raw;
    if (v.IsScalar())
      raw = v.Scalar();
    else if (v.IsNull())
      raw = (k.type == Type::String) ? "" : "null";
    else
      throw UsageError(k.full() + ": expected a single " + type_name(k.type) + " value, got a " +
                       (v.IsMap() ? "map" : "list") + " (" + at(file, v) + ")");
    set_value(k, cfg, raw, at(file, v));
    set_keys.insert(k.full());
  }
}

void apply_file(Config& cfg, const std::string& file, const YAML::Node& root, bool skip_model,
                std::set<std::string>& set_keys) {
  if (root.IsNull()) return;
  std::set<std::string> seen;
  for (const auto& it : root) {
    const std::string sec = it.first.as<std::string>();
    if (!seen.insert(sec).second)
      throw UsageError("section '" + sec + "' appears twice in " + at(file, it.first) +
                       "; merge them into one");
    if (std::find(sections().begin(), sections().end(), sec) == sections().end())
      unknown_section(sec, at(file, it.first));
    if (sec == "model" && skip_model) continue;
    apply_section(cfg, file, sec, it.second, {"preset"}, set_keys);
  }
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(preset_dir(), ec))
    if (e.path().extension() == ".yaml") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

void apply_preset(Config& cfg, const std::string& name) {
  const std::string path = (fs::path(preset_dir()) / (name + ".yaml")).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    auto names = preset_names();
    std::string all, hint = closest(name, names);
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    throw UsageError("model.preset: unknown preset '" + name + "' (no " + path + ")" +
                     (hint.empty() ? "" : "; did you mean '" + hint + "'?") + " (presets: " + all +
                     ")");
  }
  YAML::Node root = parse_file(path);
  YAML::Node model = root.IsMap() ? root["model"] : YAML::Node();
  if (!model || !model.IsMap()) throw UsageError("preset file " + path + " has no model: section");
  if (model["preset"])
    throw UsageError("preset file " + path + " sets model.preset; a preset cannot include another");
  std::set<std::string> ignored;
  cfg.model.name = name;
  apply_section(cfg, path, "model", model, {}, ignored);
}

}  // namespace

YAML::Node parse_yaml_text(const std::string& text, const std::string& path) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw UsageError("YAML syntax error in " + path + " at line " +
                     std::to_string(e.mark.line + 1) + ", column " +
                     std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

std::string config_detail::schema_first_key(const std::string& sec) {
  for (const auto& k : schema())
    if (k.section == sec) return k.name;
  return "key";
}

std::string preset_dir() {
  if (auto e = env("SCALETRAIN_CONFIG_DIR"); e && !e->empty()) return *e;
  std::error_code ec;
  fs::path src = fs::path(SCALETRAIN_SOURCE_DIR) / "configs" / "models";
  if (fs::is_directory(src, ec)) return src.string();
  // Installed or moved build: next to the executable.
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path d = exe.parent_path(); !d.empty() && d != d.root_path(); d = d.parent_path()) {
      for (fs::path cand :
           {d / "configs" / "models", d / "share" / "scaletrain" / "configs" / "models"})
        if (fs::is_directory(cand, ec)) return cand.string();
    }
  }
  return "configs/models";
}

Config load_config_unchecked(const std::string& yaml_path,
                             const std::vector<std::string>& overrides) {
  // Split the overrides first: a bad line is reported before any file is read.
  struct Ov {
    const Key* key;
    std::string value, line;
  };
  std::vector<Ov> ovs;
  std::string preset_override;
  bool has_preset_override = false;
  for (const auto& line : overrides) {
    const auto eq = line.find('=');
    const auto dot = line.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 ||
        dot + 1 == eq)
      throw UsageError("bad override '" + line +
                       "': expected section.key=value (e.g. train.steps=100)");
    const std::string sec = line.substr(0, dot), name = line.substr(dot + 1, eq - dot - 1);
    const Key& k = lookup(sec, name, "--set " + line);
    if (k.full() == "model.preset") {
      preset_override = line.substr(eq + 1);
      has_preset_override = true;
      continue;
    }
    ovs.push_back({&k, line.substr(eq + 1), line});
  }

  YAML::Node root;
  if (!yaml_path.empty()) root = parse_file(yaml_path);

  std::string preset;
  if (has_preset_override) {
    preset = preset_override;
  } else if (root.IsMap() && root["model"] && root["model"].IsMap() && root["model"]["preset"]) {
    const YAML::Node p = root["model"]["preset"];
    if (!p.IsScalar())
      throw UsageError("model.preset: expected a preset name (" + at(yaml_path, p) + ")");
    preset = p.Scalar();
  }

  Config cfg;
  std::set<std::string> set_keys;
  if (!preset.empty()) apply_preset(cfg, preset);
  apply_file(cfg, yaml_path, root, has_preset_override, set_keys);
  for (const auto& o : ovs) {
    set_value(*o.key, cfg, o.value, "--set " + o.line);
    set_keys.insert(o.key->full());
  }
  cfg.model.preset = preset;
  if (preset.empty() && !set_keys.count("model.name")) {
    // A shape set by hand is no longer the default preset's.
    for (const auto& k : set_keys)
      if (k.rfind("model.", 0) == 0) {
        const Key* key = find_key("model", k.substr(6));
        Config d;
        if (get_value(*key, cfg) != get_value(*key, d)) cfg.model.name = "custom";
      }
  }
  cfg.config_path = yaml_path;
  cfg.overrides = overrides;
  return cfg;
}

Config load_config(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  Config cfg = load_config_unchecked(yaml_path, overrides);
  validate(cfg);
  return cfg;
}

}  // namespace st
