"""The fake Kubernetes API server, a module per concern (standard library only,
but for schemas and kueue: python3-jsonschema, python3-yaml).

tests/controlplane/fake_apiserver.py is the entry point: it runs main() as a
script and re-exports FakeApiServer and ApiError to tests; its docstring
describes what is served.  Modules, from the bottom up:

  util        timestamps, compact JSON, query booleans, version ordering
  errors      ApiError and Status bodies, the causes of 422 Invalid
  validation  names, labels and metadata; pod defaults and validation; CRDs
  selectors   label and field selectors
  patches     JSON merge, strategic merge and JSON patch
  resources   ResourceType, the built-in types, the Registry (CRDs add
              groups), the minimal OpenAPI v2 document
  store       Store: objects, the resourceVersion counter, create, get/list,
              update/patch; it mixes in
  deletion      StoreDeletion: finalizers, graceful deletion, garbage
                collection, namespace and CRD contents
  watch         Event, Watcher, StoreWatches, and HandlerWatches (the HTTP
                stream)
  quantity    resource quantities as exact numbers, and back
  schemas     custom resources pruned, defaulted and validated against their
              CRD's schema (for the groups a test names)
  kueue       the Kueue stand-in: its CRDs, Workload rules, admission loop
  kueue_tas   its topology-aware placement and pod ungating
  trainers    fleet-sidecar --in-place as the kubelet plays it: the gate, the
              liveness probe, the Trainer condition of in-place pods
  kubelet     the kubelet stand-in (podman_kubelet.py subclasses it)
  tables      Table answers for kubectl get
  control     the /fake/v1 test control API and its faults (Handler mixin)
  logs        pod logs (Handler mixin)
  handler     the HTTP server and request Handler: auth, faults, routing
  server      FakeApiServer, the object tests start and stop
  cli         the command line
"""
