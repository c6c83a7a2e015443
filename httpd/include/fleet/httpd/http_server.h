// HttpServer: the small HTTP endpoints every FleetJob binary serves — /healthz, /readyz, the
// sidecar's /startup, Prometheus' /metrics — on CivetWeb (the server prometheus-cpp's own exposer
// is built on). Handlers are plain functions of the request; the server bounds what it reads
// (request line and headers by CivetWeb, bodies by max_body_bytes) and times out slow clients.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fleet/base/result.h"

namespace prometheus {
class Registry;
}

namespace fleet::httpd {

struct Request {
  std::string method;
  std::string path;
  std::string query;
  std::string remote_addr;
  std::string body;            // at most HttpServerOptions::max_body_bytes (else 413 before the handler)
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;

  static Response Text(int status, std::string body) { return {status, "text/plain; charset=utf-8", std::move(body)}; }
};

using Handler = std::function<Response(const Request&)>;

struct Route {
  std::string path;                    // exact path, e.g. "/healthz"
  std::vector<std::string> methods;    // others get 405; empty = GET and HEAD
  Handler handler;
};

// CivetWeb gives each connection a worker thread of its own until its request is answered, and a
// client that connects and sends nothing (or half a request line) holds that worker until
// request_timeout_ms. A kubelet probe therefore waits when every worker is held: with `threads`
// workers, up to threads - 1 idle connections cost a probe nothing, and each further batch of
// `threads` of them delays it by at most request_timeout_ms. Hence many cheap workers (~20 KiB of
// RSS each, measured on the sidecar; the count is fixed, never per connection) and a short timeout:
// our clients (kubelet, Prometheus, loopback pushes) send a whole request at once.
struct HttpServerOptions {
  int threads = 16;
  size_t max_body_bytes = 64 * 1024;
  int request_timeout_ms = 2000;   // to read a request's headers and body, and per write
};

class HttpServer {
 public:
  // Listens on `address`: "HOST:PORT", ":PORT" (every interface) or "PORT"; port 0 picks a free
  // port (see port()). Fails with a message naming the address when it cannot listen.
  static Result<std::unique_ptr<HttpServer>> Start(const std::string& address, std::vector<Route> routes,
                                                   HttpServerOptions options = {});
  ~HttpServer();                       // stops listening; waits for handlers that are running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

 private:
  struct Context;
  HttpServer() = default;
  std::unique_ptr<Context> context_;
  int port_ = 0;
};

// Handlers run on CivetWeb's workers, whose stacks are small: Debian's libcivetweb is built with
// USE_STACK_SIZE=102400 (100 KiB, a 4 KiB guard page below), which no option changes. A handler
// whose work goes deeper (an API request: Beast, a TLS handshake, a name lookup; anything under
// AddressSanitizer, whose frames are larger) does that part through RunOnOwnThread: a frame larger
// than the guard page that runs past the stack's end writes over whatever is mapped below it, with
// no fault (under ASan, the next worker's allocator state: docs/sidecar.md, "Checkpoint before stop").
//
// Runs `work` on a new thread with the process's default stack (RLIMIT_STACK, 8 MiB by default)
// and waits for it; what it throws is rethrown here (std::system_error when no thread can start).
void RunOnOwnThread(const std::function<void()>& work);

// A /metrics route serving `registry` in Prometheus' text exposition format 0.0.4.
Route MetricsRoute(std::shared_ptr<prometheus::Registry> registry, std::string path = "/metrics");

// A health route: 200 "ok" when `check` returns "", else 503 with what it returned.
Route HealthRoute(std::string path, std::function<std::string()> check);

}  // namespace fleet::httpd
