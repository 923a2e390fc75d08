// YAML text to a node, with the project's syntax-error message (file, line,
// column): the one parser call that the config loader and the other YAML
// readers (scaletrain-plan's cluster files) share. Throws UsageError.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>

namespace st {
YAML::Node parse_yaml_text(const std::string& text, const std::string& path);
}  // namespace st
