// What a tool that changes a loaded config's layout uses (scaletrain-plan's
// knobs and its pipeline-split search): loading without the cross-field
// rules, so the knobs apply first and validate_config runs once on the
// result, and the pipeline splits as parallel.pipeline_layers text. The
// trainer loads with load_config (config.hpp), which checks everything.
#pragma once
#include <string>
#include <vector>

#include "config/config.hpp"

namespace st {

// load_config without the cross-field rules: every key and value is still
// checked against the schema (type, range, choices), naming the key.
Config load_config_unchecked(const std::string& yaml_path,
                             const std::vector<std::string>& overrides);

// The split large runs use: the first and the last model chunk count the
// embedding and the head (with the loss) as one layer each, so they hold
// about one layer fewer (126 layers over 16 chunks: 7,8*14,7), as
// Megatron's account-for-embedding/loss split does. Counts in forward order;
// {} when a chunk would be left with no layer.
std::vector<int> pipeline_split_ends(int n_layers, int chunks);

// Counts as parallel.pipeline_layers text: 7,8,8,8,7 -> "7,8*3,7".
std::string pipeline_layers_spec(const std::vector<int>& counts);

}  // namespace st
