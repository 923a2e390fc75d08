// scaletrain-config-doc: prints the Markdown reference of every config key
// (docs/config.md) from the schema, so the docs are generated, never edited.
// Usage: scaletrain-config-doc [OUT.md]   (stdout when no file is given)
#include "config/config.hpp"
#include "core/util.hpp"

int main(int argc, char** argv) {
  return st::write_generated_doc(argc, argv, "scaletrain-config-doc",
                                 st::config_reference_markdown());
}
