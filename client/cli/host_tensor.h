// HostTensor: a tensor's spec and its bytes in host memory, as the farcall
// command-line tool reads them from .npy files or builds them from flags.
#ifndef FARCALL_CLIENT_CLI_HOST_TENSOR_H_
#define FARCALL_CLIENT_CLI_HOST_TENSOR_H_

#include <cstdint>
#include <vector>

#include "core/tensor_spec.h"

namespace farcall::cli {

// Dense, row-major, little-endian data. Producers in this folder keep
// `bytes.size() == ByteSize(spec)`.
struct HostTensor {
  TensorSpec spec;
  std::vector<uint8_t> bytes;
};

}  // namespace farcall::cli

#endif  // FARCALL_CLIENT_CLI_HOST_TENSOR_H_
