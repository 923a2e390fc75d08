// Implementation of cli.hpp.
#include "cli.hpp"

#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

#include "cli/subcommands.hpp"
#include "config/config.hpp"
#include "core/build_commit.hpp"
#include "core/error.hpp"
#include "scaletrain/build_config.hpp"

namespace po = boost::program_options;

namespace st {
Cli parse_cli(int argc, char** argv, bool print) {
  Cli c;
  po::options_description desc(
      "scaletrain: measured, checkpointed training steps of a Llama-style transformer\n\n"
      "usage: mpirun -np N scaletrain [--config FILE] [--set section.key=value ...] [--dry-run "
      "[--world N]]\n\n"
      "Options");
  desc.add_options()("help,h", "this help, then every config key with its default")(
      "help-config", "only the config keys (type, default, range, doc)")(
      "version", "print version and build facts")(
      "config,c", po::value(&c.config), "YAML run config (a model preset file is one)")(
      "set,s", po::value(&c.sets)->composing(),
      "override one key, e.g. --set train.steps=20 (repeatable)")(
      "out,o", po::value(&c.out), "run folder (same as --set runtime.out=DIR)")(
      "dry-run", po::bool_switch(&c.dry_run),
      "validate, print the resolved config, parameter count, FLOPs per step and memory, exit")(
      "world", po::value(&c.world)->value_name("N"),
      "with --dry-run: plan N ranks without launching them (default: the launched world size)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    // As scaletrain-analyze and scaletrain-plan do (lib/cli): the nearest option.
    const std::string given = e.get_option_name().substr(0, e.get_option_name().find('='));
    std::vector<std::string> known;
    for (const auto& o : desc.options()) known.push_back("--" + o->long_name());
    const std::string hint = cli::suggest_option(given, known);
    throw UsageError("command line: unknown option '" + given + "'" +
                     (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                     " (see scaletrain --help)");
  } catch (const po::error& e) {
    throw UsageError(std::string("command line: ") + e.what() + " (see scaletrain --help)");
  }
  if (vm.count("version")) {
    if (print)
      std::cout << "scaletrain " << SCALETRAIN_VERSION << " (commit " << build_commit()
                << ", CUDA backend " << (SCALETRAIN_HAVE_CUDA ? "built" : "not built") << ")\n";
    c.exit_now = true;
  } else if (vm.count("help") || vm.count("help-config")) {
    if (print) {
      if (vm.count("help")) std::cout << desc << "\n";
      std::cout << config_help();
    }
    c.exit_now = true;
  }
  if (vm.count("world") && !c.exit_now) {
    if (!c.dry_run)
      throw UsageError("command line: --world " + std::to_string(c.world) +
                       " plans a world size with --dry-run only (a run's world size is "
                       "mpirun's -np)");
    if (c.world < 1)
      throw UsageError("command line: --world " + std::to_string(c.world) + ": must be >= 1");
  }
  if (!c.out.empty()) c.sets.push_back("runtime.out=" + c.out);
  return c;
}
}  // namespace st
