// FakeApiServer: fork/exec of fake_apiserver.py, readiness by its --ready-file, SIGKILL on
// destruction (the fake keeps no state worth a graceful stop). HttpConnection: just enough
// HTTP/1.1 for the control API and for the create benchmark's baseline.
#include "fake_apiserver_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#ifndef FLEET_SOURCE_DIR_DEFAULT
#define FLEET_SOURCE_DIR_DEFAULT ""
#endif

namespace fleet::kube::testing {
std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

// ---- TempDir ----

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "fleet-kube-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, const std::string& content) const {
  const std::filesystem::path full = std::filesystem::path(path_) / name;
  std::filesystem::create_directories(full.parent_path());
  const std::string tmp = full.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
  }
  std::filesystem::rename(tmp, full);  // readers never see a half-written file
  return full.string();
}

// ---- HttpConnection ----

struct HttpConnection::Tls {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~Tls() {
    if (ssl) SSL_free(ssl);
    if (ctx) SSL_CTX_free(ctx);
  }
};

HttpConnection::HttpConnection(std::string base_url) {
  std::string rest;
  if (base_url.rfind("https://", 0) == 0) {
    tls_ = true;
    rest = base_url.substr(8);
  } else if (base_url.rfind("http://", 0) == 0) {
    rest = base_url.substr(7);
  }
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  host_ = rest.substr(0, colon);
  port_ = colon == std::string::npos ? (tls_ ? 443 : 80) : std::atoi(rest.c_str() + colon + 1);
}

HttpConnection::~HttpConnection() { Close(); }

void HttpConnection::Close() {
  delete ssl_;
  ssl_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  pending_.clear();
}

bool HttpConnection::Connect() {
  Close();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  if (inet_pton(AF_INET, host_.c_str(), &addr.sin_addr) != 1) {
    error_ = "not an IPv4 address: " + host_;
    return false;
  }
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    error_ = std::string("connect: ") + std::strerror(errno);
    Close();
    return false;
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval limit{30, 0};  // a hung server fails the call instead of hanging the test
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  if (!tls_) return true;
  ssl_ = new Tls;
  ssl_->ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(ssl_->ctx, SSL_VERIFY_NONE, nullptr);
  ssl_->ssl = SSL_new(ssl_->ctx);
  SSL_set_fd(ssl_->ssl, fd_);
  if (SSL_connect(ssl_->ssl) != 1) {
    error_ = "TLS handshake failed";
    Close();
    return false;
  }
  return true;
}

bool HttpConnection::WriteAll(const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    long n;  // NOLINT(runtime/int)
    if (ssl_) {
      n = SSL_write(ssl_->ssl, data.data() + done, static_cast<int>(data.size() - done));
    } else {
      n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    }
    if (n <= 0) {
      if (!ssl_ && errno == EINTR) continue;
      error_ = "write failed";
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

long HttpConnection::ReadSome(char* buf, size_t len) {  // NOLINT(runtime/int)
  if (ssl_) return SSL_read(ssl_->ssl, buf, static_cast<int>(len));
  while (true) {
    const ssize_t n = ::recv(fd_, buf, len, 0);
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

std::optional<HttpConnection::Response> HttpConnection::ReadResponse() {
  std::string& in = pending_;
  char buf[65536];
  auto fail = [this](const char* why) {
    error_ = why;
    return std::optional<Response>();
  };
  auto fill = [&]() {
    const long n = ReadSome(buf, sizeof buf);  // NOLINT(runtime/int)
    if (n <= 0) return false;
    in.append(buf, static_cast<size_t>(n));
    return true;
  };
  size_t header_end;
  while ((header_end = in.find("\r\n\r\n")) == std::string::npos) {
    if (!fill()) return fail("connection closed before the response headers");
  }
  Response response;
  std::istringstream head(in.substr(0, header_end));
  std::string line;
  std::getline(head, line);
  if (line.size() < 12 || line.rfind("HTTP/1.", 0) != 0) return fail("bad status line");
  response.status = std::atoi(line.c_str() + 9);
  long long content_length = -1;  // NOLINT(runtime/int)
  bool chunked = false, close = false;
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = Lower(line.substr(0, colon));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (name == "content-length") content_length = std::atoll(value.c_str());
    if (name == "content-type") response.content_type = value;
    if (name == "transfer-encoding" && Lower(value).find("chunked") != std::string::npos) chunked = true;
    if (name == "connection" && Lower(value) == "close") close = true;
  }
  in.erase(0, header_end + 4);
  if (chunked) {
    while (true) {
      size_t eol;
      while ((eol = in.find("\r\n")) == std::string::npos) {
        if (!fill()) return fail("truncated chunk");
      }
      const size_t size = std::stoul(in.substr(0, eol), nullptr, 16);
      while (in.size() < eol + 2 + size + 2) {
        if (!fill()) return fail("truncated chunk");
      }
      response.body.append(in, eol + 2, size);
      in.erase(0, eol + 2 + size + 2);
      if (size == 0) break;
    }
  } else if (content_length >= 0) {
    while (in.size() < static_cast<size_t>(content_length)) {
      if (!fill()) return fail("truncated body");
    }
    response.body = in.substr(0, static_cast<size_t>(content_length));
    in.erase(0, static_cast<size_t>(content_length));
  } else {
    while (fill()) {
    }
    response.body = std::move(in);
    in.clear();
    close = true;
  }
  if (close) Close();
  return response;
}

std::optional<HttpConnection::Response> HttpConnection::Send(
    const std::string& method, const std::string& path, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: " + host_ + ":" + std::to_string(port_) +
                        "\r\nAccept: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  bool has_type = false;
  for (const auto& [name, value] : headers) {
    request += name + ": " + value + "\r\n";
    has_type = has_type || Lower(name) == "content-type";
  }
  if (!body.empty() && !has_type) request += "Content-Type: application/json\r\n";
  request += "\r\n" + body;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = fd_ >= 0;
    if (!reused && !Connect()) return std::nullopt;
    if (WriteAll(request)) {
      if (auto response = ReadResponse()) return response;
    }
    Close();
    if (!reused) return std::nullopt;  // a fresh connection failed: a real error
  }
  return std::nullopt;
}

// ---- TestPki ----

namespace {
const char kEcKey[] = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
}  // namespace

TestPki::TestPki() {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    error_ = "openssl CLI not found";
    return;
  }
  dir_.Write("client.ext", "extendedKeyUsage=clientAuth\n");
  if (!Openssl(std::string("openssl req -x509") + kEcKey + " -keyout ca.key -out ca.crt -days 1 -subj /CN=fleet-test-ca" +
               " && openssl req -x509" + kEcKey + " -keyout other-ca.key -out other-ca.crt -days 1 -subj /CN=other-ca" +
               " && openssl req" + kEcKey + " -keyout client.key -out client.csr -subj /CN=fleet-client" +
               " && openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt" +
               " -days 1 -extfile client.ext")) {
    return;
  }
  IssueServerCertificate("server", "IP:127.0.0.1,DNS:localhost");
}

bool TestPki::IssueServerCertificate(const std::string& name, const std::string& san) {
  dir_.Write(name + ".ext", (san.empty() ? "" : "subjectAltName=" + san + "\n") + "extendedKeyUsage=serverAuth\n");
  return Openssl(std::string("openssl req") + kEcKey + " -keyout " + name + ".key -out " + name + ".csr -subj /CN=" +
                 name + " && openssl x509 -req -in " + name + ".csr -CA ca.crt -CAkey ca.key -CAcreateserial -out " +
                 name + ".crt -days 1 -extfile " + name + ".ext");
}

std::vector<std::string> TestPki::ServerArgs(const std::string& certificate) const {
  return {"--tls-cert", Path(certificate + ".crt"), "--tls-key", Path(certificate + ".key"), "--client-ca",
          Path("ca.crt")};
}

bool TestPki::Openssl(const std::string& commands) {
  const std::string script = "cd " + dir_.path() + " && exec >openssl.log 2>&1 && " + commands;
  if (std::system(("sh -c '" + script + "'").c_str()) == 0) return true;
  error_ = "openssl failed: " + ReadFile(Path("openssl.log"));
  return false;
}

// ---- FakeApiServer ----

FakeApiServer::FakeApiServer(std::vector<std::string> extra_args) { Start(extra_args); }

void FakeApiServer::Start(const std::vector<std::string>& extra_args) {
  const char* env_dir = std::getenv("FLEET_SOURCE_DIR");
  const std::string source_dir = env_dir && *env_dir ? env_dir : FLEET_SOURCE_DIR_DEFAULT;
  const std::string script = source_dir + "/tests/controlplane/fake_apiserver.py";
  if (dir_.path().empty() || ::access(script.c_str(), R_OK) != 0) {
    error_ = "fake API server not found at '" + script + "' (set FLEET_SOURCE_DIR)";
    return;
  }
  const std::string ready = dir_.path() + "/ready";
  const std::string log = dir_.path() + "/stderr.log";
  std::vector<std::string> args = {"python3", script, "--listen", "127.0.0.1:0", "--ready-file", ready};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();

  pid_ = fork();
  if (pid_ < 0) {
    error_ = std::string("fork: ") + std::strerror(errno);
    return;
  }
  if (pid_ == 0) {  // child: only async-signal-safe calls from here
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
    if (getppid() != parent) _exit(127);
    const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (null_fd >= 0) {
      dup2(null_fd, STDIN_FILENO);
      dup2(null_fd, STDOUT_FILENO);
    }
    if (log_fd >= 0) dup2(log_fd, STDERR_FILENO);
    execvp("python3", argv.data());
    _exit(127);
  }

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string url = ReadFile(ready);
    while (!url.empty() && std::isspace(static_cast<unsigned char>(url.back()))) url.pop_back();
    if (!url.empty()) {
      url_ = url;
      control_.emplace(url_);
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error_ = "fake API server exited during start-up: " + ReadFile(log);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  error_ = "fake API server not ready within 10 s: " + ReadFile(log);
}

FakeApiServer::~FakeApiServer() {
  control_.reset();
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

Json FakeApiServer::Control(const std::string& path, const Json& body, const std::string& method) {
  if (!control_) {
    ADD_FAILURE() << "fake API server is not running: " << error_;
    return Json();
  }
  auto response = control_->Send(method, "/fake/v1/" + path, method == "GET" ? "" : body.dump());
  if (!response) {
    ADD_FAILURE() << method << " /fake/v1/" << path << ": " << control_->error();
    return Json();
  }
  Json answer = Json::parse(response->body, nullptr, false);
  if (response->status != 200 || answer.is_discarded()) {
    ADD_FAILURE() << method << " /fake/v1/" << path << " -> " << response->status << ": " << response->body;
    return Json();
  }
  return answer;
}

Json FakeApiServer::Requests() {
  // The fake appends to its log just after it has answered, so a client can see the answer before
  // the log does: read until two reads 25 ms apart agree.
  auto fetch = [this] {
    Json answer = Control("requests", Json::object(), "GET");
    return answer.is_object() && answer.contains("requests") ? answer["requests"] : Json::array();
  };
  Json log = fetch();
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    Json again = fetch();
    if (again.size() == log.size()) break;
    log = std::move(again);
  }
  return log;
}

std::vector<Json> FakeApiServer::RequestsMatching(const std::string& method, const std::string& path_prefix) {
  std::vector<Json> out;
  for (const Json& r : Requests()) {
    if (r.value("method", "") == method && r.value("path", "").rfind(path_prefix, 0) == 0) out.push_back(r);
  }
  return out;
}

void FakeApiServer::ClearRequests() {
  Requests();  // let entries of requests already answered arrive first
  Control("requests", Json::object(), "DELETE");
}

ClusterConfig FakeApiServer::Config(const std::string& token) const {
  ClusterConfig config;
  config.server = url_;
  config.token = token;
  config.insecure_skip_tls_verify = url_.rfind("https://", 0) == 0;
  return config;
}

}  // namespace fleet::kube::testing
