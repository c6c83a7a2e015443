"""FakeApiServer: the server object tests use (start/stop/url), its listeners (TLS, the podman
gateway), tokens, the request log, open watches, the kubelet, and the control API's state."""

import collections
import copy
import itertools
import os
import socket
import ssl
import threading
import time

from .control import Faults
from .errors import ApiError
from .handler import Handler, _HTTPServer
from .kubelet import Kubelet
from .kueue import Kueue
from .schemas import require
from .store import Store
from .util import rfc3339


class FakeApiServer:
    def __init__(self, host="127.0.0.1", port=0, tls_cert=None, tls_key=None, client_ca=None, tokens=None,
                 kubelet="auto", watch_cache_size=1000, bookmark_interval=1.0, nodes=4, run_delay_ms=0,
                 server_version="v1.32.0", min_request_timeout=1800, verbose=False, workload_api=()):
        if kubelet not in ("auto", "manual", "podman"):
            raise ValueError("kubelet must be auto, manual or podman")
        self.host, self.port = host, port
        self.tls_cert, self.tls_key, self.client_ca = tls_cert, tls_key, client_ca
        self.tokens = set(tokens or [])
        self.kubelet_mode, self.run_delay_ms = kubelet, run_delay_ms
        self.watch_cache_size = max(1, int(watch_cache_size))
        self.bookmark_interval = float(bookmark_interval)
        self.server_version, self.min_request_timeout = server_version, min_request_timeout
        self.verbose = verbose
        self.faults = Faults()
        self.requests = collections.deque(maxlen=100000)
        # A Condition so that reading the request log can wait for requests still being answered:
        # a client may see its response before the handler gets to log it.
        self.req_lock = threading.Condition()
        self.in_flight = 0
        self.conn_lock = threading.Lock()
        self.connections = set()
        self.open_watches = set()
        self.cluster_ips = itertools.count(1)
        self.root_ca_pem = None
        self.store = Store(self)
        self.store.registry.serve_workload_api(workload_api)
        self.kueue = Kueue(self)
        self.gateway_httpd = None
        if kubelet == "podman":
            # Pods run as real containers (podman_kubelet.py). They reach the API server at the
            # pod network's gateway, over TLS as in-cluster clients require, with a certificate
            # made here for both addresses unless one was given.
            from podman_kubelet import make_kubelet_class
            self.kubelet = make_kubelet_class(Kubelet)(self, nodes)
            self.kubelet_mode = "auto"
            if not self.tls_cert:
                self.tls_cert, self.tls_key = self._self_signed(self.kubelet.root, ["127.0.0.1", self.kubelet.gateway])
            with open(self.tls_cert) as f:
                self.root_ca_pem = f.read()
        else:
            self.kubelet = Kubelet(self, nodes)
        self.httpd = None
        self.thread = None
        self._seed_cluster()

    # ---- lifecycle ------------------------------------------------------------
    @staticmethod
    def _self_signed(directory, ips):
        cert, key = os.path.join(directory, "apiserver.crt"), os.path.join(directory, "apiserver.key")
        import subprocess
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=fake-apiserver",
                        "-addext", "subjectAltName=" + ",".join(["IP:" + ip for ip in ips] +
                                                               ["DNS:kubernetes.default.svc", "DNS:localhost"])],
                       check=True, capture_output=True)
        return cert, key

    def _listen(self, host, port):
        httpd = _HTTPServer((host, port), Handler, bind_and_activate=True)
        httpd.fake = self
        if self.tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
            ctx.set_alpn_protocols(["http/1.1"])
            if self.client_ca:
                ctx.load_verify_locations(self.client_ca)
                ctx.verify_mode = ssl.CERT_OPTIONAL
            httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                         name="fake-apiserver-%s" % host, daemon=True).start()
        return httpd

    def start(self):
        self.httpd = self._listen(self.host, self.port)
        self.address = self.httpd.server_address[:2]
        if self.kubelet.gateway:
            # The pods' way in: the pod network's gateway only, not every address of the host.
            self.gateway_httpd = self._listen(self.kubelet.gateway, 0)
            self.kubelet.api_port = self.gateway_httpd.server_address[1]
        self.kubelet.start()
        return self

    @property
    def url(self):
        scheme = "https" if self.tls_cert else "http"
        return "%s://%s:%d" % (scheme, self.address[0], self.address[1])

    def stop(self):
        if self.httpd is None:
            return
        self.httpd.shutdown()
        if self.gateway_httpd is not None:
            self.gateway_httpd.shutdown()
            self.gateway_httpd.server_close()
        self.kubelet.stop()
        self.kueue.stop()
        self.drop_watches()
        with self.conn_lock:
            conns = list(self.connections)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.httpd.server_close()
        self.httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- cluster state --------------------------------------------------------------
    def _seed_cluster(self):
        st, reg = self.store, self.store.registry
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            st.create(reg.get("", "v1", "namespaces"), None, {"metadata": {"name": ns}})
        for node, ip in self.kubelet.node_ips.items():
            st.create(reg.get("", "v1", "nodes"), None, {
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux"}},
                "spec": {},
                "status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": node}],
                           "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                           "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "message": "kubelet is posting ready status",
                                           "lastHeartbeatTime": rfc3339(), "lastTransitionTime": rfc3339()}],
                           "nodeInfo": {"kubeletVersion": self.server_version, "architecture": "amd64",
                                        "operatingSystem": "linux", "containerRuntimeVersion": "containerd://1.7.0",
                                        "kernelVersion": "6.1.0", "osImage": "fake", "kubeProxyVersion": "",
                                        "machineID": "", "systemUUID": "", "bootID": ""}}})

    def next_cluster_ip(self):
        return next(self.cluster_ips)

    def set_tokens(self, tokens):
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ApiError.bad_request("tokens must be a list of strings")
        self.tokens = set(tokens)

    def log_request(self, method, path, query, code, t0, watch, counted=False):
        with self.req_lock:
            self.requests.append({"method": method, "path": path, "query": query, "code": code,
                                  "time": t0, "durationMs": round((time.time() - t0) * 1000, 3), "watch": watch})
            if counted:
                self.in_flight -= 1
                self.req_lock.notify_all()

    def register_watch(self, w):
        with self.conn_lock:
            self.open_watches.add(w)

    def unregister_watch(self, w):
        with self.conn_lock:
            self.open_watches.discard(w)

    def drop_watches(self):
        with self.store.lock:
            ws = list(self.store.watchers)
            self.store.watchers.clear()
        for w in ws:
            w.signal(dropped=True)
            try:
                w.conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def expire_watches(self):
        with self.store.lock:
            ws = list(self.store.watchers)
            self.store.watchers.clear()
        for w in ws:
            w.signal(expired=True)

    def configure(self, body):
        k = self.kubelet
        if "kubelet" in body:
            if body["kubelet"] not in ("auto", "manual") or k.gateway:
                raise ApiError.bad_request("kubelet must be auto or manual (a podman kubelet stays one)")
            k.mode = self.kubelet_mode = body["kubelet"]
        if "runDelayMs" in body:
            k.run_delay_ms = self.run_delay_ms = max(0, int(body["runDelayMs"]))
        if "terminationDelayMs" in body:
            k.termination_delay_ms = max(0, int(body["terminationDelayMs"]))
        if "bookmarkIntervalMs" in body:
            self.bookmark_interval = max(0.01, int(body["bookmarkIntervalMs"]) / 1000.0)
        if "probeReadyDefault" in body:
            k.probe_ready_default = bool(body["probeReadyDefault"])
        if "watchCacheSize" in body:
            with self.store.lock:
                self.watch_cache_size = self.store.cache_size = max(1, int(body["watchCacheSize"]))
        if "podNetwork" in body:
            if body["podNetwork"] not in ("cluster", "loopback"):
                raise ApiError.bad_request("podNetwork must be cluster or loopback")
            k.pod_network = body["podNetwork"]
        if "validateGroups" in body:
            groups = body["validateGroups"]
            if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                raise ApiError.bad_request("validateGroups must be a list of API groups")
            if groups:
                require("jsonschema")
            with self.store.lock:
                self.store.schemas.validate_groups = set(groups)
        if "kueue" in body:
            self._configure_kueue(body["kueue"])

    def _configure_kueue(self, value):
        """true: on, CRDs from $FLEET_KUEUE_CRDS; {"crds": DIR}: on, CRDs from DIR; false: the
        admission loop stops (the CRDs and their validation stay)."""
        if value is False:
            self.kueue.disable()
        elif value is True:
            self.kueue.enable()
        elif isinstance(value, dict) and set(value) <= {"crds"} and isinstance(value.get("crds", ""), str):
            self.kueue.enable(value.get("crds"))
        else:
            raise ApiError.bad_request('kueue must be true, false or {"crds": DIR}')

    def config(self):
        k = self.kubelet
        return {"kubelet": k.mode, "runDelayMs": k.run_delay_ms, "terminationDelayMs": k.termination_delay_ms,
                "bookmarkIntervalMs": int(self.bookmark_interval * 1000), "probeReadyDefault": k.probe_ready_default,
                "watchCacheSize": self.store.cache_size, "podNetwork": k.pod_network, "nodes": dict(k.node_ips),
                "podGateway": k.gateway, "caCert": self.tls_cert if k.gateway else None,
                "validateGroups": sorted(self.store.schemas.validate_groups), "kueue": self.kueue.enabled}

    def append_log(self, ns, name, body):
        text = body.get("text", "")
        if not isinstance(text, str):
            raise ApiError.bad_request("text must be a string")
        st = self.store
        with st.lock:
            pods = st.registry.get("", "v1", "pods")
            pod = st._find(pods, ns, name)
            if pod is None:
                raise ApiError.not_found(pods, name)
            names = [c["name"] for c in (pod["spec"].get("containers") or []) +
                     (pod["spec"].get("initContainers") or [])]
            cname = body.get("container") or names[0]
            if cname not in names:
                raise ApiError.bad_request("container %s is not valid for pod %s" % (cname, name))
            key = (ns, name, cname)
            if body.get("replace"):
                st.logs[key] = []
            now = time.time()
            lines = st.logs.setdefault(key, [])
            for line in text.splitlines(keepends=True):
                lines.append((now, line))
            st.changed.notify_all()

    def seed(self, body):
        path = body.get("path", "")
        parts = [p for p in path.split("/") if p]
        ns = None
        if parts and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError.bad_request("bad path")
        if len(rest) == 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        with self.store.lock:
            rt = self.store.registry.get(group, version, rest[0] if rest else "")
            if rt is None:
                raise ApiError.path_not_found()
            count, prefix = int(body.get("count", 1)), body.get("namePrefix", "seed-")
            tmpl = body.get("template") or {}
            start = int(body.get("start", 0))
            for i in range(start, start + count):
                obj = copy.deepcopy(tmpl)
                obj.setdefault("metadata", {})["name"] = "%s%d" % (prefix, i)
                self.store.create(rt, ns, obj)
            return {"created": count, "resourceVersion": str(self.store.rv)}
