// Fuzz harness: the YAML config loader with --set overrides. Input: a YAML
// file, then (after a line "#--set") one override per line; the first byte
// after the overrides' marker picks the world size for resolve_layout.
// Contract: any input is either a Config or a UsageError (never another
// exception, a crash or a hang), and an accepted config's emitted YAML
// (run.json, --dry-run) loads back to the same config.
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/error.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace st;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto parts = fuzz::split(in, "\n#--set\n", 2);
  const std::string yaml = fuzz::scratch() + "/config.yaml";
  fuzz::write(yaml, parts[0]);
  std::vector<std::string> sets;
  int world = 1;
  if (parts.size() > 1) {
    auto lines = fuzz::split(parts[1], "\n", 16);
    if (!lines.empty() && !lines[0].empty()) world = 1 + (uint8_t(lines[0][0]) % 16);
    for (size_t i = 1; i < lines.size(); ++i) sets.emplace_back(lines[i]);
  }
  Config cfg;
  try {
    cfg = load_config(yaml, sets);
    resolve_layout(cfg, world);
  } catch (const UsageError&) {
    return 0;  // a clear refusal: what bad input must get
  }
  // Accepted: what run.json and --dry-run print must read back the same.
  const std::string text = config_to_yaml(cfg);
  (void)config_to_json(cfg);
  const std::string again = fuzz::scratch() + "/again.yaml";
  fuzz::write(again, text);
  Config back;
  try {
    back = load_config(again, {});
  } catch (const UsageError& e) {
    std::fprintf(stderr, "emitted config does not load back: %s\n%s\n", e.what(), text.c_str());
    std::abort();
  }
  back.parallel.dp = cfg.parallel.dp;  // resolve_layout's choice for dp=0
  if (config_to_yaml(back) != text) {
    std::fprintf(stderr, "emitted config loads back differently:\n%s\n---\n%s\n", text.c_str(),
                 config_to_yaml(back).c_str());
    std::abort();
  }
  return 0;
}
