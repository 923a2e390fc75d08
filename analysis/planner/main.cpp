// scaletrain-plan entry point: forwards to cli_main (cli.hpp).
#include <iostream>

#include "planner/cli.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return st::plan::cli_main(args, std::cout, std::cerr);
}
