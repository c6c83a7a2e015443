"""A kubelet that runs the fake API server's pods as real podman containers.

``fake_apiserver.py --kubelet podman`` (or ``FakeApiServer(kubelet="podman")``) hands every pod
bound to a node to this kubelet instead of simulating it.  It does what the real kubelet does, as
far as podman 4.3 lets a test do it on one machine:

- a pod is a podman pod on a network of its own (``podman network create``): the pod gets its own
  network namespace and address, which becomes ``status.podIP``; ``hostNetwork`` pods share the
  host's network and get the node's address (the network's gateway);
- ``shareProcessNamespace`` shares the pod's PID namespace (``--share ...,pid``);
- init containers run one after the other; native sidecars (init containers with ``restartPolicy:
  Always``) start first and keep running, and what follows them starts only once their startup
  probe passed; then every main container starts;
- probes (httpGet, tcpSocket, exec) run from the kubelet: startup gates ``started`` and the
  others, readiness sets ``ready``, liveness and startup failures kill the container (SIGTERM,
  SIGKILL after the probe's terminationGracePeriodSeconds, else the pod's), which then restarts
  per the pod's restartPolicy;
- env is resolved as the kubelet resolves it: service variables for the ``kubernetes`` service,
  ``envFrom``, values with ``$(VAR)`` expansion, ``fieldRef``, ``resourceFieldRef``,
  ``configMapKeyRef`` and ``secretKeyRef`` (a missing, non-optional reference keeps the container
  waiting with ``CreateContainerConfigError``); command and args are expanded too;
- volumes: ``emptyDir``, ``hostPath``, ``configMap``, ``secret``, ``downwardAPI`` and
  ``projected`` (service-account token, ConfigMap, Secret, downward API).  Projected and ConfigMap
  volumes are written as the kubelet's atomic writer writes them (``..data`` symlink swapped
  atomically) and are rewritten when their sources change.  Unless automounting is off, every
  container gets the service-account token, ``ca.crt`` and ``namespace`` under
  /var/run/secrets/kubernetes.io/serviceaccount, so in-cluster clients reach the API server;
- securityContext (runAsUser/runAsGroup, runAsNonRoot checked against the image's user as the
  kubelet checks it, readOnlyRootFilesystem, capabilities, allowPrivilegeEscalation, privileged)
  and resource limits (memory, CPU) go to podman;
- container statuses are real: running with podman's start time, terminated with exit code and
  reason (Completed, Error, OOMKilled), restart counts and ``lastState``; ``pods/log`` is served
  from the containers' log files (``previous=true`` from the run before a restart);
- ``restartPolicy`` (Always, OnFailure, Never) is honoured: a container that ended runs again in
  place (a new podman container in the same pod, so the same network namespace), the first time
  at once, then after the kubelet's crash-loop back-off (waiting, CrashLoopBackOff); once all
  main containers are done the sidecars are stopped and the pod is Succeeded or Failed;
- deletion runs the main containers' ``preStop`` hooks (httpGet, exec, sleep) and waits for
  them, then stops the main containers with SIGTERM, SIGKILL after what is left of the grace
  period (at least 2 s), then the sidecars, and removes the pod; a forced deletion kills at once.

Not done: image pulls (no registry is reachable: a missing image keeps the container waiting
with ErrImageNeverPull or ImagePullBackOff until it is loaded), cluster DNS (pods reach each other
by IP), Services, ephemeral containers, postStart hooks, gRPC probes, resize, user namespaces.

Every podman object it makes carries the label ``io.fleetjob.kubelet=<id>`` with its process id,
and ``stop()`` removes them; objects left by a kubelet process that died are removed when the next
one starts.
"""

import base64
import http.client
import json
import os
import queue
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

LABEL = "io.fleetjob.kubelet"
LABEL_PID = "io.fleetjob.kubelet.pid"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0   # the kubelet's crash-loop back-off (seconds)
BACKOFF_RESET = 600.0                       # a run this long starts the back-off over
VOLUME_SYNC_SECONDS = 1.0                   # how soon ConfigMap/Secret changes reach the files


class PodmanError(Exception):
    pass


class ConfigError(Exception):
    """The container cannot be created from this spec (the kubelet's CreateContainerConfigError)."""


def sub_path_source(volume_dir, sub_path, volume):
    """The directory a subPath of `volume_dir` names, created when missing. The API server refuses
    an absolute subPath or one with a '..' element; what $(VAR) expansion or a symlink in the
    volume makes of it must still stay inside the volume (the kubelet's CreateContainerConfigError)."""
    root = os.path.realpath(volume_dir)
    src = os.path.realpath(os.path.join(root, sub_path))
    if os.path.isabs(sub_path) or ".." in sub_path.split("/") or os.path.commonpath([root, src]) != root:
        raise ConfigError("subPath %r of volume %s leaves the volume" % (sub_path, volume))
    if not os.path.exists(src):
        os.makedirs(src, mode=0o777)
    return src


class Podman:
    """The podman command line, with the project's containers.conf (runc, ulimits) by default."""

    def __init__(self, conf=None):
        self.env = dict(os.environ)
        if conf and "CONTAINERS_CONF" not in self.env:
            self.env["CONTAINERS_CONF"] = conf

    def run(self, *args, check=True, timeout=180, input=None):
        t0 = time.monotonic()
        try:
            p = subprocess.run(["podman", *args], capture_output=True, text=True, env=self.env,
                               timeout=timeout, input=input)
        except subprocess.TimeoutExpired:
            raise PodmanError("podman %s: timed out after %ss" % (" ".join(args[:3]), timeout))
        finally:
            if os.environ.get("FLEET_KUBELET_TRACE"):
                sys.stderr.write("podman %s: %.2fs\n" % (" ".join(args[:4]), time.monotonic() - t0))
        if check and p.returncode != 0:
            raise PodmanError("podman %s: %s" % (" ".join(args[:3]), (p.stderr or p.stdout).strip()[-2000:]))
        return p

    def out(self, *args, **kw):
        return self.run(*args, **kw).stdout.strip()

    def json(self, *args, **kw):
        return json.loads(self.out(*args, **kw) or "null")


def default_conf():
    here = os.path.dirname(os.path.abspath(__file__))
    conf = os.path.join(os.path.dirname(os.path.dirname(here)), "scripts", "containers.conf")
    return conf if os.path.exists(conf) else None


def unavailable_reason(conf=None):
    """None when this machine can run pods with podman, else why not (tests skip with it)."""
    if shutil.which("podman") is None:
        return "podman is not installed (Debian: podman runc catatonit)"
    if os.geteuid() != 0:
        return "the podman kubelet needs root (pod networks with their own addresses)"
    try:
        Podman(conf or default_conf()).run("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout=60)
    except PodmanError as e:
        return "podman does not work here: %s" % e
    return None


# ---------------------------------------------------------------------------------------------
# Env, as the kubelet resolves it
# ---------------------------------------------------------------------------------------------

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text, env):
    """Kubernetes' $(VAR) expansion: known names are replaced, $$ is a literal $, the rest stays."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR.sub(sub, text)


_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(q):
    m = _QUANTITY.match(str(q).strip())
    if not m or m.group(2) not in _SUFFIX:
        raise ConfigError("invalid quantity %r" % (q,))
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def _field(pod, path):
    meta, spec, st = pod["metadata"], pod["spec"], pod.get("status", {})
    m = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
              "status.hostIP": st.get("hostIP"), "status.podIP": st.get("podIP"),
              "status.hostIPs": ",".join(x["ip"] for x in st.get("hostIPs") or []),
              "status.podIPs": ",".join(x["ip"] for x in st.get("podIPs") or [])}
    if path in ("metadata.labels", "metadata.annotations"):
        d = meta.get(path.split(".")[1]) or {}
        return "\n".join('%s="%s"' % (k, d[k]) for k in sorted(d))
    if path not in simple:
        raise ConfigError("unsupported fieldPath %s" % path)
    return simple[path] or ""


def _resource_field(pod, container, ref):
    c = next((x for x in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", [])
              if x["name"] == (ref.get("containerName") or container["name"])), container)
    kind, _, res = ref.get("resource", "").partition(".")
    value = ((c.get("resources") or {}).get(kind) or {}).get(res)
    if value is None:   # no limit: the node's allocatable (16 CPUs, 64Gi here)
        value = {"cpu": "16", "memory": "64Gi", "ephemeral-storage": "100Gi"}.get(res, "0")
    divisor = quantity(ref.get("divisor", "1"))
    return str(int(-(-quantity(value) // divisor)))   # rounded up, as the kubelet does


def resolve_env(pod, container, service_env, lookup):
    """The container's environment as an ordered dict. lookup(kind, name) -> data dict or None."""
    env = dict(service_env)
    for src in container.get("envFrom") or []:
        kind = "configmaps" if "configMapRef" in src else "secrets"
        ref = src.get("configMapRef") or src.get("secretRef") or {}
        data = lookup(kind, ref.get("name", ""))
        if data is None:
            if ref.get("optional"):
                continue
            raise ConfigError('%s "%s" not found' % ("configmap" if kind == "configmaps" else "secret",
                                                    ref.get("name", "")))
        for k, v in data.items():
            env[src.get("prefix", "") + k] = v
    for e in container.get("env") or []:
        name = e["name"]
        if "valueFrom" not in e:
            env[name] = expand(e.get("value", ""), env)
            continue
        vf = e["valueFrom"]
        if "fieldRef" in vf:
            env[name] = _field(pod, vf["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in vf:
            env[name] = _resource_field(pod, container, vf["resourceFieldRef"])
        elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
            kind = "configmaps" if "configMapKeyRef" in vf else "secrets"
            ref = vf.get("configMapKeyRef") or vf.get("secretKeyRef")
            data = lookup(kind, ref.get("name", ""))
            what = "configmap" if kind == "configmaps" else "secret"
            if data is None or ref.get("key") not in data:
                if ref.get("optional"):
                    continue
                if data is None:
                    raise ConfigError('%s "%s" not found' % (what, ref.get("name", "")))
                raise ConfigError("couldn't find key %s in %s %s/%s" % (
                    ref.get("key"), what.capitalize() if what == "secret" else "ConfigMap",
                    pod["metadata"]["namespace"], ref.get("name", "")))
            env[name] = data[ref["key"]]
    return env


# ---------------------------------------------------------------------------------------------
# Volumes, as the kubelet's atomic writer writes them
# ---------------------------------------------------------------------------------------------

def write_atomic(target_dir, files, mode=0o644, uid=None):
    """Publish {relative path: bytes} in target_dir the way the kubelet does: the files live in a
    timestamped directory, ..data points to it, and each top-level name is a symlink through
    ..data, so a reader sees either the old or the new set, never a mix.  Returns True when the
    content changed."""
    os.makedirs(target_dir, exist_ok=True)
    os.chmod(target_dir, 0o755)
    data_link = os.path.join(target_dir, "..data")
    current = {}
    if os.path.islink(data_link):
        old = os.path.join(target_dir, os.readlink(data_link))
        for root, _dirs, names in os.walk(old):
            for n in names:
                p = os.path.join(root, n)
                with open(p, "rb") as f:
                    current[os.path.relpath(p, old)] = f.read()
    if os.path.islink(data_link) and current == files:
        return False
    ts = tempfile.mkdtemp(prefix="..%s." % time.strftime("%Y_%m_%d_%H_%M_%S"), dir=target_dir)
    os.chmod(ts, 0o755)
    for rel, content in files.items():
        p = os.path.join(ts, rel)
        os.makedirs(os.path.dirname(p), mode=0o755, exist_ok=True)
        with open(p, "wb") as f:
            f.write(content)
        os.chmod(p, mode)
        if uid is not None:
            os.chown(p, uid, -1)
    tmp_link = os.path.join(target_dir, "..data_tmp")
    if os.path.lexists(tmp_link):
        os.unlink(tmp_link)
    os.symlink(os.path.basename(ts), tmp_link)
    os.rename(tmp_link, data_link)
    tops = {rel.split("/")[0] for rel in files}
    for top in tops:
        link = os.path.join(target_dir, top)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..data", top), link)
    for name in os.listdir(target_dir):
        p = os.path.join(target_dir, name)
        if name.startswith("..") and name not in ("..data", os.path.basename(ts)):
            shutil.rmtree(p, ignore_errors=True) if not os.path.islink(p) else os.unlink(p)
        elif not name.startswith("..") and name not in tops:
            os.unlink(p)
    return True


def _items(data, items, what, name):
    if not items:
        return {k: v for k, v in data.items()}
    out = {}
    for it in items:
        if it["key"] not in data:
            raise ConfigError("configmap references non-existent config key: %s" % it["key"] if what == "configmap"
                              else 'secret "%s" has no key %s' % (name, it["key"]))
        out[it["path"]] = data[it["key"]]
    return out


# ---------------------------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------------------------

def probe_once(probe, host, container, podman, ctr_name):
    """Runs one probe; True on success."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            h = probe["httpGet"]
            port = _port(h.get("port"), container)
            target = h.get("host") or host
            if h.get("scheme", "HTTP").upper() == "HTTPS":
                conn = http.client.HTTPSConnection(target, port, timeout=timeout,
                                                   context=ssl._create_unverified_context())
            else:
                conn = http.client.HTTPConnection(target, port, timeout=timeout)
            try:
                headers = {x["name"]: x["value"] for x in h.get("httpHeaders") or []}
                headers.setdefault("User-Agent", "kube-probe/1.32")
                conn.request("GET", h.get("path", "/"), headers=headers)
                return 200 <= conn.getresponse().status < 400
            finally:
                conn.close()
        if "tcpSocket" in probe:
            t = probe["tcpSocket"]
            with socket.create_connection((t.get("host") or host, _port(t.get("port"), container)), timeout=timeout):
                return True
        if "exec" in probe:
            p = podman.run("exec", ctr_name, *probe["exec"].get("command", []), check=False,
                           timeout=max(timeout, 1) + 5)
            return p.returncode == 0
    except (OSError, http.client.HTTPException, PodmanError, ValueError):
        return False
    return False


def _port(port, container):
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError("no port named %r" % (port,))


def pre_stop_hooks(ctrs, host, podman, deadline, failed):
    """Runs each container's lifecycle.preStop hook (httpGet, exec or sleep; ``ctrs`` have ``spec``,
    ``name`` and ``podman_name``), all at once, until each returns or ``deadline`` (time.monotonic(),
    the end of the grace period) passes, as the kubelet does before SIGTERM. A hook that failed or
    is still running at the deadline is reported to ``failed(c)`` (the kubelet's FailedPreStopHook
    event); either only ends the wait for it."""
    ok = {}

    def run(c, hook):
        left = max(0.0, deadline - time.monotonic())
        if "sleep" in hook:
            time.sleep(min(left, float(hook["sleep"].get("seconds", 0))))
            ok[c.name] = True
        else:
            ok[c.name] = probe_once(dict(hook, timeoutSeconds=left), host, c.spec, podman, c.podman_name)
    threads = []
    for c in ctrs:
        hook = (c.spec.get("lifecycle") or {}).get("preStop")
        if isinstance(hook, dict) and hook:
            threads.append((c, threading.Thread(target=run, args=(c, hook), name="prestop-%s" % c.name, daemon=True)))
            threads[-1][1].start()
    for c, t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive() or not ok.get(c.name):
            failed(c)


class ProbeLoop(threading.Thread):
    """Probes one container run; reports transitions to the pod worker's queue."""

    def __init__(self, worker, ctr, kind, probe, gen):
        super().__init__(name="probe-%s-%s" % (ctr.name, kind), daemon=True)
        self.worker, self.ctr, self.kind, self.probe, self.gen = worker, ctr, kind, probe, gen
        self.stop_event = threading.Event()

    def run(self):
        p, w = self.probe, self.worker
        period = max(1, int(p.get("periodSeconds", 10)))
        succ_need, fail_need = max(1, int(p.get("successThreshold", 1))), max(1, int(p.get("failureThreshold", 3)))
        if self.stop_event.wait(float(p.get("initialDelaySeconds", 0))):
            return
        ok_run = fail_run = 0
        last = None
        while not self.stop_event.is_set():
            host = w.pod_ip or "127.0.0.1"
            ok = probe_once(p, host, self.ctr.spec, w.kubelet.podman, self.ctr.podman_name)
            ok_run, fail_run = (ok_run + 1, 0) if ok else (0, fail_run + 1)
            result = True if ok_run >= succ_need else (False if fail_run >= fail_need else None)
            if result is not None and result != last:
                last = result
                w.events.put(("probe", self.ctr.name, self.gen, self.kind, result))
                if self.kind == "startup" and result:
                    return   # a startup probe stops once it passed
            if self.stop_event.wait(period):
                return


# ---------------------------------------------------------------------------------------------
# Containers and pods
# ---------------------------------------------------------------------------------------------

def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def podman_time(s):
    """podman's time ("2026-11-26 08:00:00.123456789 +0000 UTC" or RFC 3339) to RFC 3339 seconds."""
    m = re.match(r"^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)", s or "")
    return "%sT%sZ" % (m.group(1), m.group(2)) if m else now_rfc3339()


class CrashLoopBackOff:
    """The kubelet's restart back-off of one container: the first restart at once, then 10 s
    doubling to 300 s; a run of 10 minutes starts it over. `scale` shortens every duration (tests:
    FLEET_KUBELET_BACKOFF_SCALE)."""

    def __init__(self, scale=1.0):
        self.scale, self.next = scale, 0.0

    def delay(self, ran_for):
        """Seconds to wait before restarting a container whose run lasted `ran_for` seconds."""
        if ran_for >= BACKOFF_RESET * self.scale:
            self.next = 0.0
        delay, self.next = self.next, min(BACKOFF_MAX, 2 * self.next) if self.next else BACKOFF_START
        return delay * self.scale


class Container:
    def __init__(self, spec, kind):
        self.spec, self.name, self.kind = spec, spec["name"], kind   # kind: init | sidecar | main
        self.restarts = 0
        self.state = {"waiting": {"reason": "PodInitializing" if kind == "main" else "ContainerCreating"}}
        self.last = {}
        self.ready = False
        self.started = False        # the startup probe passed (or there is none and it runs)
        self.podman_name = None
        self.cid = None
        self.image_id = ""
        self.gen = 0                # which run of the container events belong to
        self.probes = []
        self.tailer = None
        self.log_path = None        # the current run's k8s-file log
        self.next_start = 0.0       # monotonic time of the next (re)start, back-off included
        self.run_start = 0.0        # monotonic time the current run started
        self.backoff = None         # its CrashLoopBackOff, made by the pod worker
        self.done = False           # will not run again (completed init, finished main)
        self.exit_code = None

    @property
    def running(self):
        return "running" in self.state

    def status(self):
        image = self.spec.get("image", "")
        st = {"name": self.name, "image": image, "imageID": self.image_id, "ready": self.ready,
              "restartCount": self.restarts, "state": self.state, "lastState": self.last,
              "started": self.started if self.running else False}
        if self.cid and ("running" in self.state or "terminated" in self.state):
            st["containerID"] = "podman://" + self.cid
        return st


def k8s_file_entries(data, partial=""):
    """The (epoch, text) entries of whole lines of podman's k8s-file log format ("<time> <stream>
    <P|F> <text>": P marks a line split into several), and the partial line left pending."""
    entries = []
    for raw in data.decode("utf-8", "replace").splitlines():
        ts, _, rest = raw.partition(" ")
        _stream, _, rest = rest.partition(" ")
        tag, _, text = rest.partition(" ")
        if tag == "P":
            partial += text
            continue
        entries.append((_epoch(ts), partial + text + "\n"))
        partial = ""
    return entries, partial


def log_texts(path):
    """The lines of a container run's k8s-file log, read to its end (a log not there: none)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [text for _t, text in k8s_file_entries(data[:data.rfind(b"\n") + 1])[0]]


class LogTailer(threading.Thread):
    """Follows one container run's k8s-file log into the API server's log store."""

    def __init__(self, store, key, path):
        super().__init__(name="log-%s" % key[2], daemon=True)
        self.store, self.key, self.path = store, key, path
        self.finish = threading.Event()    # the container exited: read to the end, then stop

    def run(self):
        pos, partial = 0, ""
        while True:
            done = self.finish.is_set()
            try:
                with open(self.path, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
            except FileNotFoundError:
                chunk = b""
            if chunk:
                end = chunk.rfind(b"\n") + 1
                pos += end
                entries, partial = k8s_file_entries(chunk[:end], partial)
                if entries:
                    with self.store.lock:
                        self.store.logs.setdefault(self.key, []).extend(entries)
                        self.store.changed.notify_all()
            if done:
                return
            self.finish.wait(0.2)


def _epoch(ts):
    m = re.match(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", ts)
    if not m:
        return time.time()
    import calendar
    t = calendar.timegm(tuple(int(m.group(i)) for i in range(1, 7)) + (0, 0, 0))
    frac = float(m.group(7) or 0)
    tz = m.group(8)
    off = 0 if tz == "Z" else (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return t + frac - off


class PodWorker(threading.Thread):
    """Runs one pod: a single thread owns its state; probes, exits and deletion arrive as events."""

    def __init__(self, kubelet, pod):
        meta = pod["metadata"]
        super().__init__(name="pod-%s" % meta["name"], daemon=True)
        self.kubelet, self.store = kubelet, kubelet.store
        self.ns, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.pod = pod                      # the latest copy we read (spec does not change)
        self.spec = pod["spec"]
        self.podman_pod = "k8s_%s_%s_%s" % (self.ns, self.name, self.uid[:8])
        self.dir = os.path.join(kubelet.root, self.uid)
        self.events = queue.Queue()
        self.pod_ip = None
        self.host_ip = kubelet.gateway
        self.phase = "Pending"
        self.initialized = False
        self.sandbox = False
        self.terminating = None             # grace seconds once deletion began
        self.killed = False
        inits = self.spec.get("initContainers") or []
        self.ctrs = [Container(c, "sidecar" if c.get("restartPolicy") == "Always" else "init") for c in inits]
        self.ctrs += [Container(c, "main") for c in self.spec.get("containers") or []]
        self.volume_sources = {}            # volume name -> host dir
        self.sa_token = None
        self.last_volume_sync = 0.0
        self.message = None
        self.reason = None
        self.start_time = None

    # ---- the loop ----------------------------------------------------------------------
    def run(self):
        try:
            self._setup()
            while not self.killed:
                if self.terminating is not None:
                    self._shutdown(self.terminating)
                    break
                self._step()
                self._publish()
                self._wait_event()
        except Exception as e:   # a kubelet bug or a podman failure: say so on the pod
            self.kubelet.log("pod %s/%s: %r" % (self.ns, self.name, e))
            self.message = "podman kubelet: %s" % e
            if self.terminating is None and not self.killed:
                self.phase, self.reason = "Failed", "KubeletError"
                self._publish()
                while self.terminating is None and not self.killed:
                    self._wait_event()
                if self.terminating is not None:
                    self._shutdown(self.terminating)
        finally:
            self._teardown()
            self.kubelet.worker_done(self)

    def _wait_event(self):
        deadline = min([c.next_start for c in self.ctrs if c.next_start > time.monotonic()] +
                       [time.monotonic() + VOLUME_SYNC_SECONDS])
        try:
            ev = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            return
        while True:
            self._handle(ev)
            try:
                ev = self.events.get_nowait()
            except queue.Empty:
                return

    def _handle(self, ev):
        kind = ev[0]
        if kind == "terminate":
            self.terminating = ev[1] if self.terminating is None else min(self.terminating, ev[1])
        elif kind == "kill":
            self.killed = True
        elif kind == "exited":
            _, name, gen, code, oom, started, finished = ev
            c = self._ctr(name)
            if c.gen != gen or not c.running:
                return
            reason = "OOMKilled" if oom else ("Completed" if code == 0 else "Error")
            c.state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": started,
                                      "finishedAt": finished, "containerID": "podman://" + c.cid}}
            # The log file, not the tailer's store: the tailer may not have read the last lines yet.
            message = self.kubelet.termination_message(c.spec, code, log_texts(c.log_path) if c.log_path else [])
            if message:
                c.state["terminated"]["message"] = message
            c.exit_code, c.ready, c.started = code, False, False
            self._stop_probes(c)
            if c.tailer:
                c.tailer.finish.set()
            self._after_exit(c)
        elif kind == "probe":
            _, name, gen, probe, ok = ev
            c = self._ctr(name)
            if c.gen != gen or not c.running:
                return
            if probe == "startup":
                if ok:
                    c.started = True
                    self._start_probes(c, after_startup=True)
                    if not c.spec.get("readinessProbe"):
                        c.ready = True
                else:
                    self._kill_container(c, "startup probe failed", c.spec["startupProbe"])
            elif probe == "readiness":
                c.ready = ok and c.started
            elif probe == "liveness" and not ok:
                self._kill_container(c, "liveness probe failed", c.spec["livenessProbe"])

    def _ctr(self, name):
        return next(c for c in self.ctrs if c.name == name)

    # ---- what to do next ---------------------------------------------------------------
    def _step(self):
        if self.phase in ("Succeeded", "Failed"):
            self._sync_volumes()
            return
        now = time.monotonic()
        if now - self.last_volume_sync >= VOLUME_SYNC_SECONDS:
            self._sync_volumes()
        # Restart what died and may run again (sidecars always; mains per restartPolicy).
        for c in self.ctrs:
            if not c.running and not c.done and c.gen > 0 and c.next_start <= now and \
                    (c.kind == "sidecar" or self.initialized or c.kind == "init"):
                self._start_container(c)
        if not self.initialized:
            for c in self.ctrs:
                if c.kind == "main":
                    break
                if c.kind == "init" and c.done:
                    continue
                if c.gen == 0 and c.next_start <= now:
                    self._start_container(c)
                if c.kind == "init" or not c.started:
                    return          # wait for it: completion, or the sidecar's startup probe
            self.initialized = True
            for c in self.ctrs:
                if c.kind == "main":
                    c.state = {"waiting": {"reason": "ContainerCreating"}}
            self._publish()
        for c in self.ctrs:
            if c.kind == "main" and c.gen == 0 and c.next_start <= now:
                self._start_container(c)
        mains = [c for c in self.ctrs if c.kind == "main"]
        if any(c.running for c in mains):
            self.phase = "Running"
        if mains and all(c.done for c in mains):
            failed = any(c.exit_code != 0 for c in mains)
            self._stop_sidecars(int(self.spec.get("terminationGracePeriodSeconds", 30)))
            self.phase = "Failed" if failed else "Succeeded"

    def _after_exit(self, c):
        if c.done:   # stopped on purpose (pod finished or deleted)
            return
        policy = self.spec.get("restartPolicy", "Always")
        if c.kind == "sidecar":
            again = self.terminating is None and self.phase not in ("Succeeded", "Failed")
        elif c.kind == "init":
            again = c.exit_code != 0 and policy != "Never"
            if c.exit_code == 0:
                c.done = True
            elif not again:
                c.done = True
                self.phase, self.reason = "Failed", None
                self._stop_sidecars(int(self.spec.get("terminationGracePeriodSeconds", 30)))
                return
        else:
            again = policy == "Always" or (policy == "OnFailure" and c.exit_code != 0)
        if again and self.terminating is None:
            if c.backoff is None:
                c.backoff = CrashLoopBackOff(self.kubelet.backoff_scale)
            delay = c.backoff.delay(time.monotonic() - c.run_start)
            c.next_start = time.monotonic() + delay
            if delay > 0:   # as the kubelet shows it meanwhile: waiting, the end in lastState
                c.last = c.state
                c.state = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off %ds restarting failed "
                                       "container=%s pod=%s_%s(%s)" % (round(delay), c.name, self.name, self.ns,
                                                                       self.uid)}}
        else:
            c.done = True

    # ---- sandbox and containers ---------------------------------------------------------
    def _setup(self):
        os.makedirs(self.dir, mode=0o755, exist_ok=True)
        self._publish()   # ContainerCreating / PodInitializing
        pm, k = self.kubelet.podman, self.kubelet
        args = ["pod", "create", "--name", self.podman_pod, "--label", "%s=%s" % (LABEL, k.id),
                "--label", "%s=%d" % (LABEL_PID, os.getpid()), "--label", "io.kubernetes.pod.uid=" + self.uid,
                "--infra-name", self.podman_pod + "_infra"]
        shares = ["ipc", "net", "uts"] + (["pid"] if self.spec.get("shareProcessNamespace") else [])
        args += ["--share", ",".join(shares)]
        if self.spec.get("hostNetwork"):
            args += ["--network", "host"]
        else:
            args += ["--network", k.network, "--hostname", self.spec.get("hostname") or self.name]
            for alias in self.spec.get("hostAliases") or []:
                for h in alias.get("hostnames") or []:
                    args += ["--add-host", "%s:%s" % (h, alias["ip"])]
        args += ["--infra-image", k.pause_image]
        pm.run(*args)
        self.sandbox = True
        pm.run("pod", "start", self.podman_pod)
        if self.spec.get("hostNetwork"):
            self.pod_ip = k.gateway
        else:
            infra = pm.json("inspect", self.podman_pod + "_infra")[0]
            self.pod_ip = infra["NetworkSettings"]["Networks"][k.network]["IPAddress"]
        self.start_time = now_rfc3339()
        self._publish()   # the pod's address first: env and the downward API read it
        self._sync_volumes()

    def _container_user(self, c):
        sc = dict(self.spec.get("securityContext") or {})
        sc.update(c.spec.get("securityContext") or {})
        return sc

    def _start_container(self, c):
        pm, k = self.kubelet.podman, self.kubelet
        if c.podman_name:
            pm.run("rm", "-f", "-t", "0", c.podman_name, check=False)
        if "terminated" in c.state:   # the end of the last run, whatever keeps the next one waiting
            c.last = c.state
        image = c.spec.get("image", "")
        local = k.local_image(image)
        if local is None:
            never = c.spec.get("imagePullPolicy") == "Never"
            c.state = {"waiting": {"reason": "ErrImageNeverPull" if never else "ImagePullBackOff",
                                   "message": 'Container image "%s" is not present with pull policy of Never' % image
                                   if never else 'Back-off pulling image "%s": no registry is reachable from the '
                                   'podman kubelet; load the image into podman' % image}}
            c.next_start = time.monotonic() + 2
            return
        try:
            env = self._env(c)
            args = self._create_args(c, local, env)
        except ConfigError as e:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
            c.next_start = time.monotonic() + 2
            return
        if c.gen > 0:
            c.restarts += 1
            key = (self.ns, self.name, c.name)
            with self.store.lock:
                self.store.prev_logs[key] = self.store.logs.pop(key, [])
        c.gen += 1
        c.podman_name = "%s_%s_%d" % (self.podman_pod, c.name, c.gen)
        log_path = os.path.join(self.dir, "logs", "%s-%d.log" % (c.name, c.gen))
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        pm.run("create", "--name", c.podman_name, "--log-driver", "k8s-file", "--log-opt", "path=" + log_path,
               *args)
        inspect = pm.json("container", "inspect", c.podman_name)[0]
        c.cid, c.image_id = inspect["Id"], "sha256:" + inspect["Image"]
        c.log_path = log_path
        c.tailer = LogTailer(self.store, (self.ns, self.name, c.name), log_path)
        c.tailer.start()
        pm.run("start", c.podman_name)
        started = podman_time(pm.json("container", "inspect", c.podman_name)[0]["State"]["StartedAt"])
        c.state = {"running": {"startedAt": started}}
        c.ready = c.started = False
        c.next_start, c.run_start = 0.0, time.monotonic()
        threading.Thread(target=self._wait_exit, args=(c.name, c.podman_name, c.gen), daemon=True).start()
        if not c.spec.get("startupProbe"):
            c.started = True
            if not c.spec.get("readinessProbe"):
                c.ready = c.kind != "init"
            self._start_probes(c, after_startup=True)
        else:
            self._start_probes(c, after_startup=False)
        self._publish()

    def _wait_exit(self, name, ctr, gen):
        pm = self.kubelet.podman
        code = None
        while code is None:
            p = pm.run("wait", ctr, check=False, timeout=None)
            if p.returncode == 0 and p.stdout.strip().lstrip("-").isdigit():
                code = int(p.stdout.strip())
            elif pm.run("container", "exists", ctr, check=False).returncode != 0:
                return   # removed (pod deleted)
            else:
                time.sleep(0.5)
        try:
            st = pm.json("container", "inspect", ctr)[0]["State"]
        except (PodmanError, ValueError, IndexError):
            st = {}
        self.events.put(("exited", name, gen, code, bool(st.get("OOMKilled")), podman_time(st.get("StartedAt")),
                         podman_time(st.get("FinishedAt"))))

    def _start_probes(self, c, after_startup):
        kinds = ["readiness", "liveness"] if after_startup else ["startup"]
        for kind in kinds:
            probe = c.spec.get(kind + "Probe")
            if probe and c.kind != "init":
                loop = ProbeLoop(self, c, kind, probe, c.gen)
                c.probes.append(loop)
                loop.start()

    def _stop_probes(self, c):
        for p in c.probes:
            p.stop_event.set()
        c.probes = []

    def _kill_container(self, c, why, probe):
        """A failed liveness or startup probe: SIGTERM, SIGKILL after the probe's grace period (the
        pod's when the probe has none), as the kubelet does; the exit then restarts it or not."""
        grace = int(probe.get("terminationGracePeriodSeconds", self.spec.get("terminationGracePeriodSeconds", 30)))
        self.kubelet.log("pod %s/%s container %s: %s, killing it" % (self.ns, self.name, c.name, why))
        self.kubelet.podman.run("stop", "-t", str(grace), c.podman_name, check=False, timeout=grace + 60)

    def _stop_sidecars(self, grace):
        sidecars = [c for c in self.ctrs if c.kind == "sidecar" and c.podman_name]
        for c in sidecars:
            c.done = True
            self._stop_probes(c)
        for c in reversed(sidecars):
            self.kubelet.podman.run("stop", "-t", str(grace), c.podman_name, check=False, timeout=grace + 60)
        self._collect_exits(sidecars, time.monotonic() + 10)

    def _collect_exits(self, ctrs, deadline):
        """Handles the exit events of ctrs (already stopped) until each reported or the deadline."""
        while any(c.running for c in ctrs) and time.monotonic() < deadline:
            try:
                self._handle(self.events.get(timeout=0.2))
            except queue.Empty:
                pass

    def _shutdown(self, grace):
        """Graceful deletion: SIGTERM to the main containers, SIGKILL after the grace period, then
        the sidecars in reverse order with what is left of it, as the kubelet does."""
        t0 = time.monotonic()
        mains = [c for c in self.ctrs if c.kind != "sidecar" and c.running]
        for c in self.ctrs:
            c.done = True
            self._stop_probes(c)
        if mains:
            pre_stop_hooks(mains, self.pod_ip or "127.0.0.1", self.kubelet.podman, t0 + grace,
                           lambda c: self.kubelet.log("pod %s/%s container %s: the preStop hook failed "
                                                      "(FailedPreStopHook)" % (self.ns, self.name, c.name)))
            # The whole seconds the hooks took come off the grace period (at least 2 s are left), as
            # the kubelet does: time.Since(start).Seconds() truncated, so no hook takes nothing off.
            left = max(2, grace - int(time.monotonic() - t0))
            self.kubelet.podman.run("stop", "-t", str(left), *[c.podman_name for c in mains], check=False,
                                    timeout=left + 60)
            self._collect_exits(mains, time.monotonic() + 10)
        left = max(2, int(grace - (time.monotonic() - t0)))
        self._stop_sidecars(left)
        if self.phase not in ("Succeeded", "Failed"):
            mains = [c for c in self.ctrs if c.kind == "main"]
            self.phase = "Succeeded" if mains and all(c.exit_code == 0 for c in mains) else "Failed"
        self._publish()

    def _teardown(self):
        for c in self.ctrs:
            self._stop_probes(c)
            if c.tailer:
                c.tailer.finish.set()
        if self.sandbox:
            self.kubelet.podman.run("pod", "rm", "-f", "-t", "0", self.podman_pod, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- env, volumes, podman arguments -------------------------------------------------
    def _lookup(self, kind, name):
        """A ConfigMap's or Secret's data as text (env), or None when it does not exist."""
        data = self._lookup_bytes(kind, name, binary=False)
        return None if data is None else {k: v.decode("utf-8", "replace") for k, v in data.items()}

    def _lookup_bytes(self, kind, name, binary=True):
        """Its data as bytes (volumes; a ConfigMap's binaryData too unless binary is False)."""
        with self.store.lock:
            obj = self.store._find(self.store.registry.get("", "v1", kind), self.ns, name)
            if obj is None:
                return None
            if kind == "secrets":
                return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            out = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
            if binary:
                out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
            return out

    def _current_pod(self):
        with self.store.lock:
            cur = self.kubelet._current(self.ns, self.name, self.uid)
            if cur is not None:
                self.pod = cur
            return self.pod

    def _env(self, c):
        pod = self._current_pod()
        env = resolve_env(pod, c.spec, self.kubelet.service_env(), self._lookup)
        return env

    def _automount(self):
        if "automountServiceAccountToken" in self.spec:
            return bool(self.spec["automountServiceAccountToken"])
        with self.store.lock:
            sa = self.store._find(self.store.registry.get("", "v1", "serviceaccounts"), self.ns,
                                  self.spec.get("serviceAccountName", "default"))
        return (sa or {}).get("automountServiceAccountToken", True) is not False

    def _volumes(self):
        vols = list(self.spec.get("volumes") or [])
        if self._automount():
            vols.append({"name": "kube-api-access", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}})
        return vols

    def _token(self):
        if self.sa_token is None:
            self.sa_token = "kubelet-%s-%s" % (self.uid[:8], secrets.token_hex(16))
            self.kubelet.register_token(self.sa_token)
        return self.sa_token

    def _sync_volumes(self):
        """Writes every volume's files (again when their sources changed)."""
        self.last_volume_sync = time.monotonic()
        pod = self._current_pod()
        for v in self._volumes():
            d = os.path.join(self.dir, "volumes", v["name"])
            self.volume_sources[v["name"]] = d
            try:
                if "emptyDir" in v:
                    if not os.path.isdir(d):
                        os.makedirs(d)
                        os.chmod(d, 0o777)   # as the kubelet makes it: any container user may write
                elif "hostPath" in v:
                    self.volume_sources[v["name"]] = v["hostPath"]["path"]
                elif "configMap" in v or "secret" in v:
                    kind = "configmaps" if "configMap" in v else "secrets"
                    src = v.get("configMap") or v.get("secret")
                    name = src.get("name") or src.get("secretName", "")
                    data = self._lookup_bytes(kind, name)
                    if data is None:
                        if not src.get("optional"):
                            raise ConfigError('%s "%s" not found' % (kind[:-1], name))
                        data = {}
                    files = _items(data, src.get("items"), kind[:-1], name)
                    write_atomic(d, files, src.get("defaultMode", 0o644))
                elif "downwardAPI" in v:
                    files = {it["path"]: str(_field(pod, it["fieldRef"]["fieldPath"])).encode()
                             for it in v["downwardAPI"].get("items") or [] if "fieldRef" in it}
                    write_atomic(d, files, v["downwardAPI"].get("defaultMode", 0o644))
                elif "projected" in v:
                    files, mode, uid = {}, v["projected"].get("defaultMode", 0o644), None
                    for s in v["projected"].get("sources") or []:
                        if "serviceAccountToken" in s:
                            files[s["serviceAccountToken"].get("path", "token")] = self._token().encode()
                            uid, mode = self._token_owner(v["name"])
                        elif "configMap" in s or "secret" in s:
                            kind = "configmaps" if "configMap" in s else "secrets"
                            src = s.get("configMap") or s.get("secret")
                            data = self._lookup_bytes(kind, src.get("name", ""))
                            if data is None:
                                if src.get("optional"):
                                    continue
                                raise ConfigError('%s "%s" not found' % (kind[:-1], src.get("name", "")))
                            files.update(_items(data, src.get("items"), kind[:-1], src.get("name", "")))
                        elif "downwardAPI" in s:
                            files.update({it["path"]: str(_field(pod, it["fieldRef"]["fieldPath"])).encode()
                                          for it in s["downwardAPI"].get("items") or [] if "fieldRef" in it})
                    write_atomic(d, files, mode, uid)
            except ConfigError as e:
                # The kubelet keeps such a pod's containers from starting (FailedMount); a missing
                # source that appears later is picked up on the next sync.
                self.kubelet.log("pod %s/%s volume %s: %s" % (self.ns, self.name, v["name"], e))
                self.volume_sources.pop(v["name"], None)

    def _token_owner(self, volume):
        """The token file is 0600 and owned by the containers' user when every container that
        mounts it runs as the same explicit user (the kubelet's rule), else 0644."""
        uids = set()
        for c in self.ctrs:
            mounts = [m for m in c.spec.get("volumeMounts") or [] if m["name"] == volume]
            if mounts or volume == "kube-api-access":
                uids.add(self._container_user(c).get("runAsUser"))
        if len(uids) == 1 and None not in uids:
            return int(next(iter(uids))), 0o600
        return None, 0o644

    def _create_args(self, c, image, env):
        spec, k = c.spec, self.kubelet
        sc = self._container_user(c)
        args = ["--pod", self.podman_pod, "--pull", "never", "--label", "%s=%s" % (LABEL, k.id),
                "--label", "io.kubernetes.container.name=" + c.name]
        uid = sc.get("runAsUser")
        if sc.get("runAsNonRoot"):
            user = str(uid) if uid is not None else k.image_user(image)
            name = user.split(":")[0]
            if not name.isdigit():
                raise ConfigError("container has runAsNonRoot and image has non-numeric user (%s), cannot verify "
                                  "user is non-root" % name if name else
                                  "container has runAsNonRoot and image will run as root")
            if int(name) == 0:
                raise ConfigError("container has runAsNonRoot and image will run as root (pod: \"%s_%s(%s)\", "
                                  "container: %s)" % (self.name, self.ns, self.uid, c.name))
        if uid is not None:
            args += ["--user", "%d%s" % (int(uid), ":%d" % int(sc["runAsGroup"]) if "runAsGroup" in sc else "")]
        for g in (self.spec.get("securityContext") or {}).get("supplementalGroups") or []:
            args += ["--group-add", str(g)]
        fs_group = (self.spec.get("securityContext") or {}).get("fsGroup")
        if fs_group is not None:
            args += ["--group-add", str(fs_group)]
        if sc.get("readOnlyRootFilesystem"):
            args += ["--read-only", "--read-only-tmpfs=false"]
        if sc.get("privileged"):
            args += ["--privileged"]
        caps = sc.get("capabilities") or {}
        for cap in caps.get("drop") or []:
            args += ["--cap-drop", cap]
        for cap in caps.get("add") or []:
            args += ["--cap-add", cap]
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        limits = (spec.get("resources") or {}).get("limits") or {}
        if "memory" in limits and k.enforce_limits:
            args += ["--memory", str(int(quantity(limits["memory"])))]
        if "cpu" in limits and k.enforce_limits:
            args += ["--cpus", "%.3f" % max(0.01, quantity(limits["cpu"]))]
        if spec.get("workingDir"):
            args += ["--workdir", spec["workingDir"]]
        for name, value in env.items():
            args += ["--env", "%s=%s" % (name, value)]
        mounts = list(spec.get("volumeMounts") or [])
        if self._automount() and not any(m.get("mountPath") == SA_MOUNT for m in mounts):
            mounts.append({"name": "kube-api-access", "mountPath": SA_MOUNT, "readOnly": True})
        for m in mounts:
            src = self.volume_sources.get(m["name"])
            if src is None:
                raise ConfigError("volume %s of container %s is not ready (missing source or unsupported "
                                  "type)" % (m["name"], c.name))
            if m.get("subPath"):
                src = sub_path_source(src, expand(m["subPath"], env), m["name"])
            opt = "type=bind,src=%s,dst=%s" % (src, m["mountPath"])
            if m.get("readOnly"):
                opt += ",ro=true"
            args += ["--mount", opt]
        command = [expand(x, env) for x in spec.get("command") or []]
        cargs = [expand(x, env) for x in spec.get("args") or []]
        if command:
            args += ["--entrypoint", json.dumps(command)]
        args.append(image)
        return args + cargs

    # ---- status ------------------------------------------------------------------------
    def _publish(self):
        with self.store.lock:
            cur = self.kubelet._current(self.ns, self.name, self.uid)
            if cur is None:   # gone (forced or namespace deletion): kill what runs
                self.killed = True
                return
            self.pod = self.kubelet._update(cur, self._apply_status)

    def _apply_status(self, p):
        st = p.setdefault("status", {})
        k = self.kubelet
        st["phase"] = self.phase
        st["hostIP"] = self.host_ip
        st["hostIPs"] = [{"ip": self.host_ip}]
        if self.pod_ip:
            st["podIP"] = self.pod_ip
            st["podIPs"] = [{"ip": self.pod_ip}]
            st.setdefault("startTime", self.start_time)
            k._set_cond(p, "PodReadyToStartContainers", "True")
        for key, val in (("reason", self.reason), ("message", self.message)):
            if val:
                st[key] = val
            else:
                st.pop(key, None)
        inits = [c.status() for c in self.ctrs if c.kind != "main"]
        if inits:
            st["initContainerStatuses"] = inits
        st["containerStatuses"] = [c.status() for c in self.ctrs if c.kind == "main"]
        if self.initialized or not inits:
            k._set_cond(p, "Initialized", "True")
        else:
            k._set_cond(p, "Initialized", "False", "ContainersNotInitialized",
                        "containers with incomplete status: [%s]" % " ".join(
                            c.name for c in self.ctrs if c.kind == "init" and not c.done))
        k._set_cond(p, "PodScheduled", "True")
        k._recompute_ready(p)


def make_kubelet_class(base):
    """The podman kubelet as a subclass of the fake API server's Kubelet (its scheduling, binding
    and status helpers stay; running pods is replaced)."""
    return type("PodmanKubelet", (PodmanKubeletMixin, base), {})


class PodmanKubeletMixin:
    """What the podman kubelet adds to, and replaces in, the fake API server's Kubelet: mixed in
    before that Kubelet by make_kubelet_class, so super() is the Kubelet."""

    def __init__(self, server, nodes, conf=None, network_subnet=None):
        super().__init__(server, nodes)
        self.mode = "auto"
        self.id = "%d-%s" % (os.getpid(), secrets.token_hex(3))
        self.podman = Podman(conf or default_conf())
        self.root = tempfile.mkdtemp(prefix="fleetjob-kubelet-")
        os.chmod(self.root, 0o755)
        self.workers = {}              # pod uid -> PodWorker
        self.workers_lock = threading.Lock()
        self.images = {}
        self.backoff_scale = float(os.environ.get("FLEET_KUBELET_BACKOFF_SCALE", "1"))
        self.enforce_limits = True
        self.network = "fleetjob-kubelet-" + self.id
        self.gateway = None
        self.api_port = None
        self._reap_stale()
        self.pause_image = self._pause_image()
        args = ["network", "create", "--label", "%s=%s" % (LABEL, self.id),
                "--label", "%s=%d" % (LABEL_PID, os.getpid())]
        if network_subnet:
            args += ["--subnet", network_subnet]
        self.podman.run(*args, self.network)
        net = self.podman.json("network", "inspect", self.network)[0]
        self.gateway = net["subnets"][0]["gateway"]
        # The bridge (and the gateway address the API server listens on) exists once a
        # member does: an empty pod holds it for the kubelet's lifetime.
        self.anchor = "fleetjob-kubelet-anchor-" + self.id
        self.podman.run("pod", "create", "--name", self.anchor, "--network", self.network,
                        "--infra-image", self.pause_image,
                        "--label", "%s=%s" % (LABEL, self.id), "--label", "%s=%d" % (LABEL_PID, os.getpid()))
        self.podman.run("pod", "start", self.anchor)
        self.node_ips.clear()
        for i in range(nodes):
            self.node_ips["node-%d" % i] = self.gateway
        self._check_limits()

    def log(self, msg):
        import sys
        sys.stderr.write("podman kubelet: %s\n" % msg)

    def _pause_image(self):
        """The pods' infra image: catatonit as /pause, PID 1 of a pod that shares its process
        namespace, as the kubelet's pause image is (the sidecar recognises a pod by it)."""
        image = "localhost/fleetjob-kubelet/pause:1"
        if self.podman.run("image", "exists", image, check=False).returncode != 0:
            with tempfile.TemporaryDirectory() as d:
                shutil.copy(shutil.which("catatonit") or "/usr/libexec/podman/catatonit", os.path.join(d, "pause"))
                with open(os.path.join(d, "Containerfile"), "w") as f:
                    f.write('FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause", "-P"]\n')
                self.podman.run("build", "--pull=never", "--tag", image, d, timeout=120)
        return image

    def _check_limits(self):
        """Resource limits go to podman where this machine's cgroups enforce them: a container
        with limits is set up (not started) once to find out."""
        probe = "fleetjob-kubelet-limits-" + self.id
        self.podman.run("create", "--name", probe, "--pod", self.anchor, "--memory", "64m", "--cpus", "0.5",
                        "--pull", "never", self.pause_image, timeout=60)
        p = self.podman.run("init", probe, check=False, timeout=60)
        self.podman.run("rm", "-f", "-t", "0", probe, check=False)
        self.enforce_limits = p.returncode == 0
        if not self.enforce_limits:
            self.log("resource limits are not enforced here: %s" % p.stderr.strip()[-300:])

    def _reap_stale(self):
        """Removes pods and networks of podman kubelets whose process is gone."""
        for kind in ("pod", "network"):
            p = self.podman.run(kind, "ls", "--filter", "label=" + LABEL, "--format", "{{.Name}}", check=False)
            for name in (p.stdout or "").split():
                pid = self.podman.run(kind, "inspect", "--format",
                                      '{{index .Labels "%s"}}' % LABEL_PID, name, check=False).stdout.strip()
                if pid.isdigit() and not os.path.exists("/proc/%s" % pid):
                    self.podman.run(kind, "rm", "-f", *(["-t", "0"] if kind == "pod" else []), name, check=False)

    def service_env(self):
        h, p = self.gateway, self.api_port
        return {"KUBERNETES_SERVICE_HOST": h, "KUBERNETES_SERVICE_PORT": str(p),
                "KUBERNETES_SERVICE_PORT_HTTPS": str(p), "KUBERNETES_PORT": "tcp://%s:%d" % (h, p),
                "KUBERNETES_PORT_%d_TCP" % p: "tcp://%s:%d" % (h, p),
                "KUBERNETES_PORT_%d_TCP_PROTO" % p: "tcp", "KUBERNETES_PORT_%d_TCP_PORT" % p: str(p),
                "KUBERNETES_PORT_%d_TCP_ADDR" % p: h}

    def register_token(self, token):
        if self.server.tokens:   # authentication is on: the pod's token must be accepted
            self.server.tokens.add(token)

    def local_image(self, image):
        """The local image a pod's image name means (podman also finds localhost/NAME), or None."""
        for name in (image, "localhost/" + image):
            if self.podman.run("image", "exists", name, check=False).returncode == 0:
                return name
        return None

    def image_user(self, image):
        if image not in self.images:
            self.images[image] = self.podman.out("image", "inspect", "--format", "{{.Config.User}}", image)
        return self.images[image]

    # ---- the base kubelet's hooks ------------------------------------------------
    def _schedule_start(self, pod):
        uid = pod["metadata"]["uid"]
        with self.workers_lock:
            if uid in self.workers or self.stopped:
                return
            w = PodWorker(self, pod)
            self.workers[uid] = w
        w.start()

    def terminate(self, pod):
        uid = pod["metadata"]["uid"]
        grace = int(pod["metadata"].get("deletionGracePeriodSeconds") or 30)
        with self.workers_lock:
            w = self.workers.get(uid)
        if w is None:
            return super().terminate(pod)
        w.events.put(("terminate", grace))

    def pod_deleted(self, uid):
        with self.workers_lock:
            w = self.workers.get(uid)
        if w is not None:
            w.events.put(("kill",))

    def worker_done(self, w):
        with self.workers_lock:
            self.workers.pop(w.uid, None)
        if w.sa_token:   # a pod's bound token dies with the pod
            self.server.tokens.discard(w.sa_token)
        with self.store.lock:
            cur = self._current(w.ns, w.name, w.uid)
            if cur is not None and cur["metadata"].get("deletionTimestamp"):
                self.store.pending_termination.discard(w.uid)
                self.store._check_foreground(w.uid)
                cur = self._current(w.ns, w.name, w.uid)
                if cur is not None and not cur["metadata"].get("finalizers"):
                    self.store._delete_now(self.pods, cur)

    def action(self, ns, name, body):
        from fake_apiserver import ApiError
        raise ApiError.bad_request("the podman kubelet runs real containers: simulated pod actions are not "
                                   "available (stop or kill the container with podman instead)")

    def stop(self):
        super().stop()
        with self.workers_lock:
            workers = list(self.workers.values())
        for w in workers:
            w.events.put(("kill",))
        for w in workers:
            w.join(timeout=60)
        self.podman.run("pod", "rm", "-f", "-t", "0", self.anchor, check=False)
        p = self.podman.run("pod", "ls", "--filter", "label=%s=%s" % (LABEL, self.id), "--format", "{{.Name}}",
                            check=False)
        for name in (p.stdout or "").split():
            self.podman.run("pod", "rm", "-f", "-t", "0", name, check=False)
        self.podman.run("network", "rm", "-f", self.network, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def container_name(self, ns, pod, container):
        """The podman name of a container's current run (tests kill or inspect it)."""
        with self.workers_lock:
            for w in self.workers.values():
                if (w.ns, w.name) == (ns, pod):
                    for c in w.ctrs:
                        if c.name == container:
                            return c.podman_name
        return None
