// Config loaders: in-cluster service-account files, kubeconfig contexts/data/files, the default
// search order, and a kConfig error naming the file and field for everything missing or malformed.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "fleet/kube/config.h"

namespace fleet::kube {
namespace {

using Env = std::map<std::string, std::string>;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fleet-kube-config-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& relative, const std::string& content) {
    const std::string path = dir_ + "/" + relative;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << content;
    return path;
  }

  // A service-account directory like the kubelet mounts.
  std::string ServiceAccount(const std::string& token = "sa-token\n", const std::string& ns = "jobs\n") {
    Write("sa/token", token);
    Write("sa/ca.crt", "-----BEGIN CERTIFICATE-----\n");
    if (!ns.empty()) Write("sa/namespace", ns);
    return dir_ + "/sa";
  }

  std::string dir_;
};

void ExpectConfigError(const StatusOr<ClusterConfig>& result, const std::vector<std::string>& fragments) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), Code::kConfig);
  for (const std::string& fragment : fragments) {
    EXPECT_NE(result.status().message().find(fragment), std::string::npos)
        << "'" << fragment << "' not in: " << result.status().message();
  }
}

const char* kTwoContexts = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster:
    server: https://dev.example:6443
    certificate-authority: certs/ca.pem
- name: prod-cluster
  cluster:
    server: https://prod.example:443/
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    insecure-skip-tls-verify: false
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: team-a}
- name: prod
  context: {cluster: prod-cluster, user: prod-user}
- name: lab
  context: {cluster: prod-cluster}
users:
- name: dev-user
  user:
    token: dev-token
- name: prod-user
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
)";

// ---- in-cluster ----

TEST_F(ConfigTest, InClusterReadsTheServiceAccountFiles) {
  const std::string root = ServiceAccount();
  auto config =
      LoadInClusterConfig({{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}}, root);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->server, "https://10.0.0.1:443");
  EXPECT_EQ(config->token_file, root + "/token");  // a file, so that rotation is seen
  EXPECT_EQ(config->ca_file, root + "/ca.crt");
  EXPECT_EQ(config->default_namespace, "jobs");
  EXPECT_TRUE(config->token.empty());
}

TEST_F(ConfigTest, InClusterBracketsAnIpv6Host) {
  auto config = LoadInClusterConfig({{"KUBERNETES_SERVICE_HOST", "fd00::1"}, {"KUBERNETES_SERVICE_PORT", "6443"}},
                                    ServiceAccount());
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->server, "https://[fd00::1]:6443");
}

TEST_F(ConfigTest, InClusterWithoutANamespaceFileUsesDefault) {
  auto config = LoadInClusterConfig({{"KUBERNETES_SERVICE_HOST", "h"}, {"KUBERNETES_SERVICE_PORT", "1"}},
                                    ServiceAccount("t", ""));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->default_namespace, "default");
}

TEST_F(ConfigTest, InClusterWithoutTheServiceEnvIsAConfigError) {
  ExpectConfigError(LoadInClusterConfig({{"KUBERNETES_SERVICE_HOST", "h"}}, ServiceAccount()),
                    {"KUBERNETES_SERVICE_PORT"});
  ExpectConfigError(LoadInClusterConfig({{"KUBERNETES_SERVICE_HOST", "h"}, {"KUBERNETES_SERVICE_PORT", "https"}},
                                        ServiceAccount()),
                    {"not a port number"});
}

TEST_F(ConfigTest, InClusterWithoutTheTokenNamesTheFile) {
  ExpectConfigError(LoadInClusterConfig({{"KUBERNETES_SERVICE_HOST", "h"}, {"KUBERNETES_SERVICE_PORT", "1"}},
                                        dir_ + "/nowhere"),
                    {"token", dir_ + "/nowhere/token"});
  ExpectConfigError(LoadInClusterConfig({{"KUBERNETES_SERVICE_HOST", "h"}, {"KUBERNETES_SERVICE_PORT", "1"}},
                                        ServiceAccount("\n")),
                    {"is empty"});
}

// ---- kubeconfig ----

TEST_F(ConfigTest, KubeconfigUsesTheCurrentContext) {
  const std::string path = Write("kube/config", kTwoContexts);
  Write("kube/certs/ca.pem", "ca");
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->server, "https://dev.example:6443");
  EXPECT_EQ(config->default_namespace, "team-a");
  EXPECT_EQ(config->token, "dev-token");
  EXPECT_EQ(config->ca_file, dir_ + "/kube/certs/ca.pem");  // relative to the kubeconfig's dir
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST_F(ConfigTest, KubeconfigNamedContextDecodesDataFields) {
  const std::string path = Write("kube/config", kTwoContexts);
  Write("kube/certs/ca.pem", "ca");
  auto config = LoadKubeconfig(path, "prod");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->server, "https://prod.example:443");
  EXPECT_EQ(config->default_namespace, "default");
  EXPECT_EQ(config->ca_data, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(config->client_cert_data, "cert");
  EXPECT_EQ(config->client_key_data, "key");
  EXPECT_TRUE(config->ca_file.empty());
  EXPECT_TRUE(config->token.empty());
}

TEST_F(ConfigTest, KubeconfigContextWithoutAUserIsAnonymous) {
  const std::string path = Write("kube/config", kTwoContexts);
  auto config = LoadKubeconfig(path, "lab");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(config->token.empty());
  EXPECT_TRUE(config->client_cert_data.empty());
}

TEST_F(ConfigTest, KubeconfigFilesAndTokenFileResolveAgainstItsDirectory) {
  Write("k/c.crt", "c");
  Write("k/c.key", "k");
  Write("k/token", "t");
  const std::string path = Write("k/config", R"(
current-context: x
clusters: [{name: c, cluster: {server: "http://127.0.0.1:8080", insecure-skip-tls-verify: true}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
users: [{name: u, user: {client-certificate: c.crt, client-key: ./c.key, tokenFile: token}}]
)");
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->client_cert_file, dir_ + "/k/c.crt");
  EXPECT_EQ(config->client_key_file, dir_ + "/k/./c.key");
  EXPECT_EQ(config->token_file, dir_ + "/k/token");
  EXPECT_TRUE(config->insecure_skip_tls_verify);
}

TEST_F(ConfigTest, MissingKubeconfigNamesTheFile) {
  ExpectConfigError(LoadKubeconfig(dir_ + "/absent"), {"kubeconfig", dir_ + "/absent"});
}

TEST_F(ConfigTest, MalformedYamlNamesTheFileAndLine) {
  const std::string path = Write("config", "clusters:\n  - name: [unclosed\n");
  ExpectConfigError(LoadKubeconfig(path), {path, "line", "malformed YAML"});
  ExpectConfigError(LoadKubeconfig(Write("empty", "")), {"empty"});
  ExpectConfigError(LoadKubeconfig(Write("scalar", "just text")), {"not a YAML mapping"});
}

TEST_F(ConfigTest, UnknownContextListsTheKnownOnes) {
  const std::string path = Write("config", kTwoContexts);
  ExpectConfigError(LoadKubeconfig(path, "staging"), {path, "context \"staging\" not found", "dev, prod, lab"});
}

TEST_F(ConfigTest, NoCurrentContextIsAConfigError) {
  const std::string path = Write("config", "clusters: []\n");
  ExpectConfigError(LoadKubeconfig(path), {"current-context"});
}

TEST_F(ConfigTest, EntriesMissingFieldsAreNamed) {
  ExpectConfigError(LoadKubeconfig(Write("a", R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {certificate-authority-data: eA==}}]
)")),
                    {"cluster \"c\"", "server is missing"});
  ExpectConfigError(LoadKubeconfig(Write("b", R"(
current-context: x
contexts: [{name: x, context: {cluster: nope}}]
clusters: [{name: c, cluster: {server: "https://h"}}]
)")),
                    {"cluster \"nope\" not found"});
  ExpectConfigError(LoadKubeconfig(Write("c", R"(
current-context: x
contexts: [{name: x, context: {user: u}}]
)")),
                    {"context \"x\"", "cluster is missing"});
  ExpectConfigError(LoadKubeconfig(Write("d", R"(
current-context: x
contexts: [{name: x, context: {cluster: c, user: ghost}}]
clusters: [{name: c, cluster: {server: "https://h"}}]
users: []
)")),
                    {"user \"ghost\" not found"});
}

TEST_F(ConfigTest, WrongFieldTypesAreNamedNotThrown) {
  ExpectConfigError(LoadKubeconfig(Write("a", R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: {nested: map}}}]
)")),
                    {"cluster \"c\"", "server is not a string", "line 4"});
  ExpectConfigError(LoadKubeconfig(Write("b", "current-context: x\ncontexts: {x: y}\n")), {"contexts is not a list"});
  ExpectConfigError(LoadKubeconfig(Write("c", R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: "https://h", insecure-skip-tls-verify: maybe}}]
)")),
                    {"insecure-skip-tls-verify is not a boolean"});
  ExpectConfigError(LoadKubeconfig(Write("d", R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: "ftp://h"}}]
)")),
                    {"not an http:// or https:// URL"});
}

TEST_F(ConfigTest, BadBase64AndMissingFilesNameTheField) {
  ExpectConfigError(LoadKubeconfig(Write("a", R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: "https://h", certificate-authority-data: "not*base64!"}}]
)")),
                    {"certificate-authority-data is not valid base64"});
  ExpectConfigError(LoadKubeconfig(Write("b", R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: "https://h", certificate-authority: missing/ca.crt}}]
)")),
                    {"certificate-authority", dir_ + "/missing/ca.crt", "does not exist"});
}

TEST_F(ConfigTest, UserCredentialsMustBeCompleteAndSupported) {
  const std::string head = R"(
current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://h"}}]
)";
  ExpectConfigError(LoadKubeconfig(Write("a", head + "users: [{name: u, user: {client-certificate-data: eA==}}]\n")),
                    {"user \"u\"", "client-certificate is set without client-key"});
  ExpectConfigError(
      LoadKubeconfig(Write("b", head + "users: [{name: u, user: {exec: {command: aws}}}]\n")),
      {"user \"u\"", "exec credentials are not supported"});
}

// ---- default search order ----

TEST_F(ConfigTest, DefaultPrefersTheExplicitPathThenKubeconfigEnvThenInClusterThenHome) {
  const std::string explicit_path = Write("explicit", kTwoContexts);
  const std::string env_path = Write("fromenv", std::string(kTwoContexts) + "\n");
  Write("home/.kube/config", kTwoContexts);
  Write("certs/ca.pem", "ca");
  Write("home/.kube/certs/ca.pem", "ca");
  Env env = {{"KUBECONFIG", dir_ + "/absent:" + env_path}, {"HOME", dir_ + "/home"},
             {"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}};

  auto chosen = LoadDefaultConfig(env, explicit_path, "lab");
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  EXPECT_TRUE(chosen->token.empty());  // the named context was used

  chosen = LoadDefaultConfig(env);
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  EXPECT_EQ(chosen->server, "https://dev.example:6443");  // first existing KUBECONFIG entry

  env.erase("KUBECONFIG");
  ExpectConfigError(LoadDefaultConfig(env), {"in-cluster"});  // in-cluster wins, but has no token here

  env.erase("KUBERNETES_SERVICE_HOST");
  chosen = LoadDefaultConfig(env);
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  EXPECT_EQ(chosen->token, "dev-token");
}

TEST_F(ConfigTest, DefaultWithNothingConfiguredExplainsWhatWasTried) {
  ExpectConfigError(LoadDefaultConfig({{"KUBECONFIG", dir_ + "/a:" + dir_ + "/b"}}), {"none of the listed files"});
  ExpectConfigError(LoadDefaultConfig({{"HOME", dir_}}), {"no cluster configuration", dir_ + "/.kube/config"});
}

}  // namespace
}  // namespace fleet::kube
