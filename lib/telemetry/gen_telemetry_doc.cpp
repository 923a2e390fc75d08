// scaletrain-telemetry-doc: prints docs/telemetry.md from the telemetry
// schema (lib/telemetry/schema.cpp), so the field tables are generated, never
// edited. Usage: scaletrain-telemetry-doc [OUT.md]   (stdout when no file)
#include "core/util.hpp"
#include "telemetry/schema.hpp"

int main(int argc, char** argv) {
  return st::write_generated_doc(argc, argv, "scaletrain-telemetry-doc",
                                 st::telemetry::telemetry_reference_markdown());
}
