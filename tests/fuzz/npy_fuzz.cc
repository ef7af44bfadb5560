// libFuzzer: the .npy reader behind the CLI's file arguments.
#include <cstddef>
#include <cstdint>

#include "client/cli/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view file(reinterpret_cast<const char*>(data), size);
  (void)farcall::cli::DecodeNpy(file, "fuzz.npy");
  (void)farcall::cli::DecodeNpy(file, "fuzz.npy", farcall::DType::kBF16);
  return 0;
}
