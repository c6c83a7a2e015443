// CreateLiteClient: the same Client as Client::Create — the same requests, retries, token
// handling, status mapping, limits and watch semantics (client.h), from the same code — over
// Boost.Beast (header-only) and mbedTLS instead of cpprestsdk and OpenSSL, for processes that must
// stay small: fleet-sidecar, injected into every pod. cpprestsdk and the libraries only it needs
// map ~3 MiB into a process that loads them, OpenSSL 3 ~4.6 MiB once it has made a connection,
// mbedTLS ~0.8 MiB; see docs/sidecar.md, "footprint".
//
// Each connection is driven on the calling thread (no I/O thread pool); idle keep-alive
// connections are reused. Host names are resolved with getaddrinfo on the calling thread, which a
// CancelToken cannot interrupt (an in-cluster server is an IP address, which needs no lookup).
// TLS verifies the server's certificate chain against the cluster CA and its name against the
// server URL's host (an IP address against the certificate's IP address SANs), like
// Client::Create. mbedTLS 2.28 speaks TLS 1.2 (its 1.3 is experimental, and off in Debian's): an
// API server restricted to TLS 1.3 (--tls-min-version=VersionTLS13) refuses this client.
//
// Links fleet::kube_lite; Client::Create and ConfigureIoThreads are fleet::kube's (cpprestsdk).
#pragma once

#include <memory>

#include "fleet/kube/client.h"
#include "fleet/kube/config.h"
#include "fleet/kube/status.h"

namespace fleet::kube {

StatusOr<std::shared_ptr<Client>> CreateLiteClient(const ClusterConfig& config, const ClientOptions& options = {});

}  // namespace fleet::kube
