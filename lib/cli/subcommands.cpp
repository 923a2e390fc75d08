// Implementation of cli/subcommands.hpp.
#include "cli/subcommands.hpp"

#include <algorithm>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/util.hpp"

namespace st::cli {
namespace {

const char* kPositional = "st-cli-positional";

// Unix style without abbreviations: `--no-plot` is a typo, not `--no-plots`.
constexpr int kStyle = po::command_line_style::unix_style ^ po::command_line_style::allow_guessing;

std::vector<std::string> long_names(const Command& c) {
  std::vector<std::string> names{"--help"};
  for (const auto* g : c.groups)
    for (const auto& o : g->options()) names.push_back("--" + o->long_name());
  return names;
}

// A repeated option keeps its last value (as the hand-written parsers did and
// as shells' scripts expect when they append "$@"); composing ones keep all.
void keep_last(po::parsed_options& p, const po::options_description& all) {
  std::set<std::string> seen;
  std::vector<po::option> kept;
  for (auto it = p.options.rbegin(); it != p.options.rend(); ++it) {
    const auto* d = all.find_nothrow(it->string_key, false);
    const bool composing = !d || d->semantic()->is_composing();
    if (composing || seen.insert(it->string_key).second) kept.push_back(*it);
  }
  p.options.assign(kept.rbegin(), kept.rend());
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

po::typed_value<bool>* flag(bool* dst, bool value) {
  return po::value<bool>(dst)->zero_tokens()->implicit_value(value, "");
}

po::typed_value<std::string>* text(std::string* dst, const char* name) {
  return po::value<std::string>(dst)->value_name(name);
}

po::typed_value<std::string>* checked(const char* name,
                                      std::function<void(const std::string&)> check) {
  return po::value<std::string>()->value_name(name)->notifier(std::move(check));
}

int guarded(const std::string& prog, std::ostream& err, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    err << prog << ": error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << prog << ": internal error: " << e.what() << "\n";
    return 1;
  }
}

std::string suggest_option(const std::string& given, const std::vector<std::string>& known) {
  std::string best, prefix;
  size_t best_d = SIZE_MAX;
  for (const auto& k : known) {
    const size_t d = edit_distance(given, k);
    if (d < best_d) best_d = d, best = k;
    // A shortened name (`--win` for `--window`): the shortest such.
    if (given.size() > 3 && k.rfind(given, 0) == 0 && (prefix.empty() || k.size() < prefix.size()))
      prefix = k;
  }
  const size_t typo = std::max<size_t>(2, (given.size() - std::min<size_t>(given.size(), 2)) / 3);
  return best_d <= typo ? best : prefix;
}

Program::Program(std::string name, std::string footer)
    : name_(std::move(name)), footer_(std::move(footer)) {}

Program& Program::add(Command c) {
  commands_.push_back(std::move(c));
  return *this;
}

Program& Program::default_command(const std::string& name) {
  default_ = name;
  return *this;
}

const Command* Program::find(const std::string& name) const {
  for (const auto& c : commands_)
    if (c.name == name) return &c;
  return nullptr;
}

std::string Program::usage() const {
  std::ostringstream os;
  os << "usage: " << name_ << (default_.empty() ? " COMMAND" : " [COMMAND]")
     << " [ARGS] [--key=value | --key value ...]\n";
  if (!default_.empty()) os << "  (COMMAND defaults to " << default_ << ")\n";
  os << "commands:\n";
  for (const auto& c : commands_) {
    std::string head = "  " + c.name + (c.args.empty() ? "" : " " + c.args);
    if (head.size() < 26) head.resize(26, ' ');
    os << head << " " << c.about << "\n";
  }
  os << "`" << name_ << " COMMAND --help` lists a command's options.\n" << footer_;
  return os.str();
}

std::string Program::help(const Command& c) const {
  std::ostringstream os;
  os << "usage: " << name_ << " " << c.name << (c.args.empty() ? "" : " " + c.args)
     << " [options]\n  " << c.about << "\n";
  for (const auto* g : c.groups) os << "\n" << *g;
  os << "\n" << footer_;
  return os.str();
}

int Program::main(const std::vector<std::string>& argv, std::ostream& out,
                  std::ostream& err) const {
  if (argv.empty()) {
    err << usage();
    return 2;
  }
  if (argv[0] == "-h" || argv[0] == "--help") {
    out << usage();
    return 0;
  }
  const bool implicit = argv[0].rfind("-", 0) == 0 && !default_.empty();
  const Command* c = find(implicit ? default_ : argv[0]);
  if (!c) {
    std::vector<std::string> names;
    for (const auto& x : commands_) names.push_back(x.name);
    const std::string hint = closest(argv[0], names);
    throw UsageError("unknown command '" + argv[0] + "'" +
                     (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                     " (valid: " + join(names) + "; see " + name_ + " --help)");
  }
  const std::vector<std::string> rest(argv.begin() + (implicit ? 0 : 1), argv.end());
  for (const auto& a : rest)
    if (a == "-h" || a == "--help") {
      out << help(*c);
      return 0;
    }

  po::options_description all;
  for (const auto* g : c->groups) all.add(*g);
  std::vector<std::string> positional;
  all.add_options()(kPositional, po::value(&positional)->composing());
  po::positional_options_description pos;
  pos.add(kPositional, -1);
  const std::string see = " (see " + name_ + " " + c->name + " --help)";
  po::variables_map vm;
  try {
    po::parsed_options parsed =
        po::command_line_parser(rest).options(all).positional(pos).style(kStyle).run();
    keep_last(parsed, all);
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    // The name as typed, less an attached value ("--win=last:3").
    const std::string token = e.get_option_name();
    const std::string given = token.substr(0, token.find('='));
    std::string hint = suggest_option(given, long_names(*c));
    if (!hint.empty()) {
      hint = "; did you mean '" + hint + "'?";
    } else {
      std::vector<std::string> owners;
      for (const auto& o : commands_) {
        const auto names = long_names(o);
        if (&o != c && std::find(names.begin(), names.end(), given) != names.end())
          owners.push_back(o.name);
      }
      if (!owners.empty()) hint = "; it is an option of " + join(owners);
    }
    throw UsageError("unknown option '" + given + "' for " + c->name + hint + see);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + see);
  }
  if (positional.size() < c->min_args) throw UsageError(c->name + ": needs " + c->args + see);
  if (positional.size() > c->max_args)
    throw UsageError(
        c->name + ": unexpected argument '" + positional[c->max_args] + "'" +
        (c->args.empty() ? " (it takes options only)" : " (it takes " + c->args + ")") + see);
  return c->run(positional);
}

}  // namespace st::cli
