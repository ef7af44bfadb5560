#include "farcall/call_types.h"

#include "client/call_codec.h"

namespace farcall {

std::string NewCallId() { return client_internal::FreshCallId(); }

const char* HealthName(AgentStatus::Health health) {
  switch (health) {
    case AgentStatus::Health::kServing:
      return "SERVING";
    case AgentStatus::Health::kNotServing:
      return "NOT_SERVING";
    case AgentStatus::Health::kDown:
      return "DOWN";
    case AgentStatus::Health::kUnknown:
      break;
  }
  return "UNKNOWN";
}

const char* TransportName(Transport transport) {
  switch (transport) {
    case Transport::kGrpc:
      return "grpc";
    case Transport::kShm:
      return "shm";
    case Transport::kUcx:
      return "ucx";
    case Transport::kAuto:
      break;
  }
  return "auto";
}

std::optional<Transport> TransportNamed(std::string_view name) {
  for (Transport t : {Transport::kAuto, Transport::kGrpc, Transport::kShm, Transport::kUcx}) {
    if (name == TransportName(t)) return t;
  }
  return std::nullopt;
}

const char* RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kUnary:
      return "unary";
    case Rpc::kStream:
      return "stream";
    case Rpc::kAuto:
      break;
  }
  return "auto";
}

std::optional<Rpc> RpcNamed(std::string_view name) {
  for (Rpc r : {Rpc::kAuto, Rpc::kUnary, Rpc::kStream}) {
    if (name == RpcName(r)) return r;
  }
  return std::nullopt;
}

}  // namespace farcall
