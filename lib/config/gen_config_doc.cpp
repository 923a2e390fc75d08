// scaletrain-config-doc: prints the Markdown reference of every config key
// (docs/config.md) from the schema, so the docs are generated, never edited.
// Usage: scaletrain-config-doc [OUT.md]   (stdout when no file is given)
#include <cstdio>
#include <exception>
#include <string>

#include "config/config.hpp"
#include "core/util.hpp"

int main(int argc, char** argv) {
  try {
    const std::string md = st::config_reference_markdown();
    if (argc > 1)
      st::write_file_atomic(argv[1], md);
    else
      std::fputs(md.c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scaletrain-config-doc: %s\n", e.what());
    return 1;
  }
}
