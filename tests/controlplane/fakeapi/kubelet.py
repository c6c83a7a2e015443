"""The kubelet stand-in: nodes, scheduling (binding, pod anti-affinity), the pod lifecycle
(init containers, Running, readiness, restarts in place per restartPolicy, graceful termination),
the in-place pods' trainers (trainers.py) and the test's pod actions."""

import collections
import hashlib
import heapq
import itertools
import sys
import threading
import time

from .errors import ApiError
from .trainers import Trainers, trainer_container
from .util import rfc3339


def tolerates(tolerations, taint):
    """Whether one of the tolerations matches the taint (key, value, effect), as the scheduler
    and Kueue's flavor assigner decide."""
    for t in tolerations or []:
        if not isinstance(t, dict) or (t.get("effect") and t["effect"] != taint.get("effect")):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


class Kubelet:
    def __init__(self, server, nodes):
        self.server = server
        self.store = server.store
        self.mode = server.kubelet_mode
        self.run_delay_ms = server.run_delay_ms
        self.termination_delay_ms = 0
        self.probe_ready_default = True
        self.pod_network = "cluster"   # "loopback": pod IPs in 127.0.0.0/8, so tests can run the pods
        self.node_ips = collections.OrderedDict(("node-%d" % i, "172.18.0.%d" % (i + 2)) for i in range(nodes))
        self.rr = itertools.count()
        self.ip_counter = itertools.count(1)
        self.ready = {}        # (pod uid, container) -> bool (set by tests)
        self.gateway = None    # where pods reach the API server (the podman kubelet's network)
        self.trainers = Trainers(self)
        self.tasks = []
        self.seq = itertools.count()
        self.cond = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify()

    def _loop(self):
        while True:
            with self.cond:
                while not self.stopped and (not self.tasks or self.tasks[0][0] > time.monotonic()):
                    self.cond.wait(None if not self.tasks else max(0.0, self.tasks[0][0] - time.monotonic()))
                if self.stopped:
                    return
                _t, _s, fn = heapq.heappop(self.tasks)
            try:
                with self.store.lock:
                    fn()
            except Exception as e:  # keep the kubelet alive whatever a test does
                sys.stderr.write("fake kubelet: %r\n" % (e,))

    def later(self, delay_ms, fn):
        with self.cond:
            heapq.heappush(self.tasks, (time.monotonic() + delay_ms / 1000.0, next(self.seq), fn))
            self.cond.notify()

    # ---- helpers --------------------------------------------------------
    @property
    def pods(self):
        return self.store.registry.get("", "v1", "pods")

    def _current(self, ns, name, uid):
        pod = self.store._find(self.pods, ns, name)
        if pod is None or pod["metadata"]["uid"] != uid:
            return None
        return pod

    def _update(self, pod, mutate):
        return self.store.internal_update(self.pods, pod, mutate)

    def new_pod_ip(self):
        n = next(self.ip_counter)
        if self.pod_network == "loopback":   # every 127/8 address is this host's: processes can bind them
            return "127.%d.%d.%d" % (1 + n // 65000, (n % 65000) // 250, n % 250 + 2)
        return "10.%d.%d.%d" % (244 + n // 65000, (n % 65000) // 250, n % 250 + 2)

    @staticmethod
    def _set_cond(pod, ctype, status, reason=None, message=None):
        conds = pod.setdefault("status", {}).setdefault("conditions", [])
        for c in conds:
            if c["type"] == ctype:
                if c["status"] != status:
                    c["lastTransitionTime"] = rfc3339()
                c["status"] = status
                for k, v in (("reason", reason), ("message", message)):
                    if v is None:
                        c.pop(k, None)
                    else:
                        c[k] = v
                return
        c = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": rfc3339()}
        if reason:
            c["reason"] = reason
        if message:
            c["message"] = message
        conds.append(c)
        order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled",
                 "DisruptionTarget"]
        conds.sort(key=lambda x: order.index(x["type"]) if x["type"] in order else 99)

    @staticmethod
    def _container_id(uid, name, restarts):
        return "containerd://" + hashlib.sha256(("%s/%s/%d" % (uid, name, restarts)).encode()).hexdigest()

    def _cstatus(self, pod, c, state, ready=False, restarts=0, last=None, started=None):
        image = c.get("image", "")
        st = {"name": c["name"], "image": image,
              "imageID": image.split("@")[0] + "@sha256:" + hashlib.sha256(image.encode()).hexdigest(),
              "ready": ready, "restartCount": restarts, "state": state, "lastState": last or {}}
        if "running" in state or "terminated" in state:
            st["containerID"] = self._container_id(pod["metadata"]["uid"], c["name"], restarts)
        st["started"] = bool(started if started is not None else "running" in state)
        return st

    def _want_ready(self, pod, c):
        v = self.ready.get((pod["metadata"]["uid"], c["name"]))
        if v is not None:
            return v
        if c.get("readinessProbe") or c.get("startupProbe"):
            return self.probe_ready_default
        return True

    def _recompute_ready(self, pod):
        st = pod["status"]
        cs = st.get("containerStatuses") or []
        sidecars = [s for s in st.get("initContainerStatuses") or []
                    if self._is_sidecar(pod, s["name"])]
        all_ready = bool(cs) and all(s["ready"] for s in cs + sidecars) and st.get("phase") == "Running"
        not_ready = [s["name"] for s in cs + sidecars if not s["ready"]]
        msg = "containers with unready status: [%s]" % " ".join(not_ready) if not_ready else None
        self._set_cond(pod, "ContainersReady", "True" if all_ready else "False",
                       None if all_ready else "ContainersNotReady", None if all_ready else msg)
        gates_ok = True
        for g in pod.get("spec", {}).get("readinessGates") or []:
            ok = any(c["type"] == g.get("conditionType") and c["status"] == "True" for c in st.get("conditions", []))
            gates_ok = gates_ok and ok
        ready = all_ready and gates_ok
        if st.get("phase") in ("Succeeded", "Failed"):
            self._set_cond(pod, "Ready", "False", "PodCompleted")
        else:
            self._set_cond(pod, "Ready", "True" if ready else "False",
                           None if ready else ("ContainersNotReady" if not all_ready else "ReadinessGatesNotReady"),
                           None if ready else (msg or "the status of pod readiness gates are not \"True\""))

    @staticmethod
    def _is_sidecar(pod, name):
        return any(c.get("name") == name and c.get("restartPolicy") == "Always"
                   for c in pod.get("spec", {}).get("initContainers") or [])

    # ---- lifecycle steps --------------------------------------------------
    def _bind(self, pod, node):
        pod["spec"]["nodeName"] = node
        self._set_cond(pod, "PodScheduled", "True")

    def _start(self, pod):
        spec, st = pod["spec"], pod.setdefault("status", {})
        node = spec["nodeName"]
        st["hostIP"] = self.node_ips[node]
        st["hostIPs"] = [{"ip": st["hostIP"]}]
        if not st.get("podIP"):
            st["podIP"] = st["hostIP"] if spec.get("hostNetwork") else self.new_pod_ip()
            st["podIPs"] = [{"ip": st["podIP"]}]
        st.setdefault("startTime", rfc3339())
        self._set_cond(pod, "PodReadyToStartContainers", "True")

    def _pending_init(self, pod):
        st, inits = pod["status"], pod["spec"].get("initContainers") or []
        st["phase"] = "Pending"
        st["initContainerStatuses"] = [
            self._cstatus(pod, c, {"running": {"startedAt": rfc3339()}} if i == 0 else
                          {"waiting": {"reason": "PodInitializing"}}) for i, c in enumerate(inits)]
        st["containerStatuses"] = [self._cstatus(pod, c, {"waiting": {"reason": "PodInitializing"}})
                                   for c in pod["spec"]["containers"]]
        self._set_cond(pod, "Initialized", "False", "ContainersNotInitialized",
                       "containers with incomplete status: [%s]" % " ".join(
                           c["name"] for c in inits if c.get("restartPolicy") != "Always"))
        self._recompute_ready(pod)

    def _creating(self, pod):
        st = pod["status"]
        st["phase"] = "Pending"
        st["containerStatuses"] = [self._cstatus(pod, c, {"waiting": {"reason": "ContainerCreating"}})
                                   for c in pod["spec"]["containers"]]
        self._set_cond(pod, "Initialized", "True")
        self._recompute_ready(pod)

    def _running(self, pod):
        st, now = pod["status"], rfc3339()
        old_init = {s["name"]: s for s in st.get("initContainerStatuses") or []}
        inits = pod["spec"].get("initContainers") or []
        if inits:
            out = []
            for c in inits:
                prev = old_init.get(c["name"], {})
                if c.get("restartPolicy") == "Always":
                    out.append(self._cstatus(pod, c, {"running": {"startedAt": now}}, self._want_ready(pod, c),
                                             prev.get("restartCount", 0)))
                else:
                    out.append(self._cstatus(pod, c, {"terminated": {
                        "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now,
                        "containerID": self._container_id(pod["metadata"]["uid"], c["name"], 0)}},
                        False, prev.get("restartCount", 0), started=False))
            st["initContainerStatuses"] = out
        st["phase"] = "Running"
        st["containerStatuses"] = [self._cstatus(pod, c, {"running": {"startedAt": now}}, self._want_ready(pod, c))
                                   for c in pod["spec"]["containers"]]
        self._set_cond(pod, "PodReadyToStartContainers", "True")
        self._set_cond(pod, "Initialized", "True")
        self._set_cond(pod, "PodScheduled", "True")
        self._recompute_ready(pod)
        if trainer_container(pod):
            self.trainers.started(pod)

    def _container_exited(self, p, name, terminated, now):
        """Main container `name` of pod p (a copy being mutated) ended with `terminated` (its
        state.terminated). As the kubelet does, it is restarted in place when the pod's
        restartPolicy says so (Always; OnFailure after a non-zero exit) and the pod is not being
        deleted (at once: no crash-loop back-off here), else it stays terminated; then the pod's
        phase follows its containers."""
        st = p["status"]
        s = next(s for s in st["containerStatuses"] if s["name"] == name)
        c = next(c for c in p["spec"]["containers"] if c["name"] == name)
        policy = p["spec"].get("restartPolicy", "Always")
        if not p["metadata"].get("deletionTimestamp") and (
                policy == "Always" or (policy == "OnFailure" and terminated["exitCode"] != 0)):
            self._restart_in_place(p, c, s, terminated, now)
        else:
            s.update(self._cstatus(p, c, {"terminated": terminated}, False, s.get("restartCount", 0),
                                   s.get("lastState"), started=False))
            if name == trainer_container(p):
                self.trainers.ended(p)
        self._settle_phase(p, now)

    def _restart_in_place(self, p, c, s, terminated, now):
        """Container c's next start in the same pod: restartCount + 1, the end of the last one as
        lastState, its log as the previous one's."""
        n = s.get("restartCount", 0) + 1
        s.clear()
        s.update(self._cstatus(p, c, {"running": {"startedAt": now}}, self._want_ready(p, c), n,
                               {"terminated": terminated}))
        key = (p["metadata"]["namespace"], p["metadata"]["name"], c["name"])
        self.store.prev_logs[key] = self.store.logs.pop(key, [])
        if c["name"] == trainer_container(p):
            self.trainers.started(p)

    def _settle_phase(self, p, now):
        """The pod's phase by the kubelet's rules: Running while a main container runs; once all
        have ended (none to restart), Succeeded when every one exited 0, else Failed, and its
        sidecars are stopped."""
        st = p["status"]
        cs = st.get("containerStatuses") or []
        if any("terminated" not in s["state"] for s in cs):
            st["phase"] = "Running"
        else:
            st["phase"] = "Succeeded" if all(s["state"]["terminated"]["exitCode"] == 0 for s in cs) else "Failed"
            inits = {c["name"]: c for c in p["spec"].get("initContainers") or []}
            for s in st.get("initContainerStatuses") or []:
                running = s["state"].get("running")
                if running and self._is_sidecar(p, s["name"]):
                    s.update(self._cstatus(p, inits[s["name"]], {"terminated": {
                        "exitCode": 0, "reason": "Completed", "startedAt": running["startedAt"], "finishedAt": now,
                        "containerID": s.get("containerID", "")}}, False, s.get("restartCount", 0),
                        s.get("lastState"), started=False))
        self._recompute_ready(p)

    def liveness_kill(self, pod, name):
        """Container `name`'s liveness probe failed: the kubelet kills it (SIGKILL after the
        probe's grace period: 137) and restarts it per the pod's restartPolicy."""
        now = rfc3339()

        def kill(p):
            s = next((s for s in p["status"].get("containerStatuses") or [] if s["name"] == name), None)
            if s is None or "running" not in s["state"]:
                return
            self._container_exited(p, name, {
                "exitCode": 137, "reason": "Error", "startedAt": s["state"]["running"]["startedAt"],
                "finishedAt": now, "containerID": s.get("containerID", "")}, now)
        return self._update(pod, kill)

    # ---- automatic flow -------------------------------------------------
    def pod_created(self, pod):
        """Called under the store lock after a pod was created, or ungated."""
        if self.mode != "auto":
            return
        spec = pod.get("spec", {})
        if spec.get("nodeName"):
            if spec["nodeName"] in self.node_ips:
                self._schedule_start(pod)
            return
        if spec.get("schedulerName", "default-scheduler") != "default-scheduler" or spec.get("schedulingGates"):
            return   # a gang scheduler that does not exist here, or gated: stays Pending
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]

        def bind():
            cur = self._current(ns, name, uid)
            if cur is None or cur["spec"].get("nodeName") or cur["metadata"].get("deletionTimestamp") or \
                    cur["spec"].get("schedulingGates"):
                return
            node, why = self._node_for(cur)
            if node is None:
                if why:   # Pending, as with the real scheduler, saying why
                    self._update(cur, lambda p: self._set_cond(p, "PodScheduled", "False", "Unschedulable", why))
                return
            cur = self._update(cur, lambda p: self._bind(p, node))
            self._schedule_start(cur)
        self.later(0, bind)

    def pod_updated(self, old, pod):
        """Called under the store lock after a client updated a pod: one whose last scheduling
        gate went is scheduled now."""
        if old["spec"].get("schedulingGates") and not pod["spec"].get("schedulingGates"):
            self.pod_created(pod)

    def configmap_changed(self, cm):
        """Called under the store lock after a ConfigMap was created or updated."""
        self.trainers.configmap_changed(cm)

    def nodes_changed(self):
        """Node labels or taints changed: the unbound pods are tried again."""
        for pod in list(self.store.objects[self.pods.storage_key].values()):
            if not pod["spec"].get("nodeName") and pod.get("status", {}).get("phase") == "Pending" and \
                    not pod["metadata"].get("deletionTimestamp"):
                self.pod_created(pod)

    def set_node(self, name, body):
        """The control API's node change: body["labels"] merged into the node's labels (a null
        value removes one), body["taints"] replacing its taints."""
        unknown = set(body) - {"labels", "taints"}
        if unknown:
            raise ApiError.bad_request("unknown keys %s (known: labels, taints)" % sorted(unknown))
        labels, taints = body.get("labels") or {}, body.get("taints")
        if not isinstance(labels, dict) or not (taints is None or isinstance(taints, list)):
            raise ApiError.bad_request("labels must be an object and taints a list")
        nodes = self.store.registry.get("", "v1", "nodes")
        with self.store.lock:
            node = self.store._find(nodes, None, name)
            if node is None:
                raise ApiError.not_found(nodes, name)

            def change(n):
                ls = n["metadata"].setdefault("labels", {})
                for k, v in labels.items():
                    if v is None:
                        ls.pop(k, None)
                    else:
                        ls[k] = str(v)
                if taints is not None:
                    n.setdefault("spec", {})["taints"] = taints
            node = self.store.internal_update(nodes, node, change)
            self.nodes_changed()
            return node

    def _fitting_nodes(self, pod):
        """The nodes whose labels match the pod's nodeSelector and whose NoSchedule/NoExecute
        taints it tolerates -> (nodes, the scheduler's message when there are none)."""
        selector = pod["spec"].get("nodeSelector") or {}
        tolerations = pod["spec"].get("tolerations") or []
        nodes_rt = self.store.registry.get("", "v1", "nodes")
        fitting, failed = [], collections.Counter()
        for node in self.node_ips:
            obj = self.store._find(nodes_rt, None, node) or {"metadata": {}}
            labels = obj["metadata"].get("labels") or {}
            taint = next((t for t in (obj.get("spec") or {}).get("taints") or []
                          if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t)), None)
            if any(labels.get(k) != v for k, v in selector.items()):
                failed["node(s) didn't match Pod's node affinity/selector"] += 1
            elif taint is not None:
                failed["node(s) had untolerated taint {%s: %s}" % (taint.get("key"), taint.get("value", ""))] += 1
            else:
                fitting.append(node)
        n = len(self.node_ips)
        why = "0/%d nodes are available: %s. preemption: 0/%d nodes are available: %d Preemption is not helpful " \
              "for scheduling." % (n, ", ".join(sorted("%d %s" % (c, r) for r, c in failed.items())), n, n)
        return fitting, None if fitting else why

    def _node_for(self, pod):
        """The next node round robin that fits the pod (_fitting_nodes) and satisfies its
        required pod anti-affinity on kubernetes.io/hostname (matchLabels terms, the pod's
        namespace), as the default scheduler would place it -> (node, None); (None, why) when
        no node fits the selector or taints, (None, None) when anti-affinity leaves none."""
        affinity = (pod["spec"].get("affinity") or {}).get("podAntiAffinity") or {}
        terms = [t for t in affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
                 if t.get("topologyKey") == "kubernetes.io/hostname"]
        ns = pod["metadata"]["namespace"]
        nodes, why = self._fitting_nodes(pod)
        if not nodes:
            return None, why
        start = next(self.rr)

        def taken(node, term):
            want = (term.get("labelSelector") or {}).get("matchLabels") or {}
            for (pns, _), other in self.store.objects[self.pods.storage_key].items():
                labels = other["metadata"].get("labels") or {}
                if (pns == ns and other["spec"].get("nodeName") == node and
                        other.get("status", {}).get("phase") not in ("Succeeded", "Failed") and
                        all(labels.get(k) == v for k, v in want.items())):
                    return True
            return False
        for i in range(len(nodes)):
            node = nodes[(start + i) % len(nodes)]
            if not any(taken(node, t) for t in terms):
                return node, None
        return None, None

    def _schedule_start(self, pod):
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        has_init = bool(pod["spec"].get("initContainers"))

        def start():
            cur = self._current(ns, name, uid)
            if cur is None or cur["metadata"].get("deletionTimestamp") or cur["status"].get("phase") != "Pending":
                return
            if cur["status"].get("containerStatuses"):
                return
            if has_init:
                cur = self._update(cur, lambda p: (self._start(p), self._pending_init(p)))
            elif self.run_delay_ms > 0:
                cur = self._update(cur, lambda p: (self._start(p), self._creating(p)))
            else:
                cur = self._update(cur, lambda p: (self._start(p), self._running(p)))
                return
            self.later(self.run_delay_ms, run)

        def run():
            cur = self._current(ns, name, uid)
            if cur is None or cur["metadata"].get("deletionTimestamp") or cur["status"].get("phase") != "Pending":
                return
            self._update(cur, self._running)
        self.later(0, start)

    def terminate(self, pod):
        """Graceful deletion: stop the containers and remove the pod."""
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]

        def finish():
            cur = self._current(ns, name, uid)
            if cur is None:
                return
            self.store.pending_termination.discard(uid)
            self.store._check_foreground(uid)
            cur = self._current(ns, name, uid)
            if cur is not None and not cur["metadata"].get("finalizers"):
                self.store._delete_now(self.pods, cur)
        self.later(self.termination_delay_ms, finish)

    # ---- test commands ----------------------------------------------------
    def action(self, ns, name, body):
        """A test's command to one pod (POST /fake/v1/namespaces/NS/pods/NAME): body["action"] names
        it (see _ACTIONS); body["container"], when given, limits it to that container."""
        act = body.get("action")
        with self.store.lock:
            pod = self.store._find(self.pods, ns, name)
            if pod is None:
                raise ApiError.not_found(self.pods, name)
            cname = body.get("container")
            if cname is not None and cname not in self._container_names(pod):
                raise ApiError.bad_request("container %s is not valid for pod %s" % (cname, name))
            do = self._ACTIONS.get(act) if isinstance(act, str) else None
            if do is None:
                raise ApiError.bad_request("unknown action %r" % (act,))
            return do(self, pod, body, cname, rfc3339())

    @staticmethod
    def _container_names(pod):
        return [c["name"] for c in (pod["spec"].get("containers") or []) + (pod["spec"].get("initContainers") or [])]

    def _act_run(self, pod, body, cname, now):
        """Binds the pod (to body["node"] or the next node in turn) and runs it at once."""
        if not pod["spec"].get("nodeName"):
            node = body.get("node") or list(self.node_ips)[next(self.rr) % len(self.node_ips)]
            if node not in self.node_ips:
                raise ApiError.bad_request("unknown node %s" % node)
            pod = self._update(pod, lambda p: self._bind(p, node))
        elif pod["spec"]["nodeName"] not in self.node_ips:
            raise ApiError.bad_request("pod is bound to unknown node %s" % pod["spec"]["nodeName"])
        return self._update(pod, lambda p: (self._start(p), self._running(p)))

    def _act_outcome(self, pod, body, cname, now):
        """succeed, fail, evict: the containers (or the named one; the others exit 0) terminate and
        the pod's phase is final whatever its restartPolicy (the test decides the pod's outcome;
        "end" is a container's exit, which the kubelet may restart); an eviction also says why, as
        the kubelet does."""
        act = body["action"]
        code = 0 if act == "succeed" else int(body.get("exitCode", 137 if act == "evict" else 1))

        def end(p):
            st = p.setdefault("status", {})
            st["phase"] = "Succeeded" if act == "succeed" else "Failed"
            old = {s["name"]: s for s in (st.get("containerStatuses") or [])
                   + (st.get("initContainerStatuses") or [])}
            st["containerStatuses"] = [self._ended_status(p, c, old.get(c["name"], {}), code, cname, body, now)
                                       for c in p["spec"].get("containers") or []]
            inits = p["spec"].get("initContainers") or []
            if inits:   # an init container that already finished keeps its status
                st["initContainerStatuses"] = [
                    old[c["name"]] if "terminated" in old.get(c["name"], {}).get("state", {})
                    else self._ended_status(p, c, old.get(c["name"], {}), code, cname, body, now)
                    for c in inits]
            if trainer_container(p):
                self.trainers.ended(p)
            if act == "evict":
                st["reason"] = "Evicted"
                st["message"] = body.get("message", "The node was low on resource: memory. ")
                self._set_cond(p, "DisruptionTarget", "True", "TerminationByKubelet", st["message"])
            self._recompute_ready(p)
        return self._update(pod, end)

    # FallbackToLogsOnError as the kubelet reads the log: its last 80 lines, of those the last 2 KiB.
    LOG_TAIL_LINES, LOG_TAIL_BYTES = 80, 2048

    @classmethod
    def termination_message(cls, container, code, log_lines, written=""):
        """A terminated container's state.terminated.message: what it wrote to its
        terminationMessagePath (`written`); without that, under terminationMessagePolicy
        FallbackToLogsOnError and a non-zero exit code, its log's tail (log_lines: texts ending in
        a newline); else none ("")."""
        if written or code == 0 or container.get("terminationMessagePolicy") != "FallbackToLogsOnError":
            return written
        tail = "".join(log_lines[-cls.LOG_TAIL_LINES:]).encode()
        return tail[-cls.LOG_TAIL_BYTES:].decode("utf-8", "replace")

    def _ended_status(self, p, c, prev, code, cname, body, now):
        """Container c's status once terminated: exit code `code` if the action names it (or no
        container), else 0. A main container the action names first writes body["log"] (text) to its
        log; its message is body["terminationMessage"] (what it wrote to its terminationMessagePath)
        or, per its terminationMessagePolicy, its log's tail, as the kubelet's."""
        restarts = prev.get("restartCount", 0)
        running = prev.get("state", {}).get("running")
        named = cname is None or cname == c["name"]
        my = code if named else 0
        t = {"exitCode": my, "reason": "Completed" if my == 0 else body.get("reason", "Error"),
             "startedAt": (running or {}).get("startedAt", now), "finishedAt": now,
             "containerID": self._container_id(p["metadata"]["uid"], c["name"], restarts)}
        key = (p["metadata"]["namespace"], p["metadata"]["name"], c["name"])
        if named and body.get("log") and c in (p["spec"].get("containers") or []):
            self.store.logs.setdefault(key, []).extend(
                (time.time(), line + "\n") for line in str(body["log"]).splitlines())
        lines = [text for _t, text in self.store.logs.get(key, [])]
        message = self.termination_message(c, my, lines, body.get("terminationMessage", "") if named else "")
        if message:
            t["message"] = message
        return self._cstatus(p, c, {"terminated": t}, False, restarts, prev.get("lastState"), started=False)

    def _act_end(self, pod, body, cname, now):
        """end: the running main containers (or the named one) end with body["exitCode"] as their
        process would (body["reason"], "log" and "terminationMessage" as for fail), and the kubelet
        restarts them in place or not per the pod's restartPolicy (_container_exited)."""
        code = body.get("exitCode")
        if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 255:
            raise ApiError.bad_request("end: exitCode must be an integer from 0 to 255")
        mains = [c for c in pod["spec"].get("containers") or [] if cname is None or c["name"] == cname]
        if not mains:
            raise ApiError.bad_request("end: %s is not a main container of pod %s" % (cname, pod["metadata"]["name"]))
        running = {s["name"] for s in pod.get("status", {}).get("containerStatuses") or [] if "running" in s["state"]}
        ending = [c for c in mains if c["name"] in running]
        if not ending:
            raise ApiError.bad_request("end: no main container of pod %s to end is running" % pod["metadata"]["name"])

        def end(p):
            old = {s["name"]: s for s in p["status"]["containerStatuses"]}
            for c in ending:
                ended = self._ended_status(p, c, old[c["name"]], code, c["name"], body, now)
                self._container_exited(p, c["name"], ended["state"]["terminated"], now)
        return self._update(pod, end)

    def _act_restart(self, pod, body, cname, now):
        """The containers (or the named one) exit with body["exitCode"] and run again; the pod gets
        a new IP and its logs become the previous run's."""
        containers = pod["spec"].get("containers") or []
        code = int(body.get("exitCode", 1))

        def restart(p):
            st = p.setdefault("status", {})
            for s in st.get("containerStatuses") or []:
                if cname is not None and s["name"] != cname:
                    continue
                c = next(c for c in containers if c["name"] == s["name"])
                started = (s.get("state", {}).get("running") or {}).get("startedAt", now)
                self._restart_in_place(p, c, s, {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                                 "startedAt": started, "finishedAt": now,
                                                 "containerID": s.get("containerID", "")}, now)
            if st.get("podIP") and not p["spec"].get("hostNetwork"):
                st["podIP"] = self.new_pod_ip()
                st["podIPs"] = [{"ip": st["podIP"]}]
            st["phase"] = "Running"
            st.pop("reason", None)
            st.pop("message", None)
            self._recompute_ready(p)
        return self._update(pod, restart)

    def _act_ready(self, pod, body, cname, now):
        """Sets the readiness probe's answer (body["ready"]) for the containers, or the named one."""
        ready = bool(body.get("ready", True))
        uid = pod["metadata"]["uid"]
        for c in self._container_names(pod):
            if cname is None or c == cname:
                self.ready[(uid, c)] = ready

        def set_ready(p):
            st = p.setdefault("status", {})
            for s in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or []):
                if (cname is None or s["name"] == cname) and "running" in s.get("state", {}):
                    s["ready"] = ready
            if st.get("phase") == "Running":
                self._recompute_ready(p)
        return self._update(pod, set_ready)

    def _act_unschedulable(self, pod, body, cname, now):
        msg = body.get("message", "0/%d nodes are available: insufficient resources." % len(self.node_ips))
        return self._update(pod, lambda p: self._set_cond(p, "PodScheduled", "False", "Unschedulable", msg))

    _ACTIONS = {"run": _act_run, "succeed": _act_outcome, "fail": _act_outcome, "evict": _act_outcome,
                "end": _act_end, "restart": _act_restart, "ready": _act_ready, "unschedulable": _act_unschedulable}

    def pod_deleted(self, uid):
        """Called under the store lock when a pod left storage (the podman kubelet kills it)."""
        self.trainers.forget(uid)

    def bind(self, pod, node):
        if pod["spec"].get("nodeName"):
            raise ApiError.conflict(self.pods, pod["metadata"]["name"], "pod %s is already assigned to node "
                                    '"%s"' % (pod["metadata"]["name"], pod["spec"]["nodeName"]))
        pod = self._update(pod, lambda p: self._bind(p, node))
        if node in self.node_ips and self.mode == "auto":
            self._schedule_start(pod)
        return pod
