// Cluster configuration loaders. yaml-cpp throws on malformed input and on type mismatches; every
// call into it stays inside this file and comes back out as a kConfig status naming the file, the
// entry and the field.
#include "fleet/kube/config.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "fleet/base/strings.h"

namespace fleet::kube {
namespace {

ApiStatus ConfigError(const std::string& message) { return ApiStatus(Code::kConfig, message); }

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ConfigError(path + ": " + std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return ConfigError(path + ": read error");
  return content.str();
}

bool FileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  return base_dir + "/" + path;
}

// One kubeconfig document and the context of the entry being read, for error messages.
class KubeconfigReader {
 public:
  KubeconfigReader(std::string path, YAML::Node root)
      : path_(std::move(path)), dir_(DirName(path_)), root_(std::move(root)) {}

  StatusOr<ClusterConfig> Read(const std::string& context_name) {
    if (!root_.IsMap()) return Error("", "the document is not a YAML mapping");
    std::string name = context_name;
    if (name.empty()) {
      auto current = Scalar(root_, "current-context", "");
      if (!current.ok()) return current.status();
      name = *current;
      if (name.empty()) return Error("", "current-context is not set and no context was given");
    }
    auto found = Named("contexts", "context", name);
    if (!found.ok()) return found.status();
    const YAML::Node& context = *found;
    const std::string where = "context \"" + name + "\"";
    auto cluster_name = Scalar(context, "cluster", where);
    if (!cluster_name.ok()) return cluster_name.status();
    if (cluster_name->empty()) return Error(where, "cluster is missing");
    auto user_name = Scalar(context, "user", where);
    if (!user_name.ok()) return user_name.status();
    auto ns = Scalar(context, "namespace", where);
    if (!ns.ok()) return ns.status();

    ClusterConfig config;
    if (!ns->empty()) config.default_namespace = *ns;
    if (ApiStatus s = ReadCluster(*cluster_name, &config); !s.ok()) return s;
    if (!user_name->empty()) {
      if (ApiStatus s = ReadUser(*user_name, &config); !s.ok()) return s;
    }
    return config;
  }

 private:
  ApiStatus ReadCluster(const std::string& name, ClusterConfig* config) {
    auto found = Named("clusters", "cluster", name);
    if (!found.ok()) return found.status();
    const YAML::Node& cluster = *found;
    const std::string where = "cluster \"" + name + "\"";
    auto server = Scalar(cluster, "server", where);
    if (!server.ok()) return server.status();
    if (server->empty()) return Error(where, "server is missing");
    if (server->rfind("https://", 0) != 0 && server->rfind("http://", 0) != 0) {
      return Error(where, "server \"" + *server + "\" is not an http:// or https:// URL");
    }
    config->server = *server;
    while (config->server.size() > 1 && config->server.back() == '/') config->server.pop_back();
    if (ApiStatus s = DataOrFile(cluster, where, "certificate-authority", &config->ca_data,
                                 &config->ca_file);
        !s.ok()) {
      return s;
    }
    const YAML::Node insecure = cluster["insecure-skip-tls-verify"];
    if (insecure.IsDefined() && !insecure.IsNull()) {
      bool value = false;
      if (!insecure.IsScalar() || !YAML::convert<bool>::decode(insecure, value)) {
        return Error(where, "insecure-skip-tls-verify is not a boolean", insecure);
      }
      config->insecure_skip_tls_verify = value;
    }
    return ApiStatus();
  }

  ApiStatus ReadUser(const std::string& name, ClusterConfig* config) {
    auto found = Named("users", "user", name);
    if (!found.ok()) return found.status();
    const YAML::Node& user = *found;
    const std::string where = "user \"" + name + "\"";
    for (const char* unsupported : {"exec", "auth-provider", "username", "password"}) {
      if (user[unsupported].IsDefined()) {
        return Error(where, std::string(unsupported) + " credentials are not supported (use a token, "
                            "a token file or a client certificate)");
      }
    }
    auto token = Scalar(user, "token", where);
    if (!token.ok()) return token.status();
    config->token = *token;
    auto token_file = Scalar(user, "tokenFile", where);
    if (!token_file.ok()) return token_file.status();
    if (!token_file->empty()) {
      config->token_file = Resolve(dir_, *token_file);
      if (!FileExists(config->token_file)) {
        return Error(where, "tokenFile " + config->token_file + " does not exist");
      }
    }
    if (ApiStatus s = DataOrFile(user, where, "client-certificate", &config->client_cert_data,
                                 &config->client_cert_file);
        !s.ok()) {
      return s;
    }
    if (ApiStatus s = DataOrFile(user, where, "client-key", &config->client_key_data,
                                 &config->client_key_file);
        !s.ok()) {
      return s;
    }
    const bool has_cert = !config->client_cert_data.empty() || !config->client_cert_file.empty();
    const bool has_key = !config->client_key_data.empty() || !config->client_key_file.empty();
    if (has_cert != has_key) {
      return Error(where, has_cert ? "client-certificate is set without client-key"
                                   : "client-key is set without client-certificate");
    }
    return ApiStatus();
  }

  // `<field>-data` (base64 PEM) or `<field>` (a file path, relative to the kubeconfig's dir).
  ApiStatus DataOrFile(const YAML::Node& entry, const std::string& where, const std::string& field,
                       std::string* data, std::string* file) {
    auto encoded = Scalar(entry, field + "-data", where);
    if (!encoded.ok()) return encoded.status();
    auto path = Scalar(entry, field, where);
    if (!path.ok()) return path.status();
    if (!encoded->empty()) {
      std::optional<std::string> decoded = DecodeBase64(*encoded);
      if (!decoded || decoded->empty()) {
        return Error(where, field + "-data is not valid base64", entry[field + "-data"]);
      }
      *data = std::move(*decoded);
      return ApiStatus();
    }
    if (!path->empty()) {
      *file = Resolve(dir_, *path);
      if (!FileExists(*file)) return Error(where, field + " " + *file + " does not exist", entry[field]);
    }
    return ApiStatus();
  }

  // The `inner` mapping of the entry called `name` in the list `list` (contexts/clusters/users).
  StatusOr<YAML::Node> Named(const char* list, const char* inner, const std::string& name) {
    const YAML::Node entries = root_[list];
    if (entries.IsDefined() && !entries.IsNull() && !entries.IsSequence()) {
      return Error("", std::string(list) + " is not a list", entries);
    }
    std::vector<std::string> names;
    if (entries.IsSequence()) {
      for (const YAML::Node& entry : entries) {
        if (!entry.IsMap()) return Error("", std::string(list) + " has an entry that is not a mapping", entry);
        auto entry_name = Scalar(entry, "name", list);
        if (!entry_name.ok()) return entry_name.status();
        if (*entry_name != name) {
          names.push_back(*entry_name);
          continue;
        }
        const YAML::Node body = entry[inner];
        if (!body.IsMap()) {
          return Error(std::string(inner) + " \"" + name + "\"", std::string(inner) + " is missing or not a mapping",
                       entry);
        }
        return body;
      }
    }
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    return Error("", std::string(inner) + " \"" + name + "\" not found in " + list +
                         (known.empty() ? " (none defined)" : " (have: " + known + ")"));
  }

  // A string field: "" when absent or null, an error when it is not a scalar.
  StatusOr<std::string> Scalar(const YAML::Node& parent, const std::string& key, const std::string& where) {
    const YAML::Node node = parent[key];
    if (!node.IsDefined() || node.IsNull()) return std::string();
    if (!node.IsScalar()) return Error(where, key + " is not a string", node);
    return node.Scalar();
  }

  ApiStatus Error(const std::string& where, const std::string& what, const YAML::Node& at = YAML::Node()) const {
    std::string message = "kubeconfig " + path_;
    if (at.IsDefined() && !at.Mark().is_null()) message += " (line " + std::to_string(at.Mark().line + 1) + ")";
    message += ": " + (where.empty() ? "" : where + ": ") + what;
    return ConfigError(message);
  }

  std::string path_;
  std::string dir_;
  YAML::Node root_;
};

std::vector<std::string> SplitList(const std::string& value, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(value);
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string EnvOr(const std::map<std::string, std::string>& env, const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? std::string() : it->second;
}

}  // namespace

StatusOr<ClusterConfig> LoadInClusterConfig(const std::map<std::string, std::string>& env,
                                            const std::string& root) {
  const std::string host = EnvOr(env, "KUBERNETES_SERVICE_HOST");
  const std::string port = EnvOr(env, "KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return ConfigError("in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set");
  }
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5) {
    return ConfigError("in-cluster config: KUBERNETES_SERVICE_PORT \"" + port + "\" is not a port number");
  }
  ClusterConfig config;
  config.server = "https://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
  config.token_file = root + "/token";
  auto token = ReadFile(config.token_file);
  if (!token.ok()) return ConfigError("in-cluster config: service-account token " + token.status().message());
  if (TrimWhitespace(*token).empty()) {
    return ConfigError("in-cluster config: service-account token " + config.token_file + " is empty");
  }
  config.ca_file = root + "/ca.crt";
  if (!FileExists(config.ca_file)) {
    return ConfigError("in-cluster config: service-account CA " + config.ca_file + " does not exist");
  }
  if (auto ns = ReadFile(root + "/namespace"); ns.ok() && !TrimWhitespace(*ns).empty()) {
    config.default_namespace = std::string(TrimWhitespace(*ns));
  }
  return config;
}

StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  auto content = ReadFile(path);
  if (!content.ok()) return ConfigError("kubeconfig " + content.status().message());
  try {
    YAML::Node root = YAML::Load(*content);
    if (!root.IsDefined() || root.IsNull()) return ConfigError("kubeconfig " + path + ": the file is empty");
    return KubeconfigReader(path, root).Read(context);
  } catch (const YAML::Exception& e) {
    std::string where = e.mark.is_null() ? "" : " (line " + std::to_string(e.mark.line + 1) + ")";
    return ConfigError("kubeconfig " + path + where + ": malformed YAML: " + e.msg);
  } catch (const std::exception& e) {
    return ConfigError("kubeconfig " + path + ": " + e.what());
  }
}

StatusOr<ClusterConfig> LoadDefaultConfig(const std::map<std::string, std::string>& env,
                                          const std::string& kubeconfig_path, const std::string& context) {
  if (!kubeconfig_path.empty()) return LoadKubeconfig(kubeconfig_path, context);
  if (const std::string list = EnvOr(env, "KUBECONFIG"); !list.empty()) {
    for (const std::string& path : SplitList(list, ':')) {
      if (FileExists(path)) return LoadKubeconfig(path, context);
    }
    return ConfigError("KUBECONFIG=" + list + ": none of the listed files exists");
  }
  if (!EnvOr(env, "KUBERNETES_SERVICE_HOST").empty()) return LoadInClusterConfig(env);
  const std::string home = EnvOr(env, "HOME");
  const std::string fallback = home.empty() ? "" : home + "/.kube/config";
  if (!fallback.empty() && FileExists(fallback)) return LoadKubeconfig(fallback, context);
  return ConfigError("no cluster configuration: no --kubeconfig, KUBECONFIG is unset, not running in a cluster "
                     "(KUBERNETES_SERVICE_HOST is unset) and " +
                     (fallback.empty() ? std::string("HOME is unset") : fallback + " does not exist"));
}

}  // namespace fleet::kube
