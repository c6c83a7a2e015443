#include "fleet/cmdline/cmdline.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <sstream>

namespace fleet::cmdline {
namespace {

constexpr const char* kHelpCommand = "help";
constexpr size_t kHelpWidth = 100;
constexpr size_t kNameWidth = 32;

// `text` with each of its lines broken at spaces to fit `width` columns.
std::string Wrapped(const std::string& text, size_t width) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!out.empty()) out += '\n';
    if (line.size() <= width) {   // as written (indented tables stay so)
      out += line;
      continue;
    }
    size_t column = 0;
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      if (column > 0 && column + 1 + word.size() > width) {
        out += '\n';
        column = 0;
      } else if (column > 0) {
        out += ' ';
        ++column;
      }
      out += word;
      column += word.size();
    }
  }
  return out;
}

// "usage: NAME [flags] ..." first; defaults in the descriptions; a validator's description (the
// values it allows) in place of the type.
class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(std::string operands) : operands_(std::move(operands)) {
    label("OPTIONS", "flags");
    label("REQUIRED", "(required)");
    label("Positionals", "arguments");
    column_width(kNameWidth);
  }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
    std::ostringstream out;
    out << make_usage(app, name) << "\n"
        << make_description(app) << make_positionals(app) << Groups(app) << make_subcommands(app, mode)
        << "\n"
        << make_footer(app);
    return out.str();
  }

  // The groups in the order of their first flag, -h/--help at the end of the last one.
  std::string Groups(const CLI::App* app) const {
    const CLI::Option* help = app->get_help_ptr();
    std::vector<std::string> groups;
    for (const CLI::Option* option : app->get_options()) {
      const std::string& group = option->get_group();
      if (option != help && option->nonpositional() && !group.empty() &&
          std::find(groups.begin(), groups.end(), group) == groups.end()) {
        groups.push_back(group);
      }
    }
    if (groups.empty()) groups.push_back(get_label("OPTIONS"));
    std::string out;
    for (const std::string& group : groups) {
      std::vector<const CLI::Option*> options = app->get_options([&](const CLI::Option* option) {
        return option != help && option->get_group() == group && option->nonpositional();
      });
      if (help != nullptr && group == groups.back()) options.push_back(help);
      out += make_group(group, false, options);
    }
    return out;
  }

  std::string make_subcommand(const CLI::App* command) const override {
    std::ostringstream out;
    CLI::detail::format_help(out, command->get_name(), Wrapped(command->get_description(), kHelpWidth - kNameWidth),
                             kNameWidth);
    return out.str();
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string usage = "usage: " + name + " [" + get_label("OPTIONS") + "]";
    for (const CLI::Option* positional : app->get_options([](const CLI::Option* o) { return o->get_positional(); })) {
      usage += " " + make_option_usage(positional);
    }
    if (!app->get_subcommands({}).empty()) usage += " COMMAND [flags]";
    if (app->get_prefix_command() && !operands_.empty()) usage += " " + operands_;
    return usage + "\n";
  }

  std::string make_description(const CLI::App* app) const override {
    return app->get_description().empty() ? "" : Wrapped(app->get_description(), kHelpWidth) + "\n";
  }

  std::string make_footer(const CLI::App* app) const override {
    return app->get_footer().empty() ? "" : Wrapped(app->get_footer(), kHelpWidth) + "\n";
  }

  // "-f, --filename"; of long names that differ only in '-' and '_' (fleetctl's), the first.
  std::string make_option_name(const CLI::Option* option, bool positional) const override {
    if (positional) return option->get_name(true, false);
    std::vector<std::string> names;
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
    std::vector<std::string> shown;
    for (std::string name : option->get_lnames()) {
      const std::string key = CLI::detail::find_and_replace(name, "_", "-");
      if (std::find(shown.begin(), shown.end(), key) != shown.end()) continue;
      shown.push_back(key);
      names.push_back("--" + name);
    }
    return CLI::detail::join(names, ", ");
  }

  std::string make_option_opts(const CLI::Option* option) const override {
    if (option->get_items_expected_max() == 0) return "";   // a flag
    std::string type = option->get_type_name();   // "TEXT:auto|on|off": CLI11's name, then the validators'
    if (const size_t colon = type.find(':'); colon != std::string::npos) {
      const std::string cli11_type = type.substr(0, colon);
      if (cli11_type == "TEXT" || cli11_type == "INT" || cli11_type == "UINT" || cli11_type == "FLOAT") {
        type = type.substr(colon + 1);
      }
    }
    std::string opts = type.empty() ? "" : " " + type;
    if (option->get_expected_max() == CLI::detail::expected_max_vector_size) opts += " ...";
    if (option->get_required()) opts += " " + get_label("REQUIRED");
    return opts;
  }

  std::string make_option_desc(const CLI::Option* option) const override {
    std::string description = option->get_description();
    if (!option->get_default_str().empty()) {
      description += (description.empty() ? "(default " : " (default ") + option->get_default_str() + ")";
    }
    return Wrapped(description, kHelpWidth - kNameWidth);
  }

 private:
  std::string operands_;
};

bool LooksLikeFlag(const std::string& arg) { return arg.size() > 1 && arg[0] == '-' && arg != "--"; }

// CLI11 2.1.2 reads "--name=" (an empty value) as "--name" followed by its value in the next
// argument, and "-n=v" as the value "=v". Both become two arguments here ("--name" "", "-n" "v"),
// which CLI11 reads as Python's argparse and Go's pflag do. "--" and everything after it stay as
// given, and so do a prefix command's arguments: from the first one that is neither a flag nor a
// flag's value.
std::vector<std::string> SpellInlineValues(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  bool value_next = false;   // the previous argument is an option whose value is the next one
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const bool flag = !value_next && LooksLikeFlag(arg);
    if (arg == "--" || (app.get_prefix_command() && !flag && !value_next)) {
      out.insert(out.end(), args.begin() + static_cast<long>(i), args.end());
      break;
    }
    value_next = false;
    const size_t eq = flag ? arg.find('=') : std::string::npos;
    const bool long_flag = flag && arg[1] == '-';
    if (eq != std::string::npos && (long_flag ? eq + 1 == arg.size() : eq == 2)) {
      out.push_back(arg.substr(0, eq));
      out.push_back(arg.substr(eq + 1));
      continue;
    }
    out.push_back(arg);
    if (flag && eq == std::string::npos) {
      const CLI::Option* option = app.get_option_no_throw(arg);
      value_next = option != nullptr && option->get_items_expected_max() > 0;
    }
  }
  return out;
}

// The command being run: the innermost one given.
const CLI::App* GivenCommand(const CLI::App& app) {
  const CLI::App* command = &app;
  while (!command->get_subcommands().empty()) command = command->get_subcommands().back();
  return command;
}

std::string CommandPath(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* parent = app.get_parent(); parent != nullptr; parent = parent->get_parent()) {
    path = parent->get_name() + " " + path;
  }
  return path;
}

bool HasCommands(const CLI::App& app) { return !app.get_subcommands({}).empty(); }

std::string Reworded(const CLI::ParseError& e) {
  const std::string what = e.what();
  // "--workers: 1 required INT missing" (the flag was last, without its value).
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr && what.size() > 8 &&
      what.compare(what.size() - 8, 8, " missing") == 0) {
    return what.substr(0, what.find(':')) + " needs a value";
  }
  return what;
}

// What no option took: an unknown flag, an unknown command or a stray argument.
Status CheckLeftovers(const CLI::App& app, const std::vector<std::string>& leftovers) {
  if (leftovers.empty()) return OkStatus();
  const std::string& first = leftovers.front();
  const CLI::App* command = GivenCommand(app);
  if (LooksLikeFlag(first)) {
    return Error{"unknown flag " + first.substr(0, first.find('=')) +
                 (command == &app ? "" : " for " + command->get_name()) + " (see " + CommandPath(*command) + " --help)"};
  }
  if (command == &app && HasCommands(app)) {
    return Error{"unknown command \"" + first + "\" (see " + app.get_name() + " --help)"};
  }
  return Error{"unexpected argument \"" + first + "\""};
}

Result<const CLI::App*> HelpCommandTarget(const CLI::App& app, const CLI::App& help) {
  const CLI::Option* named = help.get_option("command");
  if (named->count() == 0) return &app;
  const std::string name = named->as<std::string>();
  for (const CLI::App* command : app.get_subcommands({})) {
    if (command->check_name(name) && command->get_name() != kHelpCommand) return command;
  }
  return Error{"unknown command \"" + name + "\" (see " + app.get_name() + " --help)"};
}

}  // namespace

std::unique_ptr<CLI::App> NewApp(const std::string& name, const std::string& description, const std::string& operands) {
  auto app = std::make_unique<CLI::App>(description, name);
  app->formatter(std::make_shared<HelpFormatter>(operands));
  app->option_defaults()->group("flags");
  app->set_help_flag("-h,--help", "this help");
  // A flag given twice: the last one counts (a chart's extraArgs override its defaults).
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // Parse words what no option took itself. The app's flags may follow its command; commands are
  // listed as "Commands" and one is given at most (what follows it are its arguments).
  app->allow_extras();
  app->fallthrough();
  app->group("Commands");
  app->require_subcommand(0, 1);
  return app;
}

void AddHelpCommand(CLI::App& app) {
  app.add_subcommand(kHelpCommand, "this help, or a command's")->add_option("command", "the command");
}

Result<const CLI::App*> Parse(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> reversed = SpellInlineValues(app, args);
  std::reverse(reversed.begin(), reversed.end());   // CLI11 takes the arguments from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return GivenCommand(app);
  } catch (const CLI::ParseError& e) {
    return Error{Reworded(e)};
  }
  std::vector<std::string> leftovers = app.remaining(true);
  // A prefix command's own arguments are the caller's; only a flag before them is ours to refuse.
  if (app.get_prefix_command() && (leftovers.empty() || !LooksLikeFlag(leftovers.front()))) leftovers.clear();
  if (Status status = CheckLeftovers(app, leftovers); !status) return Error{status.error()};
  const CLI::App* command = GivenCommand(app);
  if (HasCommands(app) && command == &app) return Error{"no command given (see " + app.get_name() + " --help)"};
  if (command->get_name() == kHelpCommand) return HelpCommandTarget(app, *command);
  return static_cast<const CLI::App*>(nullptr);
}

std::string Help(const CLI::App& app) {
  return app.help(app.get_parent() == nullptr ? "" : CommandPath(*app.get_parent()));
}

CLI::Validator IntegerIn(int lo, int hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        int value = 0;
        const char* end = text.data() + text.size();
        auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc() || ptr != end || value < lo || value > hi) {
          const std::string range = hi == INT_MAX ? "of at least " + std::to_string(lo)
                                                  : "from " + std::to_string(lo) + " to " + std::to_string(hi);
          return "expected an integer " + range + ", got '" + text + "'";
        }
        text = std::to_string(value);
        return "";
      },
      "");
}

CLI::Validator OneOf(std::vector<std::string> values) {
  std::string listed;
  for (size_t i = 0; i < values.size(); ++i) {
    listed += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + values[i];
  }
  std::string alternatives = CLI::detail::join(values, "|");
  return CLI::Validator(
      [values = std::move(values), listed](std::string& text) -> std::string {
        if (std::find(values.begin(), values.end(), text) != values.end()) return "";
        return "expected " + listed + ", got '" + text + "'";
      },
      alternatives);
}

CLI::Validator NonEmpty() {
  return CLI::Validator([](std::string& text) { return text.empty() ? "must not be empty" : ""; }, "");
}

CLI::Option* AddSwitch(CLI::App& app, const std::string& names, bool& value, const std::string& description) {
  return app.add_flag(names, value, description)->check(OneOf({"true", "false", "1", "0"}));
}

}  // namespace fleet::cmdline
