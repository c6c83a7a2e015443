#include "fleet/httpd/http_server.h"

#include <civetweb.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace fleet::httpd {

namespace {

// What CivetWeb hands back to a handler: its route, and the server's limits.
struct RouteBinding {
  const Route* route;
  const HttpServerOptions* options;
};

}  // namespace

struct HttpServer::Context {
  std::vector<Route> routes;
  HttpServerOptions options;
  std::vector<RouteBinding> bindings;
  mg_context* ctx = nullptr;
};

namespace {

void Send(mg_connection* conn, const Response& response, bool head) {
  mg_response_header_start(conn, response.status);
  mg_response_header_add(conn, "Content-Type", response.content_type.c_str(), -1);
  mg_response_header_add(conn, "Content-Length", std::to_string(response.body.size()).c_str(), -1);
  mg_response_header_add(conn, "Cache-Control", "no-store", -1);
  mg_response_header_send(conn);
  if (!head && !response.body.empty()) mg_write(conn, response.body.data(), response.body.size());
}

int Dispatch(mg_connection* conn, const RouteBinding* binding) {
  const mg_request_info* info = mg_get_request_info(conn);
  Request request;
  request.method = info->request_method ? info->request_method : "";
  request.path = info->local_uri ? info->local_uri : "";
  request.query = info->query_string ? info->query_string : "";
  request.remote_addr = info->remote_addr;
  const bool head = request.method == "HEAD";

  const auto& methods = binding->route->methods;
  const bool allowed = methods.empty() ? (request.method == "GET" || head)
                                       : std::find(methods.begin(), methods.end(), request.method) != methods.end();
  if (!allowed) {
    Send(conn, Response::Text(405, "method " + request.method + " is not allowed on " + request.path + "\n"), head);
    return 405;
  }
  // Bodies are read only up to the limit: a client announcing or sending more gets 413 and the
  // connection is closed (CivetWeb will not reuse a connection whose body was not drained).
  if (info->content_length > static_cast<long long>(binding->options->max_body_bytes)) {
    Send(conn, Response::Text(413, "request body over " + std::to_string(binding->options->max_body_bytes) + " bytes\n"), head);
    return 413;
  }
  if (info->content_length != 0) {
    char buf[8192];
    for (;;) {
      const int n = mg_read(conn, buf, sizeof buf);
      if (n <= 0) break;
      if (request.body.size() + static_cast<size_t>(n) > binding->options->max_body_bytes) {
        Send(conn, Response::Text(413, "request body over " + std::to_string(binding->options->max_body_bytes) + " bytes\n"), head);
        return 413;
      }
      request.body.append(buf, static_cast<size_t>(n));
    }
  }
  Response response;
  try {
    response = binding->route->handler(request);
  } catch (const std::exception& e) {
    response = Response::Text(500, std::string("internal error: ") + e.what() + "\n");
  }
  Send(conn, response, head);
  return response.status;
}

// "HOST:PORT", ":PORT" or "PORT" -> CivetWeb's listening_ports syntax.
Result<std::string> ListeningPorts(const std::string& address) {
  std::string host, port = address;
  const auto colon = address.rfind(':');
  if (colon != std::string::npos) {
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit) || std::stoi(port) > 65535) {
    return Error{"listen address \"" + address + "\": expected HOST:PORT, :PORT or PORT with a port 0-65535"};
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + port;   // IPv6 literal
  return host.empty() ? port : host + ":" + port;
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address, std::vector<Route> routes,
                                                      HttpServerOptions options) {
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  FLEET_ASSIGN_OR_RETURN(auto ports, ListeningPorts(address));
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->context_ = std::make_unique<Context>();
  Context& c = *server->context_;
  c.routes = std::move(routes);
  c.options = options;
  const std::string threads = std::to_string(std::clamp(options.threads, 1, 256));   // a fixed pool, never per connection
  const std::string timeout = std::to_string(std::max(1, options.request_timeout_ms));
  const char* mg_options[] = {"listening_ports", ports.c_str(),
                              "num_threads", threads.c_str(),
                              "request_timeout_ms", timeout.c_str(),
                              "enable_keep_alive", "yes",
                              nullptr};
  // Routes are matched in begin_request, which exists before the server starts listening (a
  // handler registered after mg_start2 would leave a window in which requests get 404).
  c.bindings.reserve(c.routes.size());
  for (const Route& route : c.routes) c.bindings.push_back({&route, &c.options});
  mg_callbacks callbacks{};
  callbacks.begin_request = [](mg_connection* conn) -> int {
    const auto* context = static_cast<const Context*>(mg_get_user_data(mg_get_context(conn)));
    const mg_request_info* info = mg_get_request_info(conn);
    const std::string path = info->local_uri ? info->local_uri : "";
    for (const RouteBinding& binding : context->bindings) {
      if (binding.route->path == path) return Dispatch(conn, &binding);
    }
    Send(conn, Response::Text(404, "no such path: " + path + "\n"), std::string(info->request_method) == "HEAD");
    return 404;
  };
  // CivetWeb logs to stderr by default; our binaries own their log format.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  char error[256] = {0};
  mg_init_data init_data{};
  init_data.callbacks = &callbacks;
  init_data.user_data = &c;
  init_data.configuration_options = mg_options;
  mg_error_data error_data{};
  error_data.text = error;
  error_data.text_buffer_size = sizeof error;
  c.ctx = mg_start2(&init_data, &error_data);
  if (!c.ctx) {
    return Error{"cannot listen on " + address + (error[0] ? std::string(": ") + error : std::string())};
  }
  c.bindings.reserve(c.routes.size());
  mg_server_port bound[4];
  const int n = mg_get_server_ports(c.ctx, 4, bound);
  if (n > 0) server->port_ = bound[0].port;
  return server;
}

HttpServer::~HttpServer() {
  if (context_ && context_->ctx) mg_stop(context_->ctx);
}

void RunOnOwnThread(const std::function<void()>& work) {
  std::exception_ptr thrown;
  std::thread thread([&] {
    try {
      work();
    } catch (...) {
      thrown = std::current_exception();
    }
  });
  thread.join();
  if (thrown) std::rethrow_exception(thrown);
}

Route MetricsRoute(std::shared_ptr<prometheus::Registry> registry, std::string path) {
  return {std::move(path), {}, [registry](const Request&) {
            const prometheus::TextSerializer serializer;
            return Response{200, "text/plain; version=0.0.4; charset=utf-8", serializer.Serialize(registry->Collect())};
          }};
}

Route HealthRoute(std::string path, std::function<std::string()> check) {
  return {std::move(path), {}, [check = std::move(check)](const Request&) {
            const std::string problem = check();
            return problem.empty() ? Response::Text(200, "ok\n") : Response::Text(503, problem + "\n");
          }};
}

}  // namespace fleet::httpd
