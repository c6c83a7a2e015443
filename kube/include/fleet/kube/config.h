// Where the API server is and how to authenticate to it: in-cluster (service account) or a
// kubeconfig file. Loaders never throw; a missing or malformed config is an ApiStatus kConfig with
// a message naming the file and the field.
#pragma once

#include <map>
#include <string>

#include "fleet/kube/status.h"

namespace fleet::kube {

struct ClusterConfig {
  std::string server;              // https://host:port or http://host:port
  std::string default_namespace = "default";
  // TLS: the CA as PEM data or a file; insecure skips verification (kubeconfig's
  // insecure-skip-tls-verify). Client certificate and key as PEM data or files.
  std::string ca_data;
  std::string ca_file;
  bool insecure_skip_tls_verify = false;
  std::string client_cert_data;
  std::string client_cert_file;
  std::string client_key_data;
  std::string client_key_file;
  // Bearer token: a fixed token, or a file re-read as it rotates (bound service-account tokens are
  // refreshed by the kubelet about every hour; the client re-reads at most once a minute and at
  // once after a 401).
  std::string token;
  std::string token_file;
};

// (The process environment as a map, for the loaders below: fleet::CurrentProcessEnv() in
// fleet/runtime/env_contract.h.)

// In-cluster: KUBERNETES_SERVICE_HOST/PORT and the service-account files under `root`
// (token, ca.crt, namespace). `env` is the process environment.
StatusOr<ClusterConfig> LoadInClusterConfig(
    const std::map<std::string, std::string>& env,
    const std::string& root = "/var/run/secrets/kubernetes.io/serviceaccount");

// A kubeconfig file: the named context, or the current-context when `context` is empty.
// Relative file paths in it are resolved against the kubeconfig's directory; *-data fields are
// base64-decoded into the *_data members. exec / auth-provider / basic-auth users are rejected.
StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

// What a command-line tool does: an explicit --kubeconfig path, else $KUBECONFIG (first existing
// entry of the ':'-separated list), else in-cluster when KUBERNETES_SERVICE_HOST is set, else
// ~/.kube/config.
StatusOr<ClusterConfig> LoadDefaultConfig(const std::map<std::string, std::string>& env,
                                          const std::string& kubeconfig_path = "",
                                          const std::string& context = "");

}  // namespace fleet::kube
