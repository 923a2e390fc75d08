// Sub-command command lines on Boost.Program_options, one parser for
// scaletrain-analyze and scaletrain-plan (the library the trainer's
// app/cli.cpp uses): `--key=value` and `--key value`, `PROG CMD --help` per
// sub-command, an unknown option refused naming the nearest known one ("did
// you mean"), a repeated option's last value wins, no abbreviations. Bad input
// throws UsageError (exit 2) naming the option.
//
// A tool describes each sub-command as a Command: its positional arguments,
// the option groups it accepts and what it runs. Adding an option is one line
// in a group's add_options() chain; adding a sub-command is one add() call.
#pragma once
#include <boost/program_options.hpp>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace st::cli {
namespace po = boost::program_options;

inline constexpr size_t kMany = std::numeric_limits<size_t>::max();

struct Command {
  std::string name;                                    // "run"
  std::string args;                                    // positional synopsis: "DIR", "RUN_DIR..."
  std::string about;                                   // one line in the program's usage
  size_t min_args = 0, max_args = 0;                   // positional argument count (kMany: any)
  std::vector<const po::options_description*> groups;  // its options, in help order
  // Runs after every option is stored and its notifier ran; gets the
  // positional arguments. Returns the exit status.
  std::function<int(const std::vector<std::string>&)> run;
};

class Program {
 public:
  // footer: lines after the command list in `PROG --help` (environment, exit codes).
  Program(std::string name, std::string footer);
  Program& add(Command c);
  // The sub-command run when the first argument is an option
  // (`scaletrain-plan --cluster F` is `scaletrain-plan plan --cluster F`).
  Program& default_command(const std::string& name);
  // Parses `argv` (without the program name), runs the sub-command and
  // returns its status. `PROG`, `PROG --help` and `PROG CMD --help` print
  // help (to err with status 2 for a bare `PROG`, else to out with 0).
  // Throws UsageError for bad input.
  int main(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) const;
  std::string usage() const;                 // the command list
  std::string help(const Command& c) const;  // one command's synopsis and options

 private:
  const Command* find(const std::string& name) const;
  std::string name_, footer_, default_;
  std::vector<Command> commands_;
};

// Value helpers for add_options() chains.
// A switch that stores `value` in *dst when given and takes no argument.
po::typed_value<bool>* flag(bool* dst, bool value = true);
// A text value stored in *dst, shown as `name` in help.
po::typed_value<std::string>* text(std::string* dst, const char* name);
// A value handed to `check(text)` (which parses, validates and stores it,
// throwing UsageError naming the option), shown as `name` in help.
po::typed_value<std::string>* checked(const char* name,
                                      std::function<void(const std::string&)> check);

// A tool's cli_main body, run with its errors mapped to the exit codes every
// analysis tool uses: UsageError (bad input) -> "PROG: error: ..." and 2, any
// other exception -> "PROG: internal error: ..." and 1; else body's status.
int guarded(const std::string& prog, std::ostream& err, const std::function<int()>& body);

// "did you mean" for an unknown option: the closest of `known` ("--no-plots")
// within a typo's distance, or "" (exposed for the tests).
std::string suggest_option(const std::string& given, const std::vector<std::string>& known);

}  // namespace st::cli
