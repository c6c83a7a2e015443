// Restarts at scale (issue 27): from a trainer's failure until every trainer of the job runs again,
// in place (runPolicy.restartStrategy InPlace) against recreating the pods, in the same run. The
// real fleet-operator binary (a child process, default flags, --sidecar-mode=native) against the
// fake API server, whose kubelet restarts containers in place and plays each pod's sidecar
// (tests/controlplane/fakeapi/trainers.py: the gate, the liveness kill of a superseded trainer,
// the Trainer condition), for a job of `servers` + `workers` pods (default 10 + 990), in each
// repetition, alternating which goes first:
//
//   - in place: the job is Running and its trainers report Running; big-worker-3's trainer ends
//     with 137 (the fake kubelet's `end` action: the kubelet restarts it in its pod). Done when
//     every pod's new trainer instance waits at its gate (Trainer AtGate) and the endpoints
//     ConfigMap names the new run without a barrier: the gates open. Also shown: when every pod's
//     Trainer condition says Running (the fake writes those 1,000 reports one after the other,
//     behind the relabels) and when every pod carries the new run's label;
//   - recreate: the same job without restartStrategy; the same end fails the pod (restartPolicy
//     Never). Done when every pod of a later run is Running and the endpoints ConfigMap names that
//     run: their gates open.
//
// Every milestone comes from a watch (polling would load the fake). The fake models no probe period
// and no kubelet back-off (a real first restart is immediate; a second within 10 minutes waits 10 s
// per container): what is measured is the operator and the API traffic it makes.
//
// usage: restart_scale [workers=990] [servers=10] [repetitions=3] [latency_ms=2] [pod_start_ms=0]
// (pod_start_ms: what a new pod's start costs beyond the fake's free one: the fake's runDelayMs.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "fleet/api/in_place.h"
#include "fleet/kube/client.h"
#include "fleet/operator/controller.h"
#include "fleet/operator/names.h"
#include "harness.h"
#include "operator_bench_util.h"

namespace {

using fleet::bench::Clock;
using fleet::bench::CreateOrExit;
using fleet::bench::LetWatchesStart;
using fleet::bench::Mark;
using fleet::bench::Marks;
using fleet::bench::Median;
using fleet::bench::Seconds;
using fleet::bench::Arg;
using fleet::kube::Client;
using fleet::kube::Json;
using fleet::kube::Resource;
using fleet::kube::testing::FakeApiServer;
using fleet::kube::testing::TempDir;

const Resource kConfigMaps{"", "v1", "configmaps", true};

int IntOr(const std::string& text, int fallback) {
  try {
    return std::stoi(text);
  } catch (const std::exception&) {
    return fallback;
  }
}

// The run of a pod's Trainer condition when it is in `state`, else -1.
int TrainerRunIn(const Json& pod, fleet::api::TrainerState state) {
  for (const Json& c : pod.value("status", Json::object()).value("conditions", Json::array())) {
    if (c.value("type", "") != fleet::api::kTrainerConditionType) continue;
    const auto report = fleet::api::TrainerReport::FromCondition(c.value("reason", ""), c.value("message", ""));
    return report && report->state == state ? report->run : -1;
  }
  return -1;
}

// The run a pod's trainer runs in; the run it waits at the gate for.
int TrainerRun(const Json& pod) { return TrainerRunIn(pod, fleet::api::TrainerState::kRunning); }
int TrainerAtGateFor(const Json& pod) { return TrainerRunIn(pod, fleet::api::TrainerState::kAtGate); }

int RunLabel(const Json& pod) {
  return IntOr(pod["metadata"].value("labels", Json::object()).value(fleet::op::kRunLabel, ""), -1);
}

bool PodRunning(const Json& pod) { return pod.value("status", Json::object()).value("phase", "") == "Running"; }

// Holds once `total` distinct pods satisfy `holds` at once (each pod's latest event decides).
Mark AllPodsAt(size_t total, std::function<bool(const Json&)> holds) {
  auto state = std::make_shared<std::map<std::string, bool>>();
  return [state, total, holds](const Json& pod) {
    (*state)[pod["metadata"].value("name", "")] = holds(pod);
    return static_cast<size_t>(std::count_if(state->begin(), state->end(), [](const auto& e) { return e.second; })) >= total;
  };
}

// The endpoints ConfigMap names a run past `run`, with no barrier: the gates of that run are open.
Mark GatesOpenAfter(int run) {
  return [run](const Json& cm) {
    const Json notes = cm["metadata"].value("annotations", Json::object());
    const int published = IntOr(notes.value(fleet::op::kRunAnnotation, ""), -1);
    return published > run && !notes.contains(fleet::api::kBarrierAnnotation);
  };
}

Json Job(const std::string& ns, int servers, int workers, bool in_place) {
  Json job = fleet::bench::FleetJobObject(ns, "big", servers, workers);
  job["spec"]["worker"]["restartPolicy"] = "OnFailure";
  if (servers > 0) job["spec"]["server"]["restartPolicy"] = "OnFailure";
  if (in_place) job["spec"]["runPolicy"] = {{"restartStrategy", "InPlace"}};
  return job;
}

// Creates the job and waits until it is Running (and, in place, every trainer runs): its run.
int BringUp(const std::shared_ptr<Client>& client, const std::string& ns, int servers, int workers, bool in_place) {
  const size_t total = static_cast<size_t>(servers + workers);
  Marks phase(client, fleet::op::FleetJobResource(), ns,
              {[](const Json& job) { return job.value("status", Json::object()).value("phase", "") == "Running"; }});
  Marks trainers(client, Resource::Pods(), ns, {AllPodsAt(total, [](const Json& pod) { return TrainerRun(pod) >= 0; })});
  LetWatchesStart();
  const auto t0 = Clock::now();
  CreateOrExit(*client, fleet::op::FleetJobResource(), ns, Job(ns, servers, workers, in_place));
  phase.At(0, t0, "the job Running");
  if (in_place) trainers.At(0, t0, "every trainer running");
  auto job = client->Get(fleet::op::FleetJobResource(), ns, "big");
  if (!job.ok()) std::exit(1);
  return (*job)["status"].value("run", 0);
}

struct Restarted {
  double gates_open = 0;   // every trainer of the new attempt exists and its gate is open
  double reported = 0;     // in place: every pod's Trainer condition says Running (the sidecars' reports)
};

// Ends big-worker-3's trainer with 137; how long until the trainers run again in a later run. The
// end is the same for both: every trainer's container of the new attempt exists (in place: its
// new instance waits at the gate; recreate: its new pod runs) and the endpoints ConfigMap opens
// the gates (the run, no barrier): the sidecars then let their trainers go.
Restarted Restart(FakeApiServer& fake, const std::shared_ptr<Client>& client, const std::string& ns, int run, size_t total,
                  bool in_place) {
  Marks pods(client, Resource::Pods(), ns,
             {in_place ? AllPodsAt(total, [run](const Json& pod) { return TrainerAtGateFor(pod) > run || TrainerRun(pod) > run; })
                       : AllPodsAt(total, [run](const Json& pod) { return RunLabel(pod) > run && PodRunning(pod); }),
              AllPodsAt(total, [run](const Json& pod) { return TrainerRun(pod) > run; }),
              AllPodsAt(total, [run](const Json& pod) { return RunLabel(pod) > run; })});
  Marks gates(client, kConfigMaps, ns, {GatesOpenAfter(run), [](const Json& cm) {
                return cm["metadata"].value("annotations", Json::object()).contains(fleet::api::kBarrierAnnotation);
              }});
  LetWatchesStart();
  const auto t0 = Clock::now();
  const Json ended = fake.Control("namespaces/" + ns + "/pods/big-worker-3", {{"action", "end"}, {"exitCode", 137}});
  if (!ended.is_object()) std::exit(1);
  const auto started = pods.At(0, t0, in_place ? "every trainer back at its gate" : "every recreated pod running");
  const auto open = gates.At(0, t0, "the gates of the new run");
  Restarted r{Seconds(std::max(started, open) - t0), 0};
  if (in_place) {
    r.reported = Seconds(pods.At(1, t0, "every Trainer condition Running") - t0);
    std::printf("    in place: the barrier %.2f s, every trainer at its gate %.2f s, the gates open %.2f s; every Trainer "
                "condition Running %.2f s, every pod relabelled %.2f s\n",
                Seconds(gates.At(1, t0, "the barrier") - t0), Seconds(started - t0), Seconds(open - t0), r.reported,
                Seconds(pods.At(2, t0, "relabelled") - t0));
  }
  return r;
}

void Run(int servers, int workers, int repetitions, int latency_ms, int pod_start_ms) {
  FakeApiServer fake({"--nodes", "100"});
  if (!fake.ok()) {
    std::fprintf(stderr, "%s\n", fake.error().c_str());
    std::exit(1);
  }
  auto client = Client::Create(fake.Config()).value();
  fleet::bench::CreateCrd(*client);
  if (latency_ms > 0) fake.Control("faults", {{"latencyMs", latency_ms}});
  // A new pod's start as a node pays it (sandbox, image check, volumes): the fake's is free.
  if (pod_start_ms > 0) fake.Control("config", {{"runDelayMs", pod_start_ms}});
  TempDir dir;
  auto op = fleet::bench::StartOperator(fake, dir, {"--sidecar-mode=native"});
  const size_t total = static_cast<size_t>(servers + workers);
  std::printf("a %d-server, %d-worker job (%zu pods), the real fleet-operator; fake API server latency %d ms per request, "
              "a new pod's start %d ms\n", servers, workers, total, latency_ms, pod_start_ms);
  std::vector<double> in_place, reported, recreate, ratios;
  for (int r = 0; r < repetitions; ++r) {
    const std::string in_place_ns = "inplace" + std::to_string(r), recreate_ns = "recreate" + std::to_string(r);
    for (const std::string& ns : {in_place_ns, recreate_ns}) {
      CreateOrExit(*client, {"", "v1", "namespaces", false}, "", {{"metadata", {{"name", ns}}}});
    }
    const auto once = [&](bool place) {
      const std::string& ns = place ? in_place_ns : recreate_ns;
      const int run = BringUp(client, ns, servers, workers, place);
      const Restarted t = Restart(fake, client, ns, run, total, place);
      (place ? in_place : recreate).push_back(t.gates_open);
      if (place) reported.push_back(t.reported);
      // Its pods go before the next measurement: the fake slows as it fills.
      (void)client->Delete(fleet::op::FleetJobResource(), ns, "big");
    };
    // Alternating the order: neither side always runs on a fuller fake.
    once(r % 2 == 0);
    once(r % 2 != 0);
    ratios.push_back(recreate.back() / in_place.back());
    std::printf("  run %d: failure -> every trainer's gate open in the new run: in place %.2f s, recreate %.2f s (%.1f x)\n", r,
                in_place.back(), recreate.back(), ratios.back());
    std::fflush(stdout);
  }
  std::printf("median of %d: in place %.2f s (every Trainer condition Running: %.2f s), recreate %.2f s: in place is %.1f x "
              "faster (the median of each run's ratio: %.1f x; target >= 10 x at 1,000 pods)\n",
              repetitions, Median(in_place), Median(reported), Median(recreate), Median(recreate) / Median(in_place),
              Median(ratios));
}

}  // namespace

int main(int argc, char** argv) {
  const int workers = Arg(argc, argv, 1, 990);
  const int servers = Arg(argc, argv, 2, 10);
  const int repetitions = std::max(1, Arg(argc, argv, 3, 3));
  const int latency_ms = Arg(argc, argv, 4, 2);
  const int pod_start_ms = Arg(argc, argv, 5, 0);
  Run(servers, workers, repetitions, latency_ms, pod_start_ms);
  return 0;
}
