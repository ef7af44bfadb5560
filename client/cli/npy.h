// Reading and writing numpy .npy files (format versions 1.0, 2.0 and 3.0).
//
// Supported element types are the numpy types with a farcall dtype:
// '|b1', '|i1' '<i2' '<i4' '<i8', '|u1' '<u2' '<u4' '<u8', '<f2' '<f4' '<f8',
// '<c8' '<c16'. Big-endian ('>') files are byte-swapped on read.
//
// ml_dtypes types (bfloat16 and the float8 types) have no numpy type code:
// numpy saves them as raw void types ('<V2', '<V1'), which loses the dtype.
// So WriteNpy writes them with the descr of the unsigned integer of the same
// size ('<u2' for bfloat16, '|u1' for float8_*), and ReadNpy takes an
// optional dtype that reinterprets the stored bytes:
//
//   FARCALL_RETURN_IF_ERROR(WriteNpy("x.npy", spec, t.bytes.data(),
//                                    t.bytes.size()));
//   FARCALL_ASSIGN_OR_RETURN(HostTensor x, ReadNpy("x.npy", DType::kBF16));
//
// In Python, `np.load("x.npy").view(ml_dtypes.bfloat16)` restores the dtype.
//
// Not supported: fortran_order arrays, structured dtypes, object arrays,
// and files with bytes after the array data (such as several np.save calls
// into one file).
//
// Errors: NOT_FOUND (missing file) and other errno-based codes for I/O
// failures; INVALID_ARGUMENT for bad or unsupported content. Messages name
// the path. All functions are thread-safe.
#ifndef FARCALL_CLIENT_CLI_NPY_H_
#define FARCALL_CLIENT_CLI_NPY_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/host_tensor.h"
#include "core/dtype.h"
#include "core/tensor_spec.h"

namespace farcall::cli {

// Reads the .npy file at `path`. With `as`, the stored bytes are reinterpreted
// as that dtype, which must have the stored item size (INVALID_ARGUMENT
// otherwise); a void type ('<V2') can only be read this way.
absl::StatusOr<HostTensor> ReadNpy(const std::string& path, std::optional<DType> as = std::nullopt);

// Writes `size` bytes at `data`, which must be ByteSize(spec), as a
// little-endian, C-order .npy file (version 1.0, or 2.0 if the header needs
// it). Replaces an existing file.
absl::Status WriteNpy(const std::string& path, const TensorSpec& spec, const void* data,
                      size_t size);

// The in-memory forms of ReadNpy and WriteNpy. `what` names the data in
// error messages.
absl::StatusOr<HostTensor> DecodeNpy(absl::string_view file, absl::string_view what,
                                     std::optional<DType> as = std::nullopt);
absl::StatusOr<std::string> EncodeNpy(const TensorSpec& spec, const void* data, size_t size);

}  // namespace farcall::cli

#endif  // FARCALL_CLIENT_CLI_NPY_H_
