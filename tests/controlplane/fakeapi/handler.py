"""The HTTP layer: the threading HTTP server and the request Handler (body limits, authentication,
faults, routing of the Kubernetes API and discovery, objects and lists as JSON or Tables)."""

import collections
import json
import re
import select
import socket
import ssl
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .control import ControlApi
from .errors import ApiError, REASONS, required, status_body
from .logs import PodLogs
from .resources import openapi_v2_protobuf
from .tables import table_for
from .util import MAX_BODY, dumps, parse_bool
from .watch import HandlerWatches


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        if self.fake.verbose:
            super().handle_error(request, client_address)


class Handler(HandlerWatches, PodLogs, ControlApi, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"
    sys_version = ""
    timeout = 300

    # ---- plumbing ---------------------------------------------------------
    def setup(self):
        try:
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
        super().setup()
        self.fake = self.server.fake
        with self.fake.conn_lock:
            self.fake.connections.add(self.request)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        with self.fake.conn_lock:
            self.fake.connections.discard(self.request)

    def log_message(self, fmt, *args):
        if self.fake.verbose:
            sys.stderr.write("fake-apiserver: " + (fmt % args) + "\n")

    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _raw_write(self, data):
        self.wfile.write(data)

    def send_body(self, code, body, ctype="application/json", headers=None):
        if isinstance(body, (dict, list)):
            data = (dumps(body) + "\n").encode()
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = body
        mal = getattr(self, "malform", None)
        self.malform = None
        abort = False
        if mal:
            kind = mal["kind"]
            if kind == "truncate":
                cut = data[:max(1, len(data) // 2)]
                if mal["abort"]:
                    abort = True
                else:
                    data = cut
            elif kind == "garbage":
                code, ctype, data = 200, "application/json", b"\x00\xff<<garbage}}\x9c not json at all {{["
            elif kind == "huge":
                return self._send_huge(mal["bytes"])
            elif kind == "wrongct":
                code, ctype = 200, "text/html; charset=utf-8"
                data = b"<html><head><title>502 Bad Gateway</title></head><body>proxy error</body></html>\n"
        self.status_code = code
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(data)))
        if getattr(self, "force_close", False):
            self.send_header("Connection", "close")
            self.close_connection = True
        if self.command == "HEAD":
            self.end_headers()
        elif abort:
            self.end_headers()
            self._raw_write(data[:max(1, len(data) // 2)])
            self._abort()
        else:
            # headers and body in one write: no Nagle / delayed-ACK stall
            self._headers_buffer.append(b"\r\n")
            self._headers_buffer.append(data)
            self.flush_headers()

    def _send_huge(self, n):
        self.status_code = 200
        head = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","padding":"'
        tail = b'"}'
        n = max(n, len(head) + len(tail))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        self._raw_write(head)
        left = n - len(head) - len(tail)
        chunk = b"x" * 65536
        while left > 0:
            self._raw_write(chunk[:min(left, 65536)])
            left -= min(left, 65536)
        self._raw_write(tail)

    def _client_gone(self):
        """True when the peer has closed the connection (peeks at the raw socket)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return socket.socket.recv(self.connection, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except (OSError, ValueError):
            return True

    def _abort(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def send_error_status(self, e):
        self.send_body(e.code, e.body(), headers=e.headers)

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            data = bytearray()
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                if len(data) + size > MAX_BODY:
                    self.force_close = True
                    raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_BODY)
                data += self.rfile.read(size)
                self.rfile.readline(3)
            return bytes(data)
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        try:
            n = int(length)
        except ValueError:
            self.force_close = True
            raise ApiError.bad_request("invalid Content-Length")
        if n > MAX_BODY:
            if n <= 64 * 1024 * 1024:
                left = n
                while left > 0:
                    got = self.rfile.read(min(left, 1 << 20))
                    if not got:
                        break
                    left -= len(got)
            else:
                self.force_close = True
            raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is %d" % MAX_BODY)
        return self.rfile.read(n)

    def json_body(self, raw):
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError.bad_request("the body of the request was in an unknown format: %s" % e)

    # ---- main dispatch ------------------------------------------------------
    def dispatch(self):
        t0 = time.time()
        self.status_code = 0
        self.malform = None
        self.force_close = False
        self.is_watch = False
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        fake = self.fake
        try:
            try:
                raw = self.read_body()
            except ApiError as e:
                self.send_error_status(e)
                return
            if path.startswith("/fake/"):
                return self.control(path, raw)
            with fake.req_lock:
                fake.in_flight += 1
            counted = True
            try:
                if fake.faults.latency_ms:
                    time.sleep(fake.faults.latency_ms / 1000.0)
                if not self.authenticated():
                    raise ApiError(401, "Unauthorized", "Unauthorized")
                self.is_watch = self.command == "GET" and self._wants_watch(path, params)
                if self.is_watch:  # a watch lasts long: the log must not wait for it
                    with fake.req_lock:
                        fake.in_flight -= 1
                        fake.req_lock.notify_all()
                    counted = False
                rule = fake.faults.take(self.command, path, self.is_watch)
                if rule and rule["kind"] == "fail":
                    raise _injected_failure(rule)
                self.malform = rule
                self.route(path, params, raw)
            except ApiError as e:
                self.send_error_status(e)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout):
                self.close_connection = True
            except Exception as e:  # a bug in the fake must still answer like a server
                import traceback
                traceback.print_exc()
                try:
                    self.send_body(500, status_body(500, "InternalError", "Internal error occurred: %r" % (e,)))
                except OSError:
                    self.close_connection = True
            finally:  # always logged (and uncounted), even when the client went away mid-answer
                fake.log_request(self.command, path, url.query, self.status_code, t0, self.is_watch, counted)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def authenticated(self):
        tokens = self.fake.tokens
        if not tokens:
            return True
        if isinstance(self.request, ssl.SSLSocket) and self.fake.client_ca:
            try:
                if self.request.getpeercert():
                    return True
            except (ValueError, ssl.SSLError):
                pass
        auth = self.headers.get("Authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip() in tokens
        return False

    @staticmethod
    def _wants_watch(path, params):
        if "/watch/" in path:
            return True
        try:
            return parse_bool(params.get("watch"))
        except ApiError:
            return False

    def route(self, path, params, raw):
        """Answers a request outside /fake/: the server's own paths, discovery, or a verb on a
        resource's path (a watch, or one of _VERBS)."""
        if self.command not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise ApiError.not_allowed()
        parts = [urllib.parse.unquote(p) for p in path.split("/") if p]
        if self._serve_server_path(parts):
            return
        store = self.fake.store
        with store.lock:
            if self._serve_discovery(parts):
                return
        target = self._resource_path(*_split_api_path(parts))
        if target.legacy_watch or (self.command == "GET" and target.sub is None
                                   and parse_bool(params.get("watch"))):
            return self._watch(target, params)
        return self._VERBS[self.command](self, target, params, raw)

    def _serve_server_path(self, parts):
        """The server's own paths: /, health, /version, /openapi. -> False for any other path."""
        fake = self.fake
        if not parts:
            self.send_body(200, {"paths": ["/api", "/api/v1", "/apis", "/version", "/openapi/v2"]})
        elif parts[0] in ("healthz", "livez", "readyz") and len(parts) == 1:
            self.send_body(200, "ok", "text/plain; charset=utf-8")
        elif parts == ["version"]:
            major, minor = re.match(r"v(\d+)\.(\d+)", fake.server_version).groups()
            self.send_body(200, {"major": major, "minor": minor, "gitVersion": fake.server_version,
                                 "gitCommit": "0" * 40, "gitTreeState": "clean",
                                 "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.0",
                                 "compiler": "gc", "platform": "linux/amd64"})
        elif parts == ["openapi", "v2"]:
            if "protobuf" in self.headers.get("Accept", ""):
                self.send_body(200, openapi_v2_protobuf(fake.server_version),
                               "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
            else:
                self.send_body(200, {"swagger": "2.0", "info": {"title": "Kubernetes", "version": fake.server_version},
                                     "paths": {}, "definitions": {}})
        elif parts[0] == "openapi":
            raise ApiError.path_not_found()
        else:
            return False
        return True

    def _serve_discovery(self, parts):
        """Under the store lock, API discovery: /api, /apis, /apis/GROUP and each group version's
        resource list. -> False for a resource's path."""
        reg = self.fake.store.registry
        if parts == ["api"]:
            self.send_body(200, {"kind": "APIVersions", "versions": ["v1"],
                                 "serverAddressByClientCIDRs": [
                                     {"clientCIDR": "0.0.0.0/0", "serverAddress": "%s:%d" % self.fake.address}]})
        elif parts == ["apis"]:
            self.send_body(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                 "groups": [self._group_doc(g) for g in reg.groups()]})
        elif parts[0] == "apis" and len(parts) == 2:
            if not reg.versions(parts[1]):
                raise ApiError.path_not_found()
            doc = self._group_doc(parts[1])
            doc.update(kind="APIGroup", apiVersion="v1")
            self.send_body(200, doc)
        else:
            group, version, rest = _split_api_path(parts)
            if rest:
                return False
            rts = reg.gv_resources(group, version)
            if not rts:
                raise ApiError.path_not_found()
            self.send_body(200, {"kind": "APIResourceList", "apiVersion": "v1",
                                 "groupVersion": group + "/" + version if group else version,
                                 "resources": [d for rt in rts for d in rt.discovery()]})
        return True

    def _resource_path(self, group, version, rest):
        """[watch/][namespaces/NS/]PLURAL[/NAME[/SUBRESOURCE]] -> _ResourcePath, or 404 for a path
        this resource does not have."""
        legacy_watch = rest[0] == "watch"
        if legacy_watch:
            rest = rest[1:]
        ns = None
        # namespaces/NAME/status and /finalize are the namespace's own subresources, not a namespace prefix
        if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError.path_not_found()
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        store = self.fake.store
        with store.lock:
            rt = store.registry.get(group, version, plural)
        if rt is None or (not rt.namespaced and ns is not None) or \
                (rt.namespaced and ns is None and name is not None):
            raise ApiError.path_not_found()
        if sub is not None and sub not in rt.subresources:
            raise ApiError.path_not_found()
        if name is not None and rt.namespaced is False:
            ns = None
        return _ResourcePath(rt, ns, name, sub, legacy_watch)

    # ---- the verbs on a resource's path (target: a _ResourcePath) ------------
    def _watch(self, target, params):
        if self.command != "GET" or target.sub is not None:
            raise ApiError.not_allowed()
        if target.name is not None:   # watching one object is a watch of its name's field selector
            sel = "metadata.name=" + target.name
            params["fieldSelector"] = params["fieldSelector"] + "," + sel if params.get("fieldSelector") else sel
        return self.serve_watch(target.rt, target.ns, params)

    def _get(self, target, params, raw):
        rt, ns, name, store = target.rt, target.ns, target.name, self.fake.store
        if name is None:
            items, list_meta = store.list(rt, ns, params)
            return self.send_object_list(rt, items, list_meta)
        if target.sub == "log":
            return self.serve_log(ns, name, params)
        return self.send_object(rt, 200, store.get(rt, ns, name))

    def _post(self, target, params, raw):
        rt, ns, name, store = target.rt, target.ns, target.name, self.fake.store
        dry_run = params.get("dryRun") == "All"
        if name is None:
            if rt.namespaced and ns is None:
                raise ApiError.not_allowed()
            obj = store.create(rt, ns, self.json_body(raw), dry_run)
            return self.send_object(rt, 201, obj)
        if target.sub == "binding":
            return self.pod_binding(rt, ns, name, self.json_body(raw) or {})
        if target.sub == "eviction":
            body = self.json_body(raw) or {}
            store.delete(rt, ns, name, body.get("deleteOptions") or {}, dry_run)
            return self.send_body(201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                        "status": "Success", "code": 201})
        raise ApiError.not_allowed()

    def _put_or_patch(self, target, params, raw):
        rt, ns, name, store = target.rt, target.ns, target.name, self.fake.store
        if name is None or target.sub in ("log", "binding", "eviction"):
            raise ApiError.not_allowed()
        dry_run = params.get("dryRun") == "All"
        sr = "status" if target.sub == "status" else None
        if self.command == "PUT":
            obj = store.update(rt, ns, name, self.json_body(raw), sr, dry_run)
        else:
            obj = store.patch(rt, ns, name, raw, self.headers.get("Content-Type"), sr, dry_run)
        return self.send_object(rt, 200, obj)

    def _delete(self, target, params, raw):
        rt, ns, name, store = target.rt, target.ns, target.name, self.fake.store
        opts = self._delete_options(params, raw)
        if name is None:
            out = store.delete_collection(rt, ns, params, opts)
            with store.lock:
                meta = {"resourceVersion": str(store.rv)}
            return self.send_object_list(rt, out, meta)
        if target.sub is not None:
            raise ApiError.not_allowed()
        obj = store.delete(rt, ns, name, opts, params.get("dryRun") == "All")
        return self.send_object(rt, 200, obj)

    def _delete_options(self, params, raw):
        """DeleteOptions from the body, overridden by the query's propagationPolicy,
        gracePeriodSeconds and orphanDependents."""
        body = self.json_body(raw) or {}
        if not isinstance(body, dict):
            raise ApiError.bad_request("DeleteOptions must be an object")
        opts = dict(body)
        if "propagationPolicy" in params:
            opts["propagationPolicy"] = params["propagationPolicy"]
        if "gracePeriodSeconds" in params:
            try:
                opts["gracePeriodSeconds"] = int(params["gracePeriodSeconds"])
            except ValueError:
                raise ApiError.bad_request("invalid gracePeriodSeconds")
        if "orphanDependents" in params:
            opts["orphanDependents"] = parse_bool(params["orphanDependents"])
        return opts

    _VERBS = {"GET": _get, "POST": _post, "PUT": _put_or_patch, "PATCH": _put_or_patch, "DELETE": _delete}

    def _group_doc(self, g):
        vs = self.fake.store.registry.versions(g)
        gvs = [{"groupVersion": g + "/" + v, "version": v} for v in vs]
        return {"name": g, "versions": gvs, "preferredVersion": gvs[0]}

    def _wants_table(self):
        return "as=Table" in self.headers.get("Accept", "")

    @staticmethod
    def out_obj(rt, obj):
        if rt.custom and obj.get("apiVersion") != rt.api_version:
            obj = dict(obj, apiVersion=rt.api_version)
        return obj

    def send_object(self, rt, code, obj):
        if self._wants_table() and self.command == "GET":
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            return self.send_body(code, table_for(rt, [obj], self._include(), meta))
        self.send_body(code, self.out_obj(rt, obj))

    def _include(self):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        return (q.get("includeObject") or ["Metadata"])[-1]

    def send_object_list(self, rt, items, list_meta):
        if self._wants_table() and self.command == "GET":
            return self.send_body(200, table_for(rt, items, self._include(), list_meta))
        if rt.custom:
            out = [self.out_obj(rt, o) for o in items]
        else:
            out = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        self.send_body(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": list_meta,
                             "items": out})

    def pod_binding(self, rt, ns, name, body):
        if rt.storage_key != "/pods":
            raise ApiError.not_allowed()
        node = (body.get("target") or {}).get("name")
        if not node:
            raise ApiError.invalid(rt, name, [required("target.name")])
        store = self.fake.store
        with store.lock:
            pod = store._find(rt, ns, name)
            if pod is None:
                raise ApiError.not_found(rt, name)
            self.fake.kubelet.bind(pod, node)
        self.send_body(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                             "code": 201})


# A resource's request path: its type, namespace (None when cluster-scoped or a list across
# namespaces), name and subresource (None when absent), and whether it was the old /watch/ form.
_ResourcePath = collections.namedtuple("_ResourcePath", "rt ns name sub legacy_watch")


def _split_api_path(parts):
    """/api/VERSION/REST... or /apis/GROUP/VERSION/REST... -> (group, version, REST parts)."""
    if parts[0] == "api" and len(parts) >= 2:
        return "", parts[1], parts[2:]
    if parts[0] == "apis" and len(parts) >= 3:
        return parts[1], parts[2], parts[3:]
    raise ApiError.path_not_found()


def _injected_failure(rule):
    """The error a "fail" fault answers: the API server's own message, details and Retry-After
    for its code (429 says when to retry even when the rule does not)."""
    code = rule["code"]
    reason = REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
    msg = {429: "Too many requests, please try again later.",
           503: "The server is currently unable to handle the request",
           500: "Internal error occurred: injected fault",
           504: "The server was unable to return a response in the time allotted, but may "
                "still be processing the request"}.get(code, "injected fault")
    headers, details = {}, None
    ra = rule.get("retryAfter")
    if code == 429 and ra is None:
        ra = 1
    if ra is not None and code in (429, 503):
        headers["Retry-After"] = str(int(ra))
        details = {"retryAfterSeconds": int(ra)}
    if code == 500:
        details = {"causes": [{"message": "injected fault"}]}
    return ApiError(code, reason, msg, details, headers)
