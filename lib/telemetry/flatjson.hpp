// A small, strict JSON scanner for one line holding one object whose values the
// caller reads by key: top-level members are returned as (key, raw value span,
// kind); nested objects/arrays are validated and returned as spans. Used for
// the step records (a million lines for 512 ranks x 2000 steps), where a full
// DOM per line (nlohmann_json) costs several times more (analysis/bench).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace st::telemetry::flat {

enum class Kind { String, Number, True, False, Null, Object, Array };

struct Member {
  std::string_view key;    // raw, without quotes (escapes not decoded)
  std::string_view value;  // raw span; strings without quotes
  Kind kind;
};

// Parses `line` as a JSON object. Returns "" on success, else a message with
// the byte column. `members` is cleared and filled.
std::string parse_object(std::string_view line, std::vector<Member>& members);

// Number value of a Number member; false if it does not fit a double/int64.
bool to_double(std::string_view v, double& out);
bool to_int64(std::string_view v, long long& out);

}  // namespace st::telemetry::flat
