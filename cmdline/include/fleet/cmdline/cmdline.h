// What fleetrun, fleet-operator, fleet-sidecar and fleetctl share on CLI11: they declare their flags
// on a CLI::App from NewApp and parse with Parse, so that all four take --name=value and
// --name value, word their errors alike (one line naming the flag) and print help generated from
// the declarations.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "fleet/base/result.h"

namespace fleet::cmdline {

// An app with the house help layout: "usage: NAME [flags] ..." first, then the description, the
// flags in their groups with their defaults, the commands, the footer. `operands` is what a prefix
// command (CLI::App::prefix_command) takes after its flags, for the usage line.
std::unique_ptr<CLI::App> NewApp(const std::string& name, const std::string& description,
                                 const std::string& operands = "");

// Adds "help [COMMAND]": Parse answers it as that command's --help.
void AddHelpCommand(CLI::App& app);

// Parses `args` (argv[1..]) into the variables bound to `app`'s options. Returns the (sub)command
// whose help was asked for (--help, -h or the help command), nullptr when none was; or an error of
// one line: "unknown flag --x for submit (see fleetctl submit --help)", "--workers needs a value",
// "--workers: expected an integer from 1 to 256, got '0'", "unexpected argument \"x\"", ...
// An app with commands needs one. A prefix command's first remaining argument must not look like a
// flag; the command and its arguments are app.remaining().
Result<const CLI::App*> Parse(CLI::App& app, const std::vector<std::string>& args);

// The help of `app`; a command's usage line starts with its parents' names.
std::string Help(const CLI::App& app);

// A decimal integer in [lo, hi]. Use it with ->transform(): it also rewrites the value as plain
// decimal, which CLI11 would otherwise read as octal or hex ("010", "0x10").
CLI::Validator IntegerIn(int lo, int hi);

// One of `values`; the help shows them ("auto|native|init") in place of the type.
CLI::Validator OneOf(std::vector<std::string> values);

// A value that must not be empty ("--log_dir=").
CLI::Validator NonEmpty();

// A boolean flag: --name alone is true; --name=true|false (or 1|0) sets it.
CLI::Option* AddSwitch(CLI::App& app, const std::string& names, bool& value, const std::string& description);

}  // namespace fleet::cmdline
