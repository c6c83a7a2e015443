"""The command line: fake_apiserver.py's flags, the ready file, and SIGTERM/SIGINT handling."""

import argparse
import os
import signal
import sys
import threading

from .server import FakeApiServer


def main(argv=None):
    ap = argparse.ArgumentParser(description="Fake Kubernetes API server with a kubelet stand-in (tests only)")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0 = ephemeral)")
    ap.add_argument("--ready-file", help="written atomically with the URL once serving")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--client-ca", help="accept client certificates signed by this CA as authenticated")
    ap.add_argument("--token", action="extend", nargs="+", default=[],
                    help="accepted bearer token(s); repeatable; none = no authentication")
    ap.add_argument("--kubelet", choices=("auto", "manual", "podman"), default="auto",
                    help="podman: run pods as real containers (podman_kubelet.py; root, podman, runc)")
    ap.add_argument("--watch-cache-size", type=int, default=1000, help="watch history per resource type")
    ap.add_argument("--bookmark-interval", type=float, default=1.0, help="seconds between BOOKMARK events")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--run-delay-ms", type=int, default=0, help="delay between scheduling and Running")
    ap.add_argument("--server-version", default="v1.32.0")
    ap.add_argument("--workload-api", action="append", default=[], choices=("v1alpha1", "v1alpha2"),
                    help="serve scheduling.k8s.io Workloads (and PodGroups from v1alpha2) in this version; repeatable")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if bool(args.tls_cert) != bool(args.tls_key):
        ap.error("--tls-cert and --tls-key go together")
    srv = FakeApiServer(host.strip("[]") or "127.0.0.1", int(port), args.tls_cert, args.tls_key, args.client_ca,
                        args.token, args.kubelet, args.watch_cache_size, args.bookmark_interval, args.nodes,
                        args.run_delay_ms, args.server_version, verbose=args.verbose,
                        workload_api=args.workload_api)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    srv.start()
    if args.ready_file:
        tmp = args.ready_file + ".tmp.%d" % os.getpid()
        with open(tmp, "w") as f:
            f.write(srv.url + "\n")
        os.replace(tmp, args.ready_file)
    sys.stderr.write("fake-apiserver: serving on %s\n" % srv.url)
    while not stop.wait(0.5):
        pass
    srv.stop()
    return 0
