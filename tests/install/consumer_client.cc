// A client program built against the installed farcall::client alone:
//   consumer_client HOST:PORT
// asks the agent what it serves, runs the plugin's consumer.twice and the
// built-in axpy (in place), checks the answers, and prints one line each.
#include <cstdio>
#include <vector>

#include "farcall/client.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_client HOST:PORT\n");
    return 2;
  }
  auto client = farcall::Client::Connect(argv[1]);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<farcall::AgentDescription> info = (*client)->Describe();
  if (!info.ok()) {
    std::fprintf(stderr, "describe: %s\n", info.status().ToString().c_str());
    return 1;
  }
  bool has_twice = false;
  for (const auto& h : info->handlers) has_twice |= h.name == "consumer.twice";
  std::printf("agent %s on %s, %zu handlers, consumer.twice %s\n", info->agent_id.c_str(),
              info->platform.c_str(), info->handlers.size(), has_twice ? "loaded" : "missing");

  const farcall::TensorSpec spec{farcall::DType::kF32, {4}};
  std::vector<float> x = {1, 2, 3, 4}, y = {10, 20, 30, 40};
  farcall::CallRequest twice;
  twice.handler = "consumer.twice";
  twice.args = {farcall::Arg::In(spec, x.data())};
  twice.results = {spec};
  absl::StatusOr<farcall::CallResult> r = (*client)->Call(twice);
  if (!r.ok()) {
    std::fprintf(stderr, "consumer.twice: %s\n", r.status().ToString().c_str());
    return 1;
  }
  const float* out = r->results[0].as<float>();
  const std::vector<float> doubled(out, out + 4);  // r is reused below
  std::printf("consumer.twice %s: %g %g %g %g\n", farcall::SpecToString(spec).c_str(), doubled[0],
              doubled[1], doubled[2], doubled[3]);

  farcall::CallRequest axpy;
  axpy.handler = "axpy";
  axpy.args = {farcall::Arg::In(spec, x.data()), farcall::Arg::InOut(spec, y.data())};
  axpy.results = {spec};
  axpy.aliases = {{1, 0}};
  axpy.attributes["alpha"] = 3.0;
  r = (*client)->Call(axpy);
  if (!r.ok()) {
    std::fprintf(stderr, "axpy: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::printf("axpy in place: %g %g %g %g\n", y[0], y[1], y[2], y[3]);
  // The plugin's binding refuses what it was not built for, before its body.
  std::vector<int32_t> ints = {1, 2, 3, 4};
  const farcall::TensorSpec int_spec{farcall::DType::kS32, {4}};
  twice.args = {farcall::Arg::In(int_spec, ints.data())};
  twice.results = {int_spec};
  absl::Status refused = (*client)->Call(twice).status();
  std::printf("consumer.twice int32[4]: %s\n", refused.ToString().c_str());
  const bool right = has_twice && doubled[3] == 8 && y[0] == 13 && y[3] == 52 &&
                     refused.message() == "consumer.twice: arg 0: expected float32, got int32";
  std::printf("%s\n", right ? "ok" : "WRONG");
  return right ? 0 : 1;
}
