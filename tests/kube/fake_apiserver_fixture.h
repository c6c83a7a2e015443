// Test support for fleet::kube against the fake kube-apiserver (tests/controlplane/fake_apiserver.py;
// its module docstring documents the command line and the /fake/v1 control API).
//
//   FakeApiServer fake;                                   // or FakeApiServer fake({"--token", "t1"})
//   ASSERT_TRUE(fake.ok()) << fake.error();
//   auto client = Client::Create(fake.Config()).value();
//   fake.Control("faults", {{"failNext", 2}, {"code", 503}});
//   EXPECT_EQ(fake.RequestsMatching("GET", "/api/v1/namespaces/default/pods").size(), 3u);
//
// The fake runs as a child process (python3 from PATH, the script from $FLEET_SOURCE_DIR, which
// ctest sets, else the source dir this was built from) on an ephemeral port, and is killed when
// the FakeApiServer goes out of scope. The helpers here talk HTTP through HttpConnection, a
// minimal socket client, never through the library under test.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/kube/client.h"
#include "fleet/kube/config.h"

namespace fleet::kube::testing {

// The whole content of the file at `path` ("" if it cannot be read).
std::string ReadFile(const std::string& path);

using Json = nlohmann::json;

// A scratch directory, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `content` to path()/name (parent directories created); returns the full path.
  std::string Write(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};

// One keep-alive HTTP/1.1 connection over a POSIX socket (TLS without certificate verification for
// https:// URLs). Not thread-safe: one per thread. Reconnects once when a kept-alive connection
// turns out to be closed.
class HttpConnection {
 public:
  struct Response {
    int status = 0;
    std::string content_type;
    std::string body;
  };
  explicit HttpConnection(std::string base_url);  // "http://127.0.0.1:PORT" or "https://..."
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // nullopt on a transport failure (see error()).
  std::optional<Response> Send(const std::string& method, const std::string& path, const std::string& body = "",
                               const std::vector<std::pair<std::string, std::string>>& headers = {});
  const std::string& error() const { return error_; }

 private:
  struct Tls;
  bool Connect();
  void Close();
  bool WriteAll(const std::string& data);
  long ReadSome(char* buf, size_t len);  // NOLINT(runtime/int): mirrors read(2)
  std::optional<Response> ReadResponse();

  std::string host_;
  int port_ = 0;
  bool tls_ = false;
  int fd_ = -1;
  Tls* ssl_ = nullptr;
  std::string pending_;  // bytes read past the previous response
  std::string error_;
};

// Certificates for TLS, made with the openssl CLI in a TempDir of its own: a CA (ca.crt, ca.key),
// a server certificate it signed for 127.0.0.1 and localhost (server.crt, server.key), a client
// certificate it signed (client.crt, client.key) and a CA that signed nothing (other-ca.crt).
// ok() is false, with error() saying why, when the openssl CLI is missing or fails.
class TestPki {
 public:
  TestPki();
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  // Another server certificate signed by the CA, with the subject CN=<name> and the subjectAltName
  // `san` (e.g. "DNS:elsewhere.example"; "" for none): <name>.crt and <name>.key. False (see
  // error()) on failure.
  bool IssueServerCertificate(const std::string& name, const std::string& san);
  // FakeApiServer arguments: serve https with `certificate` (<certificate>.crt/.key), accept
  // client certificates signed by the CA.
  std::vector<std::string> ServerArgs(const std::string& certificate = "server") const;

 private:
  bool Openssl(const std::string& commands);

  TempDir dir_;
  std::string error_;
};

class FakeApiServer {
 public:
  // `extra_args` go to fake_apiserver.py as they are, e.g. {"--token", "t1", "--kubelet", "manual"}.
  explicit FakeApiServer(std::vector<std::string> extra_args = {});
  ~FakeApiServer();  // kills the server
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  bool ok() const { return !url_.empty(); }
  const std::string& error() const { return error_; }  // why it did not start (with its stderr)
  const std::string& url() const { return url_; }      // "http://127.0.0.1:PORT" (https with --tls-cert)
  pid_t pid() const { return pid_; }                   // e.g. to read its CPU time from /proc

  // Calls the control API: `method` url()/fake/v1/<path> with `body`; returns the JSON answer, or
  // null after recording a test failure.
  Json Control(const std::string& path, const Json& body = Json::object(), const std::string& method = "POST");
  // The request log, oldest first: [{"method","path","query","code","watch","durationMs",...}].
  Json Requests();
  std::vector<Json> RequestsMatching(const std::string& method, const std::string& path_prefix);
  void ClearRequests();

  // A config for this server: url(), the given bearer token; https is not verified (use
  // ClusterConfig::ca_file to test verification).
  ClusterConfig Config(const std::string& token = "") const;

 private:
  void Start(const std::vector<std::string>& extra_args);

  TempDir dir_;
  pid_t pid_ = -1;
  std::string url_;
  std::string error_;
  std::optional<HttpConnection> control_;
};

// A Client that forwards only the pure virtual methods to `inner`, so that the others (ListPages,
// WatchLines, GetPath) are the base class's defaults, as for any Client written before they
// existed. Tests derive from it to observe or change single calls.
class RequiredMethodsClient : public Client {
 public:
  explicit RequiredMethodsClient(std::shared_ptr<Client> inner) : inner_(std::move(inner)) {}
  StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    return inner_->Get(r, ns, name);
  }
  StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& options) override {
    return inner_->List(r, ns, options);
  }
  StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) override {
    return inner_->Create(r, ns, object);
  }
  StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) override {
    return inner_->Update(r, ns, object);
  }
  StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns, const Json& object) override {
    return inner_->UpdateStatus(r, ns, object);
  }
  StatusOr<Json> MergePatch(const Resource& r, const std::string& ns, const std::string& name, const Json& patch,
                            const std::string& subresource) override {
    return inner_->MergePatch(r, ns, name, patch, subresource);
  }
  ApiStatus Delete(const Resource& r, const std::string& ns, const std::string& name,
                   const DeleteOptions& options) override {
    return inner_->Delete(r, ns, name, options);
  }
  ApiStatus Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                  const std::function<bool(const WatchEvent&)>& on_event, const CancelToken& cancel) override {
    return inner_->Watch(r, ns, options, on_event, cancel);
  }
  StatusOr<std::string> GetLog(const std::string& ns, const std::string& pod, const std::string& container,
                               int64_t tail_lines) override {
    return inner_->GetLog(ns, pod, container, tail_lines);
  }

 protected:
  std::shared_ptr<Client> inner_;
};


}  // namespace fleet::kube::testing
