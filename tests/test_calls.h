// Small calls that several integration tests make. Header-only.
#ifndef FARCALL_TESTS_TEST_CALLS_H_
#define FARCALL_TESTS_TEST_CALLS_H_

#include <string>
#include <vector>

#include "farcall/client.h"

namespace farcall::testing {

// `handler` (copy by default) on float32[4] {1, 2, 3, 4}, one result of the
// same spec, on `platform`.
inline absl::StatusOr<CallResult> CallOnFour(Client& client, const std::string& handler = "copy",
                                             const CallOptions& options = {},
                                             const std::string& platform = "cpu") {
  std::vector<float> x = {1, 2, 3, 4};
  TensorSpec spec{DType::kF32, {4}};
  CallRequest req;
  req.handler = handler;
  req.platform = platform;
  req.args = {Arg::In(spec, x.data())};
  req.results = {spec};
  return client.Call(req, options);
}

}  // namespace farcall::testing

#endif  // FARCALL_TESTS_TEST_CALLS_H_
