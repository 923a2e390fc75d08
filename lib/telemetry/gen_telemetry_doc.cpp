// scaletrain-telemetry-doc: prints docs/telemetry.md from the telemetry
// schema (lib/telemetry/schema.cpp), so the field tables are generated, never
// edited. Usage: scaletrain-telemetry-doc [OUT.md]   (stdout when no file)
#include <cstdio>
#include <exception>
#include <string>

#include "core/util.hpp"
#include "telemetry/schema.hpp"

int main(int argc, char** argv) {
  try {
    const std::string md = st::telemetry::telemetry_reference_markdown();
    if (argc > 1)
      st::write_file_atomic(argv[1], md);
    else
      std::fputs(md.c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scaletrain-telemetry-doc: %s\n", e.what());
    return 1;
  }
}
