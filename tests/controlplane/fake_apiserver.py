#!/usr/bin/env python3
"""A fake Kubernetes API server plus a kubelet stand-in, for tests.

Standard library only (python3 >= 3.11), except the optional Kueue stand-in
and custom-resource schema validation (python3-jsonschema, python3-yaml).  It
is deliberately an independent
implementation: it shares no code with FleetJob's C++ Kubernetes client, so a
misunderstanding of the API in one cannot hide itself in the other.

Command line
------------
    fake_apiserver.py --listen 127.0.0.1:0 --ready-file PATH
                      [--tls-cert C --tls-key K [--client-ca CA]]
                      [--token T ...] [--kubelet auto|manual|podman]
                      [--watch-cache-size N] [--bookmark-interval SECONDS]
                      [--nodes N] [--run-delay-ms MS] [--server-version v1.32.0]
                      [--verbose]

Port 0 binds an ephemeral port.  Once serving, "http(s)://HOST:PORT\\n" is
written atomically (tmp + rename) to --ready-file.  SIGTERM / SIGINT stop the
server and exit 0.  As a module: ``FakeApiServer(...).start()`` / ``.url`` /
``.stop()`` (also a context manager).

Layout
------
This file is the entry point (run as a script, imported as ``fake_apiserver``
for FakeApiServer and ApiError); the code is the ``fakeapi`` package beside it,
a module per concern (fakeapi/__init__.py lists them).

Kubernetes API served (JSON only)
---------------------------------
Discovery (/version, /api, /api/v1, /apis, /apis/G, /apis/G/V; /openapi/v2 is a
minimal empty document - protobuf or JSON by Accept - so client-side
validation finds no schema and skips; /openapi/v3 is 404).  Built-in types:
core/v1 pods (+status, log, binding, eviction), services, configmaps, secrets,
events, namespaces, nodes, serviceaccounts, endpoints, persistentvolumeclaims;
coordination.k8s.io/v1 leases; events.k8s.io/v1 events; apps/v1 deployments,
statefulsets, replicasets, daemonsets; batch/v1 jobs; policy/v1
poddisruptionbudgets; scheduling.k8s.io/v1 priorityclasses;
rbac.authorization.k8s.io/v1 roles, rolebindings, clusterroles,
clusterrolebindings; scheduling.volcano.sh/v1beta1 podgroups, queues;
scheduling.x-k8s.io/v1alpha1 podgroups; apiextensions.k8s.io/v1
customresourcedefinitions (creating one serves its group dynamically).
Only pods are "run" (by the kubelet stand-in); everything else is stored.

Semantics: one global resourceVersion counter; uid, creationTimestamp,
generateName, generation (bumped when anything outside metadata/status
changes); 409 AlreadyExists / Conflict; 404; 422 Invalid with causes; status
subresource isolation; list with label/field selectors and limit/continue
(consistent snapshot; 410 Expired when it is gone); merge, strategic-merge
(built-in types only; 415 for custom resources, as the real server) and
JSON patch; delete with preconditions, finalizers, graceful pod deletion and
propagationPolicy Foreground/Background/Orphan garbage collection; chunked
watch with bookmarks, timeoutSeconds, replay from a bounded per-resource
history and ERROR 410 Expired for a too old resourceVersion.

Test control API (not authenticated, never faulted, not logged)
---------------------------------------------------------------
All bodies are JSON; answers are JSON.

POST /fake/v1/namespaces/{ns}/pods/{name}      pod outcome, body one of:
    {"action":"run", "node":N?}          bind (pool node or N) + IP + Running
    {"action":"succeed"}                 Succeeded, containers exit 0
    {"action":"fail","exitCode":N,"container":C?,"reason":R?}
                                         Failed, terminated exitCode N (Error)
    {"action":"evict","message":M?}      Failed, reason Evicted
        (succeed, fail and evict decide the pod's outcome whatever its restartPolicy)
    {"action":"end","exitCode":N,"container":C?,"reason":R?,"log":L?}
                                         the running main containers (or C) exit
                                         with N; restarted in place per the pod's
                                         restartPolicy, else the phase follows
    {"action":"restart","container":C?,"exitCode":N?}
                                         restartCount+1, lastState, NEW podIP
    {"action":"ready","container":C?,"ready":bool}   (all containers if no C)
    {"action":"unschedulable","message":M?}  PodScheduled False Unschedulable
    -> 200 with the pod; 404 Status when the pod does not exist.
POST /fake/v1/namespaces/{ns}/pods/{name}/log  {"text":T,"container":C?,
    "replace":false} appends T to the container's log (first container if no C).
POST /fake/v1/faults  any of (each key optional; several rules may coexist):
    {"latencyMs":N}                       delay every API request by N ms
    {"failNext":K,"code":500|503|429|...,"retryAfter":S?,"match":"METHOD /path-prefix"?}
        the next K matching requests fail with a Status body (429 and 503
        carry Retry-After: S, 429 default 1).  METHOD may be "*" or "WATCH"
        (watch requests only); match may be just a path prefix.
    {"dropWatches":true}                  close every open watch abruptly
                                          (no terminating chunk)
    {"expireWatches":true}                send ERROR 410 Expired on every open
                                          watch, then end it
    {"compact":true}                      forget watch history and list
                                          snapshots: older RVs get 410
    {"truncateNext":K,"abort":bool?,"match":..?}  body cut in half (Content-
                                          Length of the cut body; with abort the
                                          full length is announced and the
                                          connection closed mid-body)
    {"garbageNext":K,"match":..?}         200 with a non-JSON body
    {"hugeNext":K,"bytes":N,"match":..?}  200 with a valid JSON body of N bytes
    {"wrongContentTypeNext":K,"match":..?} 200 text/html page
    {"tokens":[...]}                      accepted bearer tokens ([] = no auth)
    {"reset":true}                        clear all faults (not tokens)
GET  /fake/v1/faults                       current fault state
POST /fake/v1/tokens {"tokens":[...]}      same as the faults key
GET  /fake/v1/requests                     {"requests":[{"method","path","query",
                                          "code","time","durationMs","watch"}]}
DELETE /fake/v1/requests                   clear that log
POST /fake/v1/config  {"kubelet":"auto"|"manual","runDelayMs":N,
    "terminationDelayMs":N,"bookmarkIntervalMs":N,"probeReadyDefault":bool,
    "watchCacheSize":N,"podNetwork":"cluster"|"loopback"}    (GET returns it;
    loopback pod IPs are 127.x addresses, so a test can run a pod's processes)
    also {"validateGroups":["G",...]}: create/update/patch/status writes of
    custom resources of these API groups are pruned (unknown fields, nulls of
    non-nullable ones), defaulted and validated against the served version's
    openAPIV3Schema (422 Invalid with causes naming the field; CEL rules are
    not evaluated, see fakeapi/schemas.py), and {"kueue":true|false|
    {"crds":DIR}}: the Kueue stand-in (below)
POST /fake/v1/nodes/{name}  {"labels":{k:v|null},"taints":[...]}: merges the
    node's labels (null removes one), replaces its taints; unbound pods are
    tried again (so does a PATCH of the Node through the API)
GET  /fake/v1/kueue    {"enabled","settled"} once the Kueue stand-in has acted
    on every change so far (tests wait on it instead of polling)
POST /fake/v1/kueue    {"action":"evict","namespace","name","reason","message"?}
    Kueue's eviction of an admitted Workload: Evicted=True with that reason
    (e.g. PodsReadyTimeout); the quota stays reserved until the job
    controller releases it
GET  /fake/v1/state    {"resourceVersion":"N","watches":N,"objects":{key:count}}
    ("watches" counts registered watch streams: poll it instead of sleeping
    until a watch is established)
POST /fake/v1/seed     {"path":"/api/v1/namespaces/default/pods","count":N,
    "template":{...},"namePrefix":"p-","start":0} creates N objects
    in-process (fast fixture set-up for benchmarks);
    -> {"created":N,"resourceVersion":"RV"}

Kubelet stand-in
----------------
Nodes node-0..node-{N-1} (InternalIP 172.18.0.2...) exist as Node objects.  In
"auto" mode a new pod with the default scheduler is bound round-robin
(MODIFIED: spec.nodeName, PodScheduled), then started (MODIFIED: hostIP, a
never reused 10.x podIP or the node IP with hostNetwork, Running, ready
containers, conditions); init containers complete first (restartPolicy Always
ones stay running as sidecars).  A pod with spec.nodeName preset to a pool node
is started without binding; one bound to an unknown node, or with another
schedulerName (gang schedulers), stays Pending until a test "run"s it or
POSTs pods/NAME/binding.  Containers with readiness/startup probes are ready
unless probeReadyDefault is false; "ready" actions override.  Deleting a
bound pod is graceful (MODIFIED with deletionTimestamp, then the stand-in
removes it after terminationDelayMs); gracePeriodSeconds=0 deletes at once.
Scheduling honours spec.nodeSelector against the Node objects' labels and
their NoSchedule/NoExecute taints against the pod's tolerations: a pod no node
fits stays Pending with PodScheduled False Unschedulable and the scheduler's
message ("0/4 nodes are available: 4 node(s) didn't match Pod's node
affinity/selector. ...").  A pod created with spec.schedulingGates gets
PodScheduled False SchedulingGated and is not bound until its last gate is
removed.
A main container that ends ("end" action, or the trainers' liveness kill below)
is restarted in place when the pod's restartPolicy says so (Always; OnFailure
after a non-zero exit), at once (no crash-loop back-off): restartCount + 1,
lastState.terminated, running again, the same pod and address, its log the
previous one.  Otherwise it stays terminated, and once every main container
has, the pod is Succeeded (all exited 0) or Failed and its sidecars stop.
In-place trainers (fakeapi/trainers.py): for a pod whose main container has
env FLEET_GATE_URL, the stand-in plays fleet-sidecar --in-place and writes the
condition fleet.paddlepaddle.org/Trainer (reason Running|AtGate|Exited, message
"run N: ...", True only for Running; api/include/fleet/api/in_place.h).  A
container start waits AtGate(floor): the pod's run label, at least the last bound
run + 1.  It passes (Running N) when the ConfigMap <job-name label>-endpoints
has annotation fleet.paddlepaddle.org/run N >= floor and no
fleet.paddlepaddle.org/barrier N.  When that run annotation passes a running
trainer's run, its liveness probe fails: killed (137, Error) and restarted per
restartPolicy.  A trainer that ends and stays down reports Exited.

Kueue stand-in
--------------
POST /fake/v1/config {"kueue":true} (CRDs from $FLEET_KUEUE_CRDS) or
{"kueue":{"crds":DIR}} installs Kueue's six CRDs (kueue.x-k8s.io v1beta1 and
v1beta2), validates that group as validateGroups does plus the Workload rules
of Kueue's CEL and webhook, and runs fakeapi/kueue.py's admission loop: the
ClusterQueue's flavors in order (nodeLabels vs nodeSelector, nodeTaints,
nominalQuota; no cohorts), partial admission down to minCount, withinClusterQueue
LowerPriority preemption (Evicted/Preempted with Kueue's messages, a Preempted
event; the preemptor waits with WaitingForPreemptedWorkloads until the job
controller writes the victim's QuotaReserved=False: the stand-in never frees
quota itself), spec.active=false (Evicted Deactivated), and topology-aware
scheduling for flavors with a topologyName: a topologyAssignment over the Node
objects' level labels and allocatable, and pods with the kueue.x-k8s.io/topology
gate ungated onto their rank's node (fakeapi/kueue_tas.py).  Finished or
inactive Workloads hold no quota.  docs/design/kueue.md section 7 is its specification.

Real containers (--kubelet podman)
----------------------------------
podman_kubelet.py replaces the stand-in: bound pods run as podman pods on a
podman network of their own, with real addresses, container statuses, probes,
env, volumes, securityContext and logs (see that module).  The server then
also listens on the network's gateway (TLS with a certificate made for it and
127.0.0.1 unless one is given), pods get KUBERNETES_SERVICE_HOST/PORT for it,
every namespace gets the kube-root-ca.crt ConfigMap, and the pods' service-
account tokens are accepted.  Needs root, podman, runc and catatonit; the
simulated pod actions of the control API are refused.

Not implemented (on purpose)
----------------------------
Server-side apply (apply-patch+yaml -> 415), protobuf and YAML bodies,
aggregated discovery (clients fall back to the legacy documents),
/openapi/v3, schema validation/pruning/defaulting of custom resources and
fieldValidation=Strict (unknown fields are stored as sent), CRD conversion
(all served versions share one storage; apiVersion is rewritten), admission,
RBAC/authorization (any authenticated caller may do anything), managedFields,
selfLink, scale/exec/attach/port-forward/proxy subresources, workload
controllers (Deployments, Jobs, ... are only stored; no Endpoints), restart
policies and probes (the stand-in does what the test says), scheduling
constraints (resources, nodeSelector, node affinity, taints; required pod
anti-affinity on kubernetes.io/hostname with matchLabels is honoured).  core/v1 and
events.k8s.io/v1 Events are separate stores.  Namespace and CRD deletion
remove their contents at once, ignoring the contents' finalizers.  A list with
resourceVersionMatch=Exact for a still retained RV returns the current state,
and a resourceVersion newer than the server's is not waited for.  The watch
history is per resource type (--watch-cache-size events each).  Garbage
collection matches owners by uid only.  Strategic merge patch knows the merge
keys of a built-in table (containers, env, volumes, ports, conditions, ...).
"""

import sys

from fakeapi.cli import main
from fakeapi.errors import ApiError
from fakeapi.server import FakeApiServer

__all__ = ["ApiError", "FakeApiServer", "main"]

if __name__ == "__main__":
    sys.exit(main())
