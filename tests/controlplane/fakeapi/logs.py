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
        follow = parse_bool(params.get("follow"))
        previous = parse_bool(params.get("previous"))
        timestamps = parse_bool(params.get("timestamps"))
        try:
            tail = int(params["tailLines"]) if params.get("tailLines") else None
            limit = int(params["limitBytes"]) if params.get("limitBytes") else None
            since = int(params["sinceSeconds"]) if params.get("sinceSeconds") else None
        except ValueError:
            raise ApiError.bad_request("invalid log options")
        with store.lock:
            pod = store._find(rt, ns, name)
            if pod is None:
                raise ApiError.not_found(rt, name)
            uid = pod["metadata"]["uid"]
            names = [c["name"] for c in pod["spec"].get("containers") or []]
            all_names = names + [c["name"] for c in pod["spec"].get("initContainers") or []]
            cname = params.get("container")
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
                raise ApiError.bad_request('container "%s" in pod "%s" is waiting to start: %s'
                                           % (cname, name, reason))
            key = (ns, name, cname)
            if previous:
                if key not in store.prev_logs:
                    raise ApiError.bad_request('previous terminated container "%s" in pod "%s" not found'
                                               % (cname, name))
                lines = list(store.prev_logs[key])
                follow = False
            else:
                lines = list(store.logs.get(key, []))
            seen = len(lines)  # counted with the snapshot: a line appended after it must be followed
            restarts = (cs or {}).get("restartCount", 0)  # a followed log ends with its container's run
        if since is not None:
            cutoff = time.time() - since
            lines = [x for x in lines if x[0] >= cutoff]
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []

        def fmt(entries):
            return b"".join(((rfc3339nano(t) + " ") if timestamps else "").encode() + text.encode()
                            for t, text in entries)
        data = fmt(lines)
        if limit is not None:
            data = data[:limit]
        if not follow:
            return self.send_body(200, data, "text/plain")
        self.status_code = 200
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = len(data)
        try:
            if data:
                self._chunk(data)
            while limit is None or sent < limit:
                with store.changed:
                    pod = store._find(rt, ns, name)
                    cur = store.logs.get(key, []) if pod is not None and pod["metadata"]["uid"] == uid else []
                    new = cur[seen:] if len(cur) >= seen else []
                    seen = len(cur)
                    now_cs = next((s for s in (pod or {}).get("status", {}).get("containerStatuses") or []
                                   if s["name"] == cname), {}) if pod is not None else {}
                    done = pod is None or pod["metadata"]["uid"] != uid or \
                        pod["status"].get("phase") in ("Succeeded", "Failed") or \
                        now_cs.get("restartCount", 0) != restarts
                    if not new and not done:
                        if not store.changed.wait(0.5) and self._client_gone():
                            break
                        continue
                if new:
                    chunk = fmt(new)
                    if limit is not None:
                        chunk = chunk[:limit - sent]
                    sent += len(chunk)
                    self._chunk(chunk)
                if done and not new:
                    break
            self._raw_write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
