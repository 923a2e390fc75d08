// The config schema: one entry per `section.key` with its type, range or
// choices, doc line and a pointer to the Config field it fills. The default
// of a key is whatever the struct in config.hpp holds, read through that
// pointer, so defaults live in exactly one place. Internal to lib/config.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace st::config_detail {

enum class Type { Int, UInt64, Float, Bool, String, Enum };

struct Key {
  std::string section;
  std::string name;
  Type type;
  std::vector<std::string> choices;  // Enum only
  bool ranged = false;               // Int/Float: min/max apply
  double min = 0, max = 0;
  std::string doc;
  std::function<void*(Config&)> field;  // the value this key fills

  std::string full() const { return section + "." + name; }
};

// Every key, in the order of docs/design.md's sections.
const std::vector<Key>& schema();
// The section names, in order.
const std::vector<std::string>& sections();
// nullptr when unknown.
const Key* find_key(const std::string& section, const std::string& name);
// The first key of a section (for examples in messages).
std::string schema_first_key(const std::string& section);
// "int", "float", "bool", "string", "enum".
std::string type_name(Type t);
// "[1, 1024]", "constant|linear|cosine", or "".
std::string range_text(const Key& k);

// Parses `raw` with the key's type and range and stores it in cfg. `where`
// (file:line or "--set") is appended to error messages. Throws UsageError.
void set_value(const Key& k, Config& cfg, const std::string& raw, const std::string& where);
// The value as text (shortest round-trip form for floats).
std::string get_value(const Key& k, const Config& cfg);
// The default value as text (from a default-constructed Config).
std::string default_value(const Key& k);

// Cross-field rules that do not need the world size. Throws UsageError.
void validate(const Config& cfg);

}  // namespace st::config_detail
