#include "fleet/cli/app.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "fleet/api/job_status.h"
#include "fleet/api/names.h"
#include "fleet/base/json_read.h"
#include "fleet/cli/command_line.h"
#include "fleet/cli/job_spec.h"
#include "fleet/cli/render.h"
#include "fleet/cli/yaml_json.h"
#include "fleet/kube/client.h"
#include "fleet/kube/config.h"

#ifndef FLEET_VERSION
#define FLEET_VERSION "unknown"
#endif

namespace fleet::cli {
namespace {

using kube::ApiStatus;
using kube::Code;
using Clock = std::chrono::steady_clock;

const kube::Resource kFleetJobs{api::kGroup, api::kVersion, api::kFleetJobResource, true};
using api::kJobLabel;
// How often `logs -f` reads the log again: the client can read a log but not stream it.
constexpr std::chrono::milliseconds kLogPoll{500};
// A log stream that ended while its container still shows as running this long after is taken up
// again (a status that lags the container's exit is not).
constexpr std::chrono::seconds kEndedGrace{5};
// No such moment (yet): a time point `logs -f` has not seen.
constexpr Clock::time_point kNever = Clock::time_point::min();

// Where `logs -f` opens a log stream (Client::FollowLog): the last `tail` lines (-1: all), of
// those written in the last `since` seconds (0: of all).
struct LogStart {
  int64_t tail = -1;
  int64_t since = 0;
};

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

// A message from the server or a library on one line, as people see it (Printable).
std::string OneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return Printable(text);
}

// The job's phase as written ("" before the operator has seen it).
std::string Phase(const Json& job) { return PhaseText(StatusOf(job)); }

// Whether the job has stopped for good or until resumed: nothing will change by waiting.
bool HasStopped(const api::FleetJobStatus& status) {
  return api::IsFinished(status.phase) || status.phase == api::JobPhase::kSuspended;
}

std::string NameOf(const Json& obj) { return obj.value("metadata", Json::object()).value("name", ""); }

// An error: its one line, and the exit status.
struct Failure {
  std::string message;
  int exit_code = 1;
};

class Session {
 public:
  Session(const CommandLine& cl, std::istream& in, std::ostream& out, std::ostream& err, Terminals terminals)
      : cl_(cl), in_(in), out_(out), err_(err), terminals_(terminals) {}

  // Loads the cluster config and makes the client; without a config only --dry-run works.
  std::optional<Failure> Connect(const EnvMap& env, bool need_cluster) {
    auto config = kube::LoadDefaultConfig(env, cl_.global.kubeconfig, cl_.global.context);
    if (!config.ok()) {
      ns_ = cl_.global.ns.empty() ? "default" : cl_.global.ns;
      if (!need_cluster) return std::nullopt;
      return Failure{"no cluster configured: " + OneLine(config.status().message()) +
                     " (pass --kubeconfig, set KUBECONFIG, or run in a pod)"};
    }
    server_ = config->server;
    ns_ = cl_.global.ns.empty() ? config->default_namespace : cl_.global.ns;
    kube::ClientOptions options;
    options.user_agent = "fleetctl/" FLEET_VERSION;
    options.max_attempts = 3;
    options.backoff_cap = std::chrono::milliseconds(1000);
    auto client = kube::Client::Create(*config, options);
    if (!client.ok()) return Failure{OneLine(client.status().message())};
    client_ = *client;
    return std::nullopt;
  }

  std::optional<Failure> Run() {
    switch (cl_.command) {
      case Command::kSubmit: return Submit();
      case Command::kList: return List();
      case Command::kStatus: return Status();
      case Command::kTop: return Top();
      case Command::kLogs: return Logs();
      case Command::kStop: return Suspend(cl_.names[0], true);
      case Command::kResume: return Suspend(cl_.names[0], false);
      case Command::kDelete: return Delete();
      default: return Failure{"nothing to do", 2};
    }
  }

 private:
  bool Machine() const { return cl_.global.output != Output::kText; }

  void Print(const Json& doc) {
    if (cl_.global.output == Output::kJson) {
      // Log text is whatever the container wrote: bytes that are not UTF-8 print as U+FFFD.
      out_ << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
    } else {
      out_ << ToYaml(doc);
    }
    out_.flush();
  }

  // Progress and notes: on stdout for people, on stderr when stdout carries a document.
  std::ostream& Note() { return Machine() ? err_ : out_; }
  bool NoteIsTerminal() const { return Machine() ? terminals_.err : terminals_.out; }

  // ---- errors -----------------------------------------------------------------------------------
  std::string CrdMissing() const {
    return "the FleetJob API (fleetjobs.fleet.paddlepaddle.org/v1alpha1) is not installed in the cluster at " +
           server_ + ": install the chart (helm install fleetjob charts/fleetjob) or kubectl apply -f crds/fleetjob.yaml";
  }

  // A 404 from a FleetJob call: the CRD is missing when the collection itself is unknown.
  bool CrdInstalled() {
    kube::ListOptions probe;
    probe.limit = 1;
    const ApiStatus first_page = client_->ListPages(kFleetJobs, ns_, probe, [](std::string_view) { return false; });
    return first_page.ok() || first_page.code() != Code::kNotFound;
  }

  // How much of a list fleetctl reads: more than a person reads in a table, and a server that
  // keeps answering with a continue token (3.3 GB against an endless one) gets a clear error
  // instead of fleetctl's memory.
  static constexpr int64_t kListPageSize = 500;
  static constexpr int kMaxListPages = 100;
  static constexpr size_t kMaxListItems = 20000;

  // The List object (its items from every page), in pages of kListPageSize, within the bounds above.
  kube::StatusOr<Json> ListBounded(const kube::Resource& r, const std::string& ns, kube::ListOptions options) {
    options.limit = kListPageSize;
    Json list, items = Json::array();
    int pages = 0;
    std::string too_much;
    const ApiStatus status = client_->ListPages(r, ns, options, [&](std::string_view text) {
      Json page = Json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!page.is_object()) return false;   // ListPages has checked it: cannot happen
      for (Json& item : page.value("items", Json::array())) items.push_back(std::move(item));
      page.erase("items");
      const bool more = !page.value("metadata", Json::object()).value("continue", "").empty();
      list = std::move(page);
      ++pages;
      if (items.size() > kMaxListItems || (more && pages == kMaxListPages)) {
        too_much = "listing " + r.plural + " stopped at " + std::to_string(items.size()) + " items in " +
                   std::to_string(pages) + " pages (at most " + std::to_string(kMaxListItems) + " items, " +
                   std::to_string(kMaxListPages) + " pages): the server keeps sending more";
        return false;
      }
      return true;
    });
    if (!status.ok()) return status;
    if (!too_much.empty()) return ApiStatus(Code::kMalformed, too_much);
    if (!list.is_object()) list = Json::object();
    if (list.contains("metadata") && list["metadata"].is_object()) list["metadata"].erase("continue");
    list["items"] = std::move(items);
    return list;
  }

  Failure Explain(const ApiStatus& s, const std::string& job = "") {
    switch (s.code()) {
      case Code::kNotFound:
        if (!CrdInstalled()) return {CrdMissing()};
        if (!job.empty()) return {"fleetjob \"" + job + "\" not found in namespace \"" + ns_ + "\""};
        return {OneLine(s.message())};
      case Code::kUnavailable:
        return {"cannot reach the cluster at " + server_ + ": " + OneLine(s.message())};
      case Code::kUnauthorized:
        return {"the cluster at " + server_ + " did not accept the credentials: " + OneLine(s.message())};
      case Code::kAlreadyExists:
        return {"fleetjob \"" + job + "\" already exists in namespace \"" + ns_ + "\""};
      case Code::kInvalid:
        return {"the API server refused the FleetJob: " + OneLine(s.message())};
      default:
        return {OneLine(s.message())};
    }
  }

  kube::StatusOr<Json> GetJob(const std::string& name) { return client_->Get(kFleetJobs, ns_, name); }

  // ---- submit ----------------------------------------------------------------------------------
  std::optional<Failure> Submit() {
    const SubmitOptions& s = cl_.submit;
    Result<Json> job = Error{""};
    if (!s.file.empty()) {
      std::string text;
      if (s.file == "-") {
        text.assign(std::istreambuf_iterator<char>(in_), std::istreambuf_iterator<char>());
      } else {
        std::ifstream f(s.file);
        if (!f) return Failure{"cannot read " + s.file};
        text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
      }
      auto docs = ParseYamlDocuments(text);
      if (!docs) return Failure{s.file + ": " + docs.error()};
      job = PrepareManifest(std::move(*docs), ns_, !cl_.global.ns.empty());
      if (job) ns_ = job->at("metadata").value("namespace", ns_);
    } else {
      job = BuildFleetJob(s, ns_);
    }
    if (!job) return Failure{job.error(), 2};
    for (const std::string& flag : s.fleetctl_flags_in_command) {
      err_ << "fleetctl: note: " << flag << " is after \"--\": it goes to the training command, not to fleetctl "
           << "(fleetctl's flags go before \"--\")\n";
    }
    if (s.dry_run) {
      if (Machine()) {
        Print(*job);
      } else {
        out_ << ToYaml(*job);
      }
      return std::nullopt;
    }
    auto created = client_->Create(kFleetJobs, ns_, *job);
    if (!created.ok()) return Explain(created.status(), NameOf(*job));
    const std::string name = NameOf(*created);
    if (!Machine()) out_ << "fleetjob/" << name << " created\n" << std::flush;
    Json final_job = *created;
    std::optional<Failure> failure;
    if (s.wait) {
      WaitProgress progress(name, NoteIsTerminal());
      failure = Wait(name, &final_job, progress);
      Note() << progress.Finish() << std::flush;
    }
    if (Machine()) Print(final_job);
    return failure;
  }

  // Progress lines until the job is Running (with --until=done: Succeeded) or has ended (or the
  // timeout passes).
  std::optional<Failure> Wait(const std::string& name, Json* job, WaitProgress& progress) {
    const SubmitOptions& s = cl_.submit;
    const auto deadline = s.timeout_seconds > 0 ? Clock::now() + std::chrono::seconds(s.timeout_seconds)
                                                : Clock::time_point::max();
    auto report = [&](const Json& j) { Note() << progress.Update(j, Now()) << std::flush; };
    // Whether waiting is over, and how: Running or Succeeded end it well, Failed and Suspended not.
    struct End {
      std::optional<Failure> failure;
    };
    auto ended = [&](const Json& j) -> std::optional<End> {
      const api::FleetJobStatus status = StatusOf(j);
      if ((status.phase == api::JobPhase::kRunning && !s.until_done) || status.phase == api::JobPhase::kSucceeded) {
        return End{};
      }
      if (status.phase == api::JobPhase::kFailed) return End{Failure{"fleetjob \"" + name + "\" failed: " + status.message}};
      if (status.phase == api::JobPhase::kSuspended) return End{Failure{"fleetjob \"" + name + "\" is suspended (fleetctl resume " + name + ")"}};
      return std::nullopt;
    };
    report(*job);
    while (true) {
      if (auto end = ended(*job)) return end->failure;
      const auto now = Clock::now();
      if (now >= deadline) {
        return Failure{"timed out after " + std::to_string(s.timeout_seconds) + "s waiting for fleetjob \"" + name +
                       "\" (phase " + (Phase(*job).empty() ? "<none>" : Phase(*job)) + ")"};
      }
      kube::WatchOptions watch;
      watch.resource_version = job->value("metadata", Json::object()).value("resourceVersion", "");
      watch.field_selector = "metadata.name=" + name;
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - now).count();
      watch.timeout_seconds = static_cast<int>(std::clamp<int64_t>(left, 1, 60));
      bool deleted = false, done = false;
      kube::CancelToken cancel, finished;
      std::thread timer;
      if (deadline != Clock::time_point::max()) {
        timer = std::thread([&] {
          if (!finished.SleepFor(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()))) {
            cancel.Cancel();
          }
        });
      }
      ApiStatus status = client_->Watch(kFleetJobs, ns_, watch, [&](const kube::WatchEvent& ev) {
        if (ev.type == kube::WatchEventType::kDeleted) {
          deleted = true;
          return false;
        }
        if (ev.type == kube::WatchEventType::kBookmark) {
          (*job)["metadata"]["resourceVersion"] =
              ev.object.value("metadata", Json::object()).value("resourceVersion", "");
          return true;
        }
        *job = ev.object;
        report(*job);
        done = ended(*job).has_value();
        return !done;
      }, cancel);
      finished.Cancel();
      if (timer.joinable()) timer.join();
      if (deleted) return Failure{"fleetjob \"" + name + "\" was deleted"};
      if (done || status.code() == Code::kCancelled) continue;   // judged (or timed out) at the top
      if (!status.ok()) {
        // The watch ended early (an expired resourceVersion, a dropped connection): read the job
        // again and watch from there.
        auto again = GetJob(name);
        if (!again.ok()) return Explain(again.status(), name);
        *job = *again;
        report(*job);
      }
    }
  }

  // ---- list, status --------------------------------------------------------------------------
  std::optional<Failure> List() {
    kube::ListOptions options;
    options.label_selector = cl_.selector;
    auto list = ListBounded(kFleetJobs, cl_.all_namespaces ? "" : ns_, options);
    if (!list.ok()) {
      if (list.status().code() == Code::kNotFound) return Failure{CrdMissing()};
      return Explain(list.status());
    }
    if (Machine()) {
      Print(*list);
      return std::nullopt;
    }
    const Json items = list->value("items", Json::array());
    if (items.empty()) {
      err_ << "No FleetJobs found" << (cl_.all_namespaces ? "" : " in namespace " + ns_) << ".\n";
      return std::nullopt;
    }
    out_ << JobsTable(items, cl_.all_namespaces, Now());
    return std::nullopt;
  }

  std::optional<Failure> Status() {
    const std::string& name = cl_.names[0];
    auto job = GetJob(name);
    if (!job.ok()) return Explain(job.status(), name);
    kube::ListOptions pods_options;
    pods_options.label_selector = std::string(kJobLabel) + "=" + name;
    auto pods = ListBounded(kube::Resource::Pods(), ns_, pods_options);
    if (!pods.ok()) return Explain(pods.status());
    kube::ListOptions events_options;
    events_options.field_selector =
        "involvedObject.uid=" + StringMember(ObjectMember(*job, "metadata"), "uid");
    auto events = ListBounded(kube::Resource::Events(), ns_, events_options);
    if (!events.ok()) return Explain(events.status());
    const StatusDocument doc = StatusDocument::Of(*job, ArrayMember(*pods, "items"), ArrayMember(*events, "items"),
                                                  cl_.events);
    if (Machine()) {
      Print(doc.ToJson());
    } else {
      out_ << StatusText(doc, Now());
    }
    return std::nullopt;
  }

  // The job's ranks from status.progress until the job ends: redrawn in place every --interval on
  // a terminal; else a table (or with -o, a document) each time the phase or the progress changes.
  std::optional<Failure> Top() {
    const std::string& name = cl_.names[0];
    const bool live = !Machine() && terminals_.out && !cl_.top.once;
    std::optional<std::string> shown;   // the phase and progress last printed
    while (true) {
      auto job = GetJob(name);
      if (!job.ok()) {
        if (shown && job.status().code() == Code::kNotFound) return Failure{"fleetjob \"" + name + "\" was deleted"};
        return Explain(job.status(), name);
      }
      const api::FleetJobStatus status = StatusOf(*job);
      const std::string phase = PhaseText(status);
      // status.progress as the API has it, for -o (as in status -o); top's table reads it typed.
      const Json written = job->value("status", Json::object());
      const Json progress = status.progress && written.is_object() ? written.value("progress", Json()) : Json();
      const std::string state = phase + "\n" + progress.dump();
      if (live) {
        out_ << "\x1b[H\x1b[2J" << TopText(*job, Now()) << std::flush;   // cursor home, clear the screen
      } else if (state != shown) {
        if (Machine()) {
          Print({{"name", name}, {"namespace", ns_}, {"phase", phase}, {"progress", progress}});
        } else {
          out_ << (shown ? "\n" : "") << TopText(*job, Now()) << std::flush;
        }
      }
      shown = state;
      if (cl_.top.once || HasStopped(status)) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::seconds(cl_.top.interval_seconds));
    }
  }

  // ---- logs ---------------------------------------------------------------------------------------
  std::optional<Failure> Logs() {
    const std::string& name = cl_.names[0];
    const LogsOptions& o = cl_.logs;
    auto job = GetJob(name);
    if (!job.ok()) return Explain(job.status(), name);
    const auto roles = RoleNames(*job);
    if (std::find(roles.begin(), roles.end(), o.role) == roles.end()) {
      std::string list;
      for (const auto& r : roles) list += (list.empty() ? "" : ", ") + r;
      return Failure{"fleetjob \"" + name + "\" has no role \"" + o.role + "\" (its roles: " + list + ")"};
    }
    const std::string pod = name + "-" + o.role + "-" + std::to_string(o.rank);
    return o.follow ? Follow(name, pod) : LogOnce(name, pod, *job);
  }

  std::string ContainerOf(const Json& pod) const {
    if (!cl_.logs.container.empty()) return cl_.logs.container;
    const Json containers = pod.value("spec", Json::object()).value("containers", Json::array());
    return containers.empty() ? "" : containers[0].value("name", "");
  }

  // Which run of the container the pod status shows (its restart count and container ID), and
  // whether it is running.
  struct ContainerState {
    std::string run;
    bool running = false;
  };
  static ContainerState StateOf(const Json& pod, const std::string& container) {
    const Json status = pod.value("status", Json::object());
    const Json statuses = status.is_object() ? status.value("containerStatuses", Json::array()) : Json::array();
    if (!statuses.is_array()) return {};
    for (const Json& s : statuses) {
      if (!s.is_object() || s.value("name", Json()) != container) continue;
      const Json restarts = s.value("restartCount", Json());
      const Json id = s.value("containerID", Json());
      const Json state = s.value("state", Json());
      return {(restarts.is_number_integer() ? restarts.dump() : "") + "/" + (id.is_string() ? id.get<std::string>() : ""),
              state.is_object() && state.contains("running")};
    }
    return {};
  }

  void EmitLog(const std::string& pod, const std::string& container, const std::string& text) {
    if (text.empty()) return;
    if (Machine()) {
      Print({{"pod", pod}, {"container", container}, {"log", text}});
    } else {
      out_ << text << std::flush;
    }
  }

  std::optional<Failure> LogOnce(const std::string& job_name, const std::string& pod_name, const Json& job) {
    auto pod = client_->Get(kube::Resource::Pods(), ns_, pod_name);
    if (!pod.ok()) {
      if (pod.status().code() == Code::kNotFound) {
        return Failure{"pod " + pod_name + " does not exist: fleetjob \"" + job_name + "\" is " +
                       (Phase(job).empty() ? "<none>" : Phase(job)) + " (fleetctl status " + job_name + ")"};
      }
      return Explain(pod.status());
    }
    const std::string container = ContainerOf(*pod);
    auto log = client_->GetLog(ns_, pod_name, container, cl_.logs.tail);
    if (!log.ok()) return Failure{"pod " + pod_name + ": " + OneLine(log.status().message())};
    if (Machine()) {
      Print({{"pod", pod_name}, {"container", container}, {"log", *log}});
    } else {
      out_ << *log << std::flush;
    }
    return std::nullopt;
  }

  // What `logs -f` knows from one round of Follow to the next.
  struct Followed {
    std::string uid;                          // the pod's
    std::string waiting_for;                  // the note last printed
    std::string followed_run;                 // "pod uid/container run" whose stream was read last
    bool first = true;                        // nothing read yet: start with --tail
    Clock::time_point resume_from = kNever;   // take followed_run up again from here
    Clock::time_point ended = kNever;         // when followed_run's stream ended cleanly
    Clock::time_point last_text = kNever;     // when followed_run's last text came

    // A new pod of the same name: a new run, followed from its start.
    void NewPod(const std::string& pod_uid) {
      uid = pod_uid;
      followed_run.clear();
      resume_from = ended = last_text = kNever;
    }

    // Where to read `run`'s log from: the last `tail` lines at first, a new run from its start,
    // the followed run from a little before where it was left. Nullopt: the followed run's stream
    // ended with its container; nothing comes until the container restarts.
    std::optional<LogStart> StartOf(const std::string& run, bool running, int64_t tail) {
      if (first) return LogStart{tail, 0};
      if (run != followed_run) return LogStart{};
      if (resume_from == kNever && running && Clock::now() - ended > kEndedGrace) {
        // Its stream ended, and well after that the same container still runs (not a status that
        // lags its exit): a proxy or log rotation ended it. Take it up again.
        resume_from = last_text != kNever ? last_text : ended;
      }
      if (resume_from == kNever) return std::nullopt;
      return LogStart{-1, std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - resume_from).count() + 2};
    }

    // A stream of `run` that brought text or ended cleanly (with its container) is the one
    // followed now; a broken one is resumed from its last text. A stream that broke with no text
    // changes nothing: the next asks for the same again (the tail, the run's start, or the same
    // resume point).
    void Streamed(const std::string& run, bool got_text, bool ended_cleanly) {
      if (!got_text && !ended_cleanly) return;
      if (run != followed_run && !got_text) last_text = kNever;
      first = false;
      followed_run = run;
      resume_from = ended_cleanly ? kNever : last_text;
      if (ended_cleanly) ended = Clock::now();
    }
  };

  // How Follow ends: with a failure, or none (the pod or the job ended).
  struct FollowEnd {
    std::optional<Failure> failure;
  };

  void NoteOnce(Followed& f, const std::string& what) {
    if (what != f.waiting_for) Note() << "fleetctl: " << what << "\n" << std::flush;
    f.waiting_for = what;
  }

  // Follows the log as the API server streams it (follow=true: one request per container run,
  // each byte sent once), until the pod ends. A restarted container, or a pod replaced by a new one
  // of the same name (a new run), is followed from its start. A stream that breaks, or ends while
  // its container still runs, is opened again from a little before the last text it brought: lines
  // around the break may repeat, none are lost.
  std::optional<Failure> Follow(const std::string& job_name, const std::string& pod_name) {
    Followed f;
    while (true) {
      auto pod = client_->Get(kube::Resource::Pods(), ns_, pod_name);
      if (!pod.ok()) {
        if (pod.status().code() != Code::kNotFound) return Explain(pod.status());
        if (auto end = AwaitPod(job_name, pod_name, f)) return end->failure;
        continue;
      }
      const std::string pod_uid = pod->value("metadata", Json::object()).value("uid", "");
      if (pod_uid != f.uid) {
        if (!f.uid.empty()) NoteOnce(f, "pod " + pod_name + " was replaced (a new run); following the new one");
        f.NewPod(pod_uid);
      }
      const std::string phase = pod->value("status", Json::object()).value("phase", "");
      const std::string container = ContainerOf(*pod);
      const ContainerState state = StateOf(*pod, container);
      const std::string run = pod_uid + "/" + state.run;
      const std::optional<LogStart> start = f.StartOf(run, state.running, cl_.logs.tail);
      if (!start) {
        // Wait for the pod to end or the container to restart.
        if (phase == "Succeeded" || phase == "Failed") return std::nullopt;
        std::this_thread::sleep_for(kLogPoll);
        continue;
      }
      bool got_text = false;
      const ApiStatus followed = StreamLog(pod_name, container, *start, f, &got_text);
      if (followed.code() == Code::kBadRequest || followed.code() == Code::kNotFound) {
        // Not started yet; or the pod (or its node) went: see above.
        if (followed.code() == Code::kBadRequest) NoteOnce(f, "pod " + pod_name + ": " + OneLine(followed.message()));
        std::this_thread::sleep_for(kLogPoll);
        continue;
      }
      if (!followed.ok() && !followed.IsRetryable()) return Failure{"pod " + pod_name + ": " + OneLine(followed.message())};
      f.Streamed(run, got_text, followed.ok());
      if (!followed.ok()) {
        NoteOnce(f, "pod " + pod_name + ": the log stream broke (" + OneLine(followed.message()) + "); following again");
        std::this_thread::sleep_for(kLogPoll);
      }
    }
  }

  // The pod is not there (not yet, or no more): the end when its job is gone or has stopped, else
  // (nullopt) a wait before Follow looks for the pod again.
  std::optional<FollowEnd> AwaitPod(const std::string& job_name, const std::string& pod_name, Followed& f) {
    auto job = GetJob(job_name);
    if (!job.ok()) {
      if (job.status().code() == Code::kNotFound) return FollowEnd{Failure{"fleetjob \"" + job_name + "\" was deleted"}};
      return FollowEnd{Explain(job.status())};
    }
    const api::FleetJobStatus status = StatusOf(*job);
    const std::string phase = PhaseText(status);
    if (HasStopped(status)) {
      NoteOnce(f, "pod " + pod_name + " is gone and fleetjob \"" + job_name + "\" is " + phase);
      return FollowEnd{};
    }
    NoteOnce(f, "waiting for pod " + pod_name + " (fleetjob \"" + job_name + "\" is " +
                    (phase.empty() ? "<none>" : phase) + ")");
    std::this_thread::sleep_for(kLogPoll);
    return std::nullopt;
  }

  // One request that streams the container's log from `start` to the output until the stream
  // ends; *got_text says whether it brought any, f.last_text when.
  ApiStatus StreamLog(const std::string& pod_name, const std::string& container, LogStart start, Followed& f,
                      bool* got_text) {
    const kube::CancelToken never;
    // Machine output gets whole lines (a chunk may end anywhere, even inside a UTF-8 character).
    std::string partial;
    auto emit = [&](std::string_view text) {
      *got_text = true;
      f.last_text = Clock::now();
      if (!Machine()) return EmitLog(pod_name, container, std::string(text));
      partial += text;
      const size_t end = partial.rfind('\n');
      if (end == std::string::npos) return;
      EmitLog(pod_name, container, partial.substr(0, end + 1));
      partial.erase(0, end + 1);
    };
    const ApiStatus followed = client_->FollowLog(ns_, pod_name, container, start.tail, start.since,
                                                  [&](std::string_view text) {
                                                    emit(text);
                                                    f.waiting_for.clear();
                                                    return true;
                                                  },
                                                  never);
    EmitLog(pod_name, container, partial);
    return followed;
  }

  // ---- stop, resume, delete -----------------------------------------------------------------------
  std::optional<Failure> Suspend(const std::string& name, bool suspend) {
    const Json patch = {{"spec", {{"runPolicy", {{"suspend", suspend}}}}}};
    auto patched = client_->MergePatch(kFleetJobs, ns_, name, patch);
    if (!patched.ok()) return Explain(patched.status(), name);
    if (Machine()) {
      Print(*patched);
    } else {
      out_ << "fleetjob/" << name << (suspend ? " suspended" : " resumed") << "\n";
    }
    return std::nullopt;
  }

  std::optional<Failure> Delete() {
    Json deleted = Json::array();
    std::optional<Failure> failure;
    for (const std::string& name : cl_.names) {
      auto job = GetJob(name);
      ApiStatus status = job.ok() ? ApiStatus() : job.status();
      if (status.ok()) {
        kube::DeleteOptions options;
        options.propagation_policy = "Background";
        status = client_->Delete(kFleetJobs, ns_, name, options);
      }
      if (!status.ok()) {
        failure = Explain(status, name);
        err_ << "fleetctl: " << failure->message << "\n";
        continue;
      }
      deleted.push_back(*job);
      if (!Machine()) out_ << "fleetjob/" << name << " deleted\n";
    }
    if (Machine()) Print({{"apiVersion", "v1"}, {"kind", "List"}, {"items", deleted}});
    if (failure) failure->message.clear();   // already said, per job
    return failure;
  }

  const CommandLine& cl_;
  std::istream& in_;
  std::ostream& out_;
  std::ostream& err_;
  Terminals terminals_;
  std::shared_ptr<kube::Client> client_;
  std::string server_;
  std::string ns_;
};

}  // namespace

int RunFleetctl(const std::vector<std::string>& args, const EnvMap& env, std::istream& in, std::ostream& out,
                std::ostream& err, Terminals terminals) {
  auto cl = ParseCommandLine(args);
  if (!cl) {
    err << "fleetctl: " << cl.error() << "\n";
    return 2;
  }
  if (cl->help_for != Command::kNone) {
    out << Usage(cl->help_for == Command::kHelp ? Command::kNone : cl->help_for);
    return 0;
  }
  if (cl->command == Command::kVersion) {
    if (cl->global.output == Output::kText) {
      out << "fleetctl " << FLEET_VERSION << "\n";
    } else {
      const Json doc = {{"fleetctl", FLEET_VERSION}};
      out << (cl->global.output == Output::kJson ? doc.dump(2) + "\n" : ToYaml(doc));
    }
    return 0;
  }
  Session session(*cl, in, out, err, terminals);
  const bool need_cluster = !(cl->command == Command::kSubmit && cl->submit.dry_run);
  std::optional<Failure> failure = session.Connect(env, need_cluster);
  if (!failure) {
    try {
      failure = session.Run();
    } catch (const std::exception& e) {   // nlohmann on an unexpected object shape
      failure = Failure{std::string("unexpected answer from the API server: ") + e.what()};
    }
  }
  if (!failure) return 0;
  if (!failure->message.empty()) err << "fleetctl: " << failure->message << "\n";
  return failure->exit_code;
}

}  // namespace fleet::cli
