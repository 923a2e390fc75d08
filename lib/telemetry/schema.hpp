// The telemetry schema (scaletrain.telemetry/1) as data: every field of the
// header, the step record and each event, with its JSON type and meaning.
// The one place these facts live: the writer refuses a record with a field
// that is not here, and docs/telemetry.md is generated from it (the
// scaletrain-telemetry-doc target), with a test that the page is current.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace st::telemetry {

enum class Ftype { Int, Float, FloatOrNull, String, StringOrNull, Bool, Object, List };

struct Field {
  Field(std::string n, Ftype t, std::string m, std::vector<Field> mem = {})
      : name(std::move(n)), type(t), meaning(std::move(m)), members(std::move(mem)) {}
  std::string name;
  Ftype type;
  std::string meaning;
  // Object fields with a fixed set of keys list them here (checked like
  // fields); an Object with no members is free-form. A List with members
  // holds objects with those keys.
  std::vector<Field> members;
};

struct EventSpec {
  EventSpec(std::string n, std::string w, std::vector<Field> e)
      : name(std::move(n)), when(std::move(w)), extra(std::move(e)) {}
  std::string name;
  std::string when;
  std::vector<Field> extra;  // besides the common type, event, step, t
};

// The parts of a step's communication in the step record's `comm_wait_s`
// (core/step_parts.hpp: the one list of the parts and their names).
const std::vector<std::string>& comm_part_names();
const std::vector<Field>& header_fields();        // line 1 of every rank file
const std::vector<Field>& step_fields();          // one record per step
const std::vector<Field>& event_common_fields();  // type, event, step, t
const std::vector<EventSpec>& event_specs();
const std::vector<Field>& trace_fields();  // one trace record per step (runtime.trace)

// "" when every member of `record` (a header, step or event, by its "type")
// is a documented field of that record with the documented JSON type, else
// the first problem, naming the record and the field.
std::string check_record(const nlohmann::json& record);

// "int", "float", "float or null", ... as the docs show them.
std::string type_text(Ftype t);

// The whole of docs/telemetry.md.
std::string telemetry_reference_markdown();

}  // namespace st::telemetry
