// gRPC-side helpers for the tests that speak the wire protocol themselves (malformed_test.cc,
// dense_connection_test.cc).
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "fleet_ps.grpc.pb.h"

namespace fleet::ps::testing {

// A stub on a connection of its own, sending up to send_limit bytes (-1: no limit).
inline std::unique_ptr<wire::ParameterServer::Stub> RawStub(const std::string& endpoint, int send_limit = -1) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(send_limit);
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return wire::ParameterServer::NewStub(grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args));
}

// The server answers gRPC's Info on a new connection, and expects `trainers`: it is alive and serving.
inline ::testing::AssertionResult InfoWorks(const std::string& endpoint, uint32_t trainers) {
  auto stub = RawStub(endpoint);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  wire::InfoRequest req;
  wire::InfoResponse resp;
  grpc::Status s = stub->Info(&ctx, req, &resp);
  if (!s.ok()) return ::testing::AssertionFailure() << "Info: " << s.error_message();
  if (resp.trainers() != trainers) return ::testing::AssertionFailure() << "Info says " << resp.trainers() << " trainers";
  return ::testing::AssertionSuccess();
}

}  // namespace fleet::ps::testing
