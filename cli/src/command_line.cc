#include "fleet/cli/command_line.h"

#include <algorithm>
#include <map>

#include "fleet/api/job_spec.h"
#include "fleet/cmdline/cmdline.h"

namespace fleet::cli {
namespace {

const std::map<std::string, Command>& Commands() {
  static const std::map<std::string, Command> commands = {
      {"submit", Command::kSubmit}, {"list", Command::kList},     {"status", Command::kStatus},
      {"top", Command::kTop},       {"logs", Command::kLogs},     {"stop", Command::kStop},     {"resume", Command::kResume},
      {"delete", Command::kDelete}, {"version", Command::kVersion}, {"help", Command::kHelp},
  };
  return commands;
}

std::string CommandName(Command c) {
  for (const auto& [name, command] : Commands()) {
    if (command == c) return name;
  }
  return "";
}

// A flag's names, and each long one with '-' for '_' (or '_' for '-'): fleetctl takes both.
std::string Names(const std::string& names) {
  std::string all = names;
  for (const std::string& name : CLI::detail::split_names(names)) {
    if (name.rfind("--", 0) != 0) continue;
    std::string other = name;
    const bool underscores = name.find('_') != std::string::npos;
    std::replace(other.begin() + 2, other.end(), underscores ? '_' : '-', underscores ? '-' : '_');
    if (other != name) all += "," + other;
  }
  return all;
}

// 90, 90s, 5m, 1h30m -> seconds.
Result<int> Duration(const std::string& value) {
  const Error bad{"expected a duration such as 90s, 10m or 1h, got '" + value + "'"};
  if (value.empty()) return bad;
  long total = 0;
  size_t i = 0;
  while (i < value.size()) {
    size_t j = i;
    while (j < value.size() && value[j] >= '0' && value[j] <= '9') ++j;
    if (j == i || j - i > 7) return bad;
    const long n = std::stol(value.substr(i, j - i));
    long unit = 1;
    if (j < value.size()) {
      switch (value[j]) {
        case 's': unit = 1; break;
        case 'm': unit = 60; break;
        case 'h': unit = 3600; break;
        default: return bad;
      }
      ++j;
    } else if (i != 0) {
      return bad;   // "1h30" - a unit is missing
    }
    total += n * unit;
    i = j;
  }
  if (total <= 0 || total > 7 * 24 * 3600) return bad;
  return static_cast<int>(total);
}

// A flag whose value is a duration (90s, 10m, 1h30m), kept in `seconds`.
void AddDuration(CLI::App& app, const std::string& name, int& seconds, const std::string& description) {
  app.add_option_function<std::string>(
         name,
         [&seconds, name](const std::string& text) {
           auto parsed = Duration(text);
           if (!parsed) throw CLI::ValidationError(name, parsed.error());
           seconds = *parsed;
         },
         description)
      ->type_name("DURATION");
}

void AddSubmitFlags(CLI::App& submit, SubmitOptions& s) {
  submit.add_option("-f,--filename", s.file, "a FleetJob manifest (\"-\": stdin)")->type_name("FILE");
  submit.add_option("--name", s.name, "the job's name (default: the script's name and a random suffix)")->type_name("NAME");
  submit.add_option("--image", s.image, "the training image (required without -f)")->type_name("IMAGE");
  submit.add_option(Names("--server_num"), s.server_num, "parameter servers (0: a collective job)")
      ->type_name("N")->transform(cmdline::IntegerIn(0, 10000))->capture_default_str();
  submit.add_option(Names("--worker_num"), s.worker_num, "trainers")
      ->type_name("N")->transform(cmdline::IntegerIn(1, 10000))->capture_default_str();
  submit.add_option("--gpus", s.gpus,
                    "GPUs per worker pod (nvidia.com/gpu); N > 1 in a collective job runs N processes per pod through "
                    "fleetrun (python train.py -> fleetrun train.py)")
      ->type_name("N")->transform(cmdline::IntegerIn(0, 64))->capture_default_str();
  submit.add_option("--cpu", s.cpu, "CPU per pod, requests = limits (e.g. --cpu=4)")->type_name("Q");
  submit.add_option("--memory", s.memory, "memory per pod, requests = limits (e.g. --memory=16Gi)")->type_name("Q");
  submit
      .add_option_function<std::vector<std::string>>(
          "-e,--env",
          [&s](const std::vector<std::string>& variables) {
            for (const std::string& v : variables) s.env.emplace_back(v.substr(0, v.find('=')), v.substr(v.find('=') + 1));
          },
          "an environment variable of the training container (repeatable)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false)
      ->check(CLI::Validator(
          [](std::string& v) {
            const auto eq = v.find('=');
            return eq == std::string::npos || eq == 0 ? "expected NAME=VALUE, got '" + v + "'" : std::string();
          },
          ""));
  submit.add_option("--network", s.network, "how peers address each other: " + api::NameList<api::Network>() + " (default PodIP)")
      ->type_name("MODE");
  submit.add_option("--runtime", s.runtime, api::NameList<api::Runtime>() + " (default paddle)")->type_name("NAME");
  submit.add_option(Names("--restart_policy"), s.restart_policy,
                    "for failed pods: " + api::NameList<api::RestartPolicy>() + " (default Never)")
      ->type_name("POLICY");
  submit.add_option(Names("--backoff_limit"), s.backoff_limit, "restarts allowed before the job fails (default 3)")
      ->type_name("N")->transform(cmdline::IntegerIn(0, 1000));
  submit.add_option("--gang", s.gang, "gang scheduling: " + api::NameList<api::GangScheduler>({api::GangScheduler::kNone}))->type_name("SCHEDULER");
  submit.add_option("--queue", s.queue, "the Volcano queue")->type_name("Q");
  submit.add_option(Names("--priority_class"), s.priority_class, "the pods' PriorityClass")->type_name("NAME");
  submit.add_option(Names("--sidecar_image"), s.sidecar_image, "fleet-sidecar's image (default: the operator's)")
      ->type_name("IMAGE");
  cmdline::AddSwitch(submit, Names("--dry-run"), s.dry_run, "print the FleetJob (-o json|yaml, default yaml), create nothing");
  cmdline::AddSwitch(submit, "--wait", s.wait, "show progress until the job runs (--until=done: succeeds) or ends; exit 1 if it fails");
  submit
      .add_option_function<std::string>(
          "--until", [&s](const std::string& v) { s.until_done = v == "done"; },
          "with --wait: running (the default) or done - until the job succeeds, with its training progress")
      ->check(cmdline::OneOf({"running", "done"}));
  AddDuration(submit, "--timeout", s.timeout_seconds, "give up waiting after this long (e.g. 10m)");
}

void AddTopFlags(CLI::App& top, TopOptions& t) {
  AddDuration(top, "--interval", t.interval_seconds, "how often to read the job again (default 2s)");
  cmdline::AddSwitch(top, "--once", t.once, "print one table and exit");
}

void AddLogsFlags(CLI::App& logs, LogsOptions& l) {
  logs.add_option("--role", l.role, "server, worker or a heter stage's name")
      ->type_name("ROLE")->check(cmdline::NonEmpty())->capture_default_str();
  logs.add_option("--rank", l.rank, "the pod's index in its role")
      ->type_name("N")->transform(cmdline::IntegerIn(0, 100000))->capture_default_str();
  logs.add_option("-c,--container", l.container, "default: the pod's first container (fleet-sidecar: the gate's log)")
      ->type_name("NAME");
  cmdline::AddSwitch(logs, "-f,--follow", l.follow,
                     "keep printing new output until the pod ends; a replaced pod (a new run) is followed from its start");
  logs.add_option("--tail", l.tail, "only the last N lines")->type_name("N")->transform(cmdline::IntegerIn(-1, 1000000));
}

// fleetctl's commands and flags, bound to `cl`.
std::unique_ptr<CLI::App> FleetctlApp(CommandLine& cl) {
  auto app = cmdline::NewApp("fleetctl", "Submits and manages PaddlePaddle FleetJobs on Kubernetes.");
  app->footer("Exit status: 0 success; 1 an error (one line on stderr) or, with --wait, a failed job; 2 a usage error.");
  GlobalOptions& g = cl.global;
  const std::string global = "Flags for every command (as kubectl's)";
  app->add_option("--kubeconfig", g.kubeconfig, "default: $KUBECONFIG, in-cluster, ~/.kube/config")
      ->type_name("PATH")->group(global);
  app->add_option("--context", g.context, "a kubeconfig context (default: the current one)")->type_name("NAME")->group(global);
  app->add_option("-n,--namespace", g.ns, "default: the context's namespace")
      ->type_name("NS")->check(cmdline::NonEmpty())->group(global);
  app->add_option_function<std::string>(
         "-o,--output", [&g](const std::string& v) { g.output = v == "json" ? Output::kJson : Output::kYaml; },
         "machine-readable output")
      ->check(cmdline::OneOf({"json", "yaml"}))->group(global);

  AddSubmitFlags(*app->add_subcommand("submit", "create a FleetJob from fleetrun-style flags or a manifest (--wait: until it runs)")
                      ->footer("From flags (PaddleCloud style), every pod runs the training command given after "
                               "\"--\" (fleetctl submit [flags] -- COMMAND [ARGS...]) in --image: a parameter-server "
                               "job with --server_num > 0, else a collective job. With -f, the manifest is the job."),
                 cl.submit);
  CLI::App* list = app->add_subcommand("list", "list FleetJobs: name, mode, phase, ready/replicas of servers, workers and heter stages, restarts, age");
  list->alias("ls");
  cmdline::AddSwitch(*list, "-A,--all-namespaces", cl.all_namespaces, "every namespace");
  list->add_option("-l,--selector", cl.selector, "a label selector (e.g. team=ranking)")->type_name("SELECTOR");
  CLI::App* status = app->add_subcommand("status", "a job's phase, training progress, pods per role, conditions and recent events");
  status->add_option("--events", cl.events, "how many events")
      ->type_name("N")->transform(cmdline::IntegerIn(0, 1000))->capture_default_str();
  CLI::App* top = app->add_subcommand(
      "top", "a live table of a job's training ranks (step, speed, loss, lag behind the median), the straggler on top");
  top->footer("From the job's status.progress, which the operator collects from the sidecars. On a terminal the "
              "table is redrawn every --interval until Ctrl-C or the job ends; otherwise a table is printed each time "
              "the progress changes (once with --once). A job of more than 20 ranks shows its 20 slowest.");
  AddTopFlags(*top, cl.top);
  CLI::App* logs = app->add_subcommand("logs", "a pod's log (-f follows): <NAME>-<ROLE>-<N>, default worker 0");
  AddLogsFlags(*logs, cl.logs);
  CLI::App* stop = app->add_subcommand("stop", "suspend a job (spec.runPolicy.suspend): its pods are removed, the job "
                                               "object stays; resume starts it again");
  CLI::App* resume = app->add_subcommand("resume", "resume a suspended job: its pods are created again (a new run)");
  CLI::App* del = app->add_subcommand("delete", "delete jobs; their pods and other children go with them");
  for (CLI::App* named : {status, top, logs, stop, resume, del}) {
    named->add_option("NAME", cl.names, "the FleetJob's name")->type_name("");
  }
  app->add_subcommand("version", "fleetctl's version");
  cmdline::AddHelpCommand(*app);
  return app;
}

Command CommandOf(const CLI::App& command) {
  auto it = Commands().find(command.get_name());
  return it == Commands().end() ? Command::kHelp : it->second;   // the app itself: the overview
}

Status CheckSubmit(const CLI::App& submit, const SubmitOptions& s) {
  if (!s.file.empty()) {
    for (const CLI::Option* option : submit.get_options()) {
      const std::string name = option->get_name();
      if (option->count() > 0 && name != "--filename" && name != "--wait" && name != "--until" && name != "--timeout" &&
          name != "--dry-run") {
        return Error{name + " cannot be combined with -f: the manifest describes the whole job"};
      }
    }
    if (!s.command.empty()) return Error{"a command after \"--\" cannot be combined with -f"};
  } else {
    if (s.image.empty()) return Error{"submit needs --image (or -f FILE)"};
    if (s.command.empty()) return Error{"submit needs the training command after \"--\", e.g. -- python train.py"};
  }
  if (s.timeout_seconds > 0 && !s.wait) return Error{"--timeout applies to --wait only"};
  if (submit.count("--until") > 0 && !s.wait) return Error{"--until applies to --wait only"};
  if (s.wait && s.dry_run) return Error{"--wait cannot be combined with --dry-run"};
  return OkStatus();
}

}  // namespace

Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  auto app = FleetctlApp(cl);
  // submit's training command: everything after "--", as given.
  const auto dashes = std::find(args.begin(), args.end(), "--");
  auto help = cmdline::Parse(*app, std::vector<std::string>(args.begin(), dashes));
  if (!help) return Error{help.error()};
  if (*help != nullptr) {
    cl.help_for = CommandOf(**help);
    return cl;
  }
  const CLI::App& given = *app->get_subcommands().front();
  cl.command = CommandOf(given);
  if (dashes != args.end()) {
    if (cl.command != Command::kSubmit) return Error{"unexpected \"--\": only submit takes a command after it"};
    cl.submit.command.assign(dashes + 1, args.end());
    // A submit flag after "--" is the training command's (a script may have a --dry-run of its
    // own), but it may be a slip: submit says where it went.
    for (const std::string& arg : cl.submit.command) {
      if (arg.size() < 2 || arg[0] != '-') continue;
      const std::string flag = arg.substr(0, arg.find('='));
      if (given.get_option_no_throw(flag) != nullptr) cl.submit.fleetctl_flags_in_command.push_back(flag);
    }
  }
  auto names = [&](size_t min, size_t max) -> Status {
    if (cl.names.size() < min) return Error{CommandName(cl.command) + " needs the FleetJob's name"};
    if (cl.names.size() > max) return Error{"unexpected argument \"" + cl.names[max] + "\""};
    return OkStatus();
  };
  Status status = OkStatus();
  switch (cl.command) {
    case Command::kSubmit:
      status = CheckSubmit(given, cl.submit);
      break;
    case Command::kList:
      if (cl.all_namespaces && !cl.global.ns.empty()) status = Error{"--all-namespaces cannot be combined with --namespace"};
      break;
    case Command::kStatus:
    case Command::kTop:
    case Command::kLogs:
    case Command::kStop:
    case Command::kResume:
      status = names(1, 1);
      break;
    case Command::kDelete:
      status = names(1, 1000);
      break;
    default:
      break;
  }
  if (!status) return Error{status.error()};
  return cl;
}

std::string Usage(Command command) {
  CommandLine scratch;
  auto app = FleetctlApp(scratch);
  const std::string name = CommandName(command);
  return cmdline::Help(command == Command::kNone || command == Command::kHelp ? *app : *app->get_subcommand(name));
}

}  // namespace fleet::cli
