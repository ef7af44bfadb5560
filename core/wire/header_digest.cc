#include "core/wire/header_digest.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "openssl/sha.h"

namespace farcall {

std::string HeaderDigest(const v1::CallHeader& header) {
  v1::CallHeader work = header;
  work.clear_call_id();
  work.clear_shm();
  work.clear_ucx();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    // Map entries in key order: the same header always encodes the same.
    coded.SetSerializationDeterministic(true);
    work.SerializeToCodedStream(&coded);
  }
  std::string digest(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
         reinterpret_cast<unsigned char*>(digest.data()));
  return digest;
}

}  // namespace farcall
