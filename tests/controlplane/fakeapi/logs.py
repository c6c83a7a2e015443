"""Pod logs (mixed into Handler): GET pods/NAME/log (container, previous, follow,
tailLines, sinceSeconds, limitBytes, timestamps)."""

import time

from .errors import ApiError
from .util import parse_bool, rfc3339nano


class PodLogs:
    """Serving pod logs; part of Handler."""

    def serve_log(self, ns, name, params):
        store = self.fake.store
        rt = store.registry.get("", "v1", "pods")
        opts = _log_options(params)
        with store.lock:
            pod = store._find(rt, ns, name)
            if pod is None:
                raise ApiError.not_found(rt, name)
            cname, cs = _log_container(pod, name, params.get("container"))
            key = (ns, name, cname)
            follow = opts.follow and not opts.previous   # a previous run's log is complete
            if opts.previous:
                if key not in store.prev_logs:
                    raise ApiError.bad_request('previous terminated container "%s" in pod "%s" not found'
                                               % (cname, name))
                lines = list(store.prev_logs[key])
            else:
                lines = list(store.logs.get(key, []))
            # The tail of a followed log starts after this snapshot, and it ends with the container's run.
            run = _FollowedRun(rt, key, pod["metadata"]["uid"], (cs or {}).get("restartCount", 0), len(lines))
        if opts.since is not None:
            cutoff = time.time() - opts.since
            lines = [x for x in lines if x[0] >= cutoff]
        if opts.tail is not None:
            lines = lines[-opts.tail:] if opts.tail > 0 else []
        data = opts.format(lines)
        if opts.limit is not None:
            data = data[:opts.limit]
        if not follow:
            return self.send_body(200, data, "text/plain")
        self._follow_log(run, opts, data)

    def _follow_log(self, run, opts, data):
        """Streams `data`, then the lines the container writes, chunked, until its run ends, the
        client goes away or limitBytes is sent."""
        store = self.fake.store
        self.status_code = 200
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = len(data)
        try:
            if data:
                self._chunk(data)
            while opts.limit is None or sent < opts.limit:
                with store.changed:
                    new, done = run.poll(store)
                    if not new and not done:
                        if not store.changed.wait(0.5) and self._client_gone():
                            break
                        continue
                if new:
                    chunk = opts.format(new)
                    if opts.limit is not None:
                        chunk = chunk[:opts.limit - sent]
                    sent += len(chunk)
                    self._chunk(chunk)
                if done and not new:
                    break
            self._raw_write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True


class _LogOptions:
    def __init__(self, follow, previous, timestamps, tail, limit, since):
        self.follow, self.previous, self.timestamps = follow, previous, timestamps
        self.tail, self.limit, self.since = tail, limit, since

    def format(self, entries):
        """(time, text) lines as the log's bytes, each prefixed with its time when asked for."""
        return b"".join(((rfc3339nano(t) + " ") if self.timestamps else "").encode() + text.encode()
                        for t, text in entries)


def _log_options(params):
    follow, previous = parse_bool(params.get("follow")), parse_bool(params.get("previous"))
    timestamps = parse_bool(params.get("timestamps"))
    try:
        tail = int(params["tailLines"]) if params.get("tailLines") else None
        limit = int(params["limitBytes"]) if params.get("limitBytes") else None
        since = int(params["sinceSeconds"]) if params.get("sinceSeconds") else None
    except ValueError:
        raise ApiError.bad_request("invalid log options")
    return _LogOptions(follow, previous, timestamps, tail, limit, since)


def _log_container(pod, name, cname):
    """-> (the container whose log is asked for, its status), or the API server's 400 when the
    name is missing (and ambiguous), unknown, or the container has not started yet."""
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    all_names = names + [c["name"] for c in pod["spec"].get("initContainers") or []]
    if not cname:
        if len(names) != 1:
            raise ApiError.bad_request("a container name must be specified for pod %s, choose one of: "
                                       "[%s]" % (name, " ".join(names)))
        cname = names[0]
    if cname not in all_names:
        raise ApiError.bad_request("container %s is not valid for pod %s" % (cname, name))
    if not pod["spec"].get("nodeName"):
        raise ApiError.bad_request("pod %s does not have a host assigned" % name)
    st = pod.get("status", {})
    cs = next((s for s in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or [])
               if s["name"] == cname), None)
    state = (cs or {}).get("state", {})
    if cs is None or ("waiting" in state and not cs.get("restartCount")):
        reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
        raise ApiError.bad_request('container "%s" in pod "%s" is waiting to start: %s' % (cname, name, reason))
    return cname, cs


class _FollowedRun:
    """One run of a container whose log is followed: its pod's uid and restart count tell when the
    run is over; `seen` counts the log lines already sent (or skipped)."""

    def __init__(self, rt, key, uid, restarts, seen):
        self.rt, self.key, self.uid, self.restarts, self.seen = rt, key, uid, restarts, seen

    def poll(self, store):
        """Under the store lock: -> (the lines written since the last poll, whether the run ended)."""
        ns, name, cname = self.key
        pod = store._find(self.rt, ns, name)
        cur = store.logs.get(self.key, []) if pod is not None and pod["metadata"]["uid"] == self.uid else []
        new = cur[self.seen:] if len(cur) >= self.seen else []
        self.seen = len(cur)
        now_cs = next((s for s in (pod or {}).get("status", {}).get("containerStatuses") or []
                       if s["name"] == cname), {}) if pod is not None else {}
        done = pod is None or pod["metadata"]["uid"] != self.uid or \
            pod["status"].get("phase") in ("Succeeded", "Failed") or \
            now_cs.get("restartCount", 0) != self.restarts
        return new, done
