#include "fleet/cli/command_line.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>

namespace fleet::cli {
namespace {

struct Flag {
  std::string name;                  // long name, with '-'
  char short_name = 0;
  bool takes_value = true;
  std::function<Status(const std::string&)> set;
};

const std::map<std::string, Command>& Commands() {
  static const std::map<std::string, Command> commands = {
      {"submit", Command::kSubmit}, {"list", Command::kList},     {"ls", Command::kList},
      {"status", Command::kStatus}, {"logs", Command::kLogs},     {"stop", Command::kStop},
      {"resume", Command::kResume}, {"delete", Command::kDelete}, {"version", Command::kVersion},
      {"help", Command::kHelp},
  };
  return commands;
}

std::string Normalize(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

Result<int> Int(const std::string& flag, const std::string& value, int lo, int hi) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    return Error{"--" + flag + "=" + value + ": expected an integer from " + std::to_string(lo) + " to " +
                 std::to_string(hi)};
  }
  return static_cast<int>(v);
}

Result<bool> Bool(const std::string& flag, const std::string& value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  return Error{"--" + flag + "=" + value + ": expected true or false"};
}

// 90, 90s, 5m, 1h30m -> seconds.
Result<int> Duration(const std::string& flag, const std::string& value) {
  const Error bad{"--" + flag + "=" + value + ": expected a duration such as 90s, 10m or 1h"};
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

template <typename T, typename Assign>
Status Set(Result<T> result, Assign assign) {
  if (!result) return Error{result.error()};
  assign(*result);
  return OkStatus();
}

std::vector<Flag> GlobalFlags(CommandLine& cl) {
  GlobalOptions& g = cl.global;
  return {
      {"kubeconfig", 0, true, [&g](const std::string& v) { g.kubeconfig = v; return OkStatus(); }},
      {"context", 0, true, [&g](const std::string& v) { g.context = v; return OkStatus(); }},
      {"namespace", 'n', true, [&g](const std::string& v) -> Status {
         if (v.empty()) return Error{"--namespace: must not be empty"};
         g.ns = v;
         return OkStatus(); }},
      {"output", 'o', true, [&g](const std::string& v) -> Status {
         if (v == "json") g.output = Output::kJson;
         else if (v == "yaml") g.output = Output::kYaml;
         else return Error{"--output=" + v + ": expected json or yaml"};
         return OkStatus(); }},
      {"help", 'h', false, [&cl](const std::string& v) {
         return Set(Bool("help", v), [&cl](bool b) { if (b) cl.help_for = cl.command == Command::kNone ? Command::kHelp : cl.command; }); }},
  };
}

std::vector<Flag> CommandFlags(CommandLine& cl) {
  SubmitOptions& s = cl.submit;
  LogsOptions& l = cl.logs;
  auto text = [](std::string* field) { return [field](const std::string& v) { *field = v; return OkStatus(); }; };
  switch (cl.command) {
    case Command::kSubmit:
      return {
          {"filename", 'f', true, text(&s.file)},
          {"name", 0, true, text(&s.name)},
          {"image", 0, true, text(&s.image)},
          {"server-num", 0, true, [&s](const std::string& v) { return Set(Int("server_num", v, 0, 10000), [&s](int n) { s.server_num = n; }); }},
          {"worker-num", 0, true, [&s](const std::string& v) { return Set(Int("worker_num", v, 1, 10000), [&s](int n) { s.worker_num = n; }); }},
          {"gpus", 0, true, [&s](const std::string& v) { return Set(Int("gpus", v, 0, 64), [&s](int n) { s.gpus = n; }); }},
          {"cpu", 0, true, text(&s.cpu)},
          {"memory", 0, true, text(&s.memory)},
          {"env", 'e', true, [&s](const std::string& v) -> Status {
             const auto eq = v.find('=');
             if (eq == std::string::npos || eq == 0) return Error{"--env=" + v + ": expected NAME=VALUE"};
             s.env.emplace_back(v.substr(0, eq), v.substr(eq + 1));
             return OkStatus(); }},
          {"network", 0, true, text(&s.network)},
          {"runtime", 0, true, text(&s.runtime)},
          {"restart-policy", 0, true, text(&s.restart_policy)},
          {"backoff-limit", 0, true, [&s](const std::string& v) { return Set(Int("backoff_limit", v, 0, 1000), [&s](int n) { s.backoff_limit = n; }); }},
          {"gang", 0, true, text(&s.gang)},
          {"queue", 0, true, text(&s.queue)},
          {"priority-class", 0, true, text(&s.priority_class)},
          {"sidecar-image", 0, true, text(&s.sidecar_image)},
          {"wait", 0, false, [&s](const std::string& v) { return Set(Bool("wait", v), [&s](bool b) { s.wait = b; }); }},
          {"timeout", 0, true, [&s](const std::string& v) { return Set(Duration("timeout", v), [&s](int n) { s.timeout_seconds = n; }); }},
          {"dry-run", 0, false, [&s](const std::string& v) { return Set(Bool("dry-run", v), [&s](bool b) { s.dry_run = b; }); }},
      };
    case Command::kList:
      return {
          {"all-namespaces", 'A', false, [&cl](const std::string& v) { return Set(Bool("all-namespaces", v), [&cl](bool b) { cl.all_namespaces = b; }); }},
          {"selector", 'l', true, text(&cl.selector)},
      };
    case Command::kStatus:
      return {{"events", 0, true, [&cl](const std::string& v) { return Set(Int("events", v, 0, 1000), [&cl](int n) { cl.events = n; }); }}};
    case Command::kLogs:
      return {
          {"role", 0, true, [&l](const std::string& v) -> Status {
             if (v.empty()) return Error{"--role: must not be empty"};
             l.role = v;
             return OkStatus(); }},
          {"rank", 0, true, [&l](const std::string& v) { return Set(Int("rank", v, 0, 100000), [&l](int n) { l.rank = n; }); }},
          {"container", 'c', true, text(&l.container)},
          {"follow", 'f', false, [&l](const std::string& v) { return Set(Bool("follow", v), [&l](bool b) { l.follow = b; }); }},
          {"tail", 0, true, [&l](const std::string& v) { return Set(Int("tail", v, -1, 1000000), [&l](int n) { l.tail = n; }); }},
      };
    default:
      return {};
  }
}

const Flag* Find(const std::vector<Flag>& flags, const std::string& name, char short_name) {
  for (const Flag& f : flags) {
    if ((!name.empty() && f.name == name) || (short_name != 0 && f.short_name == short_name)) return &f;
  }
  return nullptr;
}

std::string CommandName(Command c) {
  for (const auto& [name, command] : Commands()) {
    if (command == c && name != "ls") return name;
  }
  return "";
}

// The flags that take values wherever they appear (global ones), for finding the command.
bool GlobalTakesValue(const std::string& arg) {
  if (arg.find('=') != std::string::npos) return false;
  static const char* kValued[] = {"--kubeconfig", "--context", "--namespace", "--output", "-n", "-o"};
  return std::find(std::begin(kValued), std::end(kValued), arg) != std::end(kValued);
}

Status CheckSubmit(const SubmitOptions& s, const std::vector<std::string>& raw_flags) {
  if (!s.file.empty()) {
    for (const std::string& f : raw_flags) {
      if (f != "filename" && f != "wait" && f != "timeout" && f != "dry-run") {
        return Error{"--" + f + " cannot be combined with -f: the manifest describes the whole job"};
      }
    }
    if (!s.command.empty()) return Error{"a command after \"--\" cannot be combined with -f"};
  } else {
    if (s.image.empty()) return Error{"submit needs --image (or -f FILE)"};
    if (s.command.empty()) return Error{"submit needs the training command after \"--\", e.g. -- python train.py"};
  }
  if (s.timeout_seconds > 0 && !s.wait) return Error{"--timeout applies to --wait only"};
  if (s.wait && s.dry_run) return Error{"--wait cannot be combined with --dry-run"};
  return OkStatus();
}

}  // namespace

Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  // 1. The command: the first argument that is neither a flag nor a global flag's value.
  size_t command_at = args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.size() > 1 && a[0] == '-') {
      if (GlobalTakesValue(a)) ++i;
      continue;
    }
    auto it = Commands().find(a);
    if (it == Commands().end()) return Error{"unknown command \"" + a + "\" (see fleetctl --help)"};
    cl.command = it->second;
    command_at = i;
    break;
  }
  // 2. Every flag, with the command's table; the remaining arguments are names.
  std::vector<Flag> global = GlobalFlags(cl);
  std::vector<Flag> local = CommandFlags(cl);
  std::vector<std::string> used;   // command flags given, by long name
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i == command_at) continue;
    const std::string& a = args[i];
    if (a == "--") {
      if (cl.command != Command::kSubmit) return Error{"unexpected \"--\": only submit takes a command after it"};
      cl.submit.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      positional.push_back(a);
      continue;
    }
    std::string name, value;
    char short_name = 0;
    bool inline_value = false;
    if (a[1] == '-') {
      name = a.substr(2);
      const auto eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inline_value = true;
      }
      name = Normalize(name);
    } else {
      short_name = a[1];
      if (a.size() > 2) {
        value = a.substr(a[2] == '=' ? 3 : 2);
        inline_value = true;
      }
    }
    const Flag* flag = Find(local, name, short_name);
    const bool is_local = flag != nullptr;
    if (!flag) flag = Find(global, name, short_name);
    if (!flag) {
      const std::string shown = a.substr(0, a.find('='));   // as given
      return Error{"unknown flag " + shown + (cl.command == Command::kNone ? "" : " for " + CommandName(cl.command)) +
                   " (see fleetctl " + (cl.command == Command::kNone ? "" : CommandName(cl.command) + " ") + "--help)"};
    }
    if (!inline_value) {
      if (!flag->takes_value) {
        value = "true";
      } else if (i + 1 < args.size() && i + 1 != command_at) {
        value = args[++i];
      } else {
        return Error{"--" + flag->name + " needs a value"};
      }
    } else if (short_name && !flag->takes_value) {
      return Error{std::string("-") + short_name + " takes no value"};
    }
    Status status = flag->set(value);
    if (!status) return Error{status.error()};
    if (is_local) used.push_back(flag->name);
  }
  if (cl.help_for != Command::kNone) return cl;
  // 3. Arguments per command.
  auto names = [&](size_t min, size_t max, const std::string& what) -> Status {
    if (positional.size() < min) return Error{CommandName(cl.command) + " needs " + what};
    if (positional.size() > max) return Error{"unexpected argument \"" + positional[max] + "\""};
    cl.names = positional;
    return OkStatus();
  };
  Status status = OkStatus();
  switch (cl.command) {
    case Command::kNone:
      return Error{"no command given (see fleetctl --help)"};
    case Command::kHelp:
      if (positional.size() > 1) return Error{"unexpected argument \"" + positional[1] + "\""};
      if (!positional.empty()) {
        auto it = Commands().find(positional[0]);
        if (it == Commands().end()) return Error{"unknown command \"" + positional[0] + "\""};
        cl.help_for = it->second;
      } else {
        cl.help_for = Command::kHelp;
      }
      return cl;
    case Command::kSubmit:
      status = names(0, 0, "");
      if (status) status = CheckSubmit(cl.submit, used);
      break;
    case Command::kList:
    case Command::kVersion:
      status = names(0, 0, "");
      if (cl.all_namespaces && !cl.global.ns.empty()) status = Error{"--all-namespaces cannot be combined with --namespace"};
      break;
    case Command::kStatus:
    case Command::kLogs:
    case Command::kStop:
    case Command::kResume:
      status = names(1, 1, "the FleetJob's name");
      break;
    case Command::kDelete:
      status = names(1, 1000, "the FleetJob's name");
      break;
  }
  if (!status) return Error{status.error()};
  return cl;
}

std::string Usage(Command command) {
  switch (command) {
    case Command::kSubmit:
      return R"(usage: fleetctl submit [flags] -- COMMAND [ARGS...]
       fleetctl submit -f JOB.yaml [--wait] [--dry-run]

Creates a FleetJob. From flags (PaddleCloud style): a parameter-server job with --server_num > 0,
else a collective job; every pod runs COMMAND in --image. Or from a manifest (-f, "-" = stdin).

  -f, --filename=FILE        a FleetJob manifest
  --name=NAME                the job's name (default: the script's name and a random suffix)
  --image=IMAGE              the training image (required without -f)
  --server_num=N             parameter servers (default 0: a collective job)
  --worker_num=N             trainers (default 1)
  --gpus=N                   GPUs per worker pod (nvidia.com/gpu); N > 1 in a collective job runs N
                             processes per pod through fleetrun (python train.py -> fleetrun train.py)
  --cpu=Q, --memory=Q        per pod, requests = limits (e.g. --cpu=4 --memory=16Gi)
  -e, --env=NAME=VALUE       an environment variable of the training container (repeatable)
  --network=PodIP|Service|HostNetwork       how peers address each other (default PodIP)
  --restart_policy=Never|OnFailure|ExitCode for failed pods (default Never)
  --backoff_limit=N          restarts allowed before the job fails (default 3)
  --gang=Volcano|SchedulerPlugins           gang scheduling; --queue=Q (Volcano)
  --priority_class=NAME      the pods' PriorityClass
  --sidecar_image=IMAGE      fleet-sidecar's image (default: the operator's)
  --dry-run                  print the FleetJob (-o json|yaml, default yaml), create nothing
  --wait                     show progress until the job runs or ends; exit 1 if it fails
  --timeout=DURATION         give up waiting after this long (e.g. 10m)
)";
    case Command::kList:
      return R"(usage: fleetctl list [-A] [-l SELECTOR]

Lists FleetJobs: name, mode, phase, ready servers and workers, restarts, age.

  -A, --all-namespaces       every namespace
  -l, --selector=SELECTOR    a label selector (e.g. team=ranking)
)";
    case Command::kStatus:
      return R"(usage: fleetctl status NAME [--events=N]

A FleetJob's phase, pods per role (ready, active, succeeded, failed), conditions, the pods that are
not running yet and why, and its most recent events.

  --events=N                 how many events (default 10)
)";
    case Command::kLogs:
      return R"(usage: fleetctl logs NAME [--role=ROLE] [--rank=N] [-c CONTAINER] [-f] [--tail=N]

The log of one pod of the job: <NAME>-<ROLE>-<N> (default worker 0, the trainer fleetrun shows).

  --role=ROLE                server, worker or a heter stage's name (default worker)
  --rank=N                   the pod's index in its role (default 0)
  -c, --container=NAME       default: the pod's first container (fleet-sidecar: the gate's log)
  -f, --follow               keep printing new output until the pod ends; a replaced pod (a new
                             run) is followed from its start
  --tail=N                   only the last N lines
)";
    case Command::kStop:
      return "usage: fleetctl stop NAME\n\nSuspends a FleetJob (spec.runPolicy.suspend): its pods are removed, the job object stays.\n"
             "fleetctl resume NAME starts it again as a new run.\n";
    case Command::kResume:
      return "usage: fleetctl resume NAME\n\nResumes a suspended FleetJob: its pods are created again (a new run).\n";
    case Command::kDelete:
      return "usage: fleetctl delete NAME...\n\nDeletes FleetJobs; their pods and other children go with them.\n";
    case Command::kVersion:
      return "usage: fleetctl version\n";
    default:
      return R"(usage: fleetctl [flags] COMMAND [ARGS]

Submits and manages PaddlePaddle FleetJobs on Kubernetes.

Commands:
  submit    create a FleetJob from fleetrun-style flags or a manifest (--wait: until it runs)
  list      list FleetJobs
  status    a job's phase, pods per role, conditions and recent events
  logs      a pod's log (-f follows)
  stop      suspend a job (its pods are removed); resume starts it again
  delete    delete jobs
  version   fleetctl's version

Flags for every command (as kubectl's):
  --kubeconfig=PATH          default: $KUBECONFIG, in-cluster, ~/.kube/config
  --context=NAME             a kubeconfig context (default: the current one)
  -n, --namespace=NS         default: the context's namespace
  -o, --output=json|yaml     machine-readable output
  -h, --help                 this help; fleetctl COMMAND --help for a command's

Exit status: 0 success; 1 an error (one line on stderr) or, with --wait, a failed job; 2 a usage
error.
)";
  }
}

}  // namespace fleet::cli
