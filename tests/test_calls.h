// Small calls that several integration tests make. Header-only.
#ifndef FARCALL_TESTS_TEST_CALLS_H_
#define FARCALL_TESTS_TEST_CALLS_H_

#include <string>
#include <vector>

#include "farcall/client.h"

namespace farcall::testing {

// A call of `handler` on float32[4] `x` (which must outlive the call), one
// result of the same spec, on `platform`.
inline CallRequest RequestOnFour(const std::string& handler, const std::vector<float>& x,
                                 const std::string& platform = "cpu") {
  TensorSpec spec{DType::kF32, {4}};
  CallRequest req;
  req.handler = handler;
  req.platform = platform;
  req.args = {Arg::In(spec, x.data())};
  req.results = {spec};
  return req;
}

// Options with which kAuto takes shared memory (for a same-host agent that
// offers it) however small the call: for tests of that path.
inline CallOptions SharedMemoryAtAnySize() {
  CallOptions o;
  o.shm_min_bytes = 0;
  return o;
}

// `handler` (copy by default) on float32[4] {1, 2, 3, 4}, one result of the
// same spec, on `platform`.
inline absl::StatusOr<CallResult> CallOnFour(Client& client, const std::string& handler = "copy",
                                             const CallOptions& options = {},
                                             const std::string& platform = "cpu") {
  std::vector<float> x = {1, 2, 3, 4};
  return client.Call(RequestOnFour(handler, x, platform), options);
}

// The cpu agent's built-in `sleep` for `ms` milliseconds: no tensors.
inline CallRequest SleepRequest(int64_t ms) {
  CallRequest req;
  req.platform = "cpu";
  req.handler = "sleep";
  req.attributes["ms"] = ms;
  return req;
}

}  // namespace farcall::testing

#endif  // FARCALL_TESTS_TEST_CALLS_H_
