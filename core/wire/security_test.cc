#include "core/wire/security.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace farcall {
namespace {

// A file of `bytes` in the test's temporary folder; removed at the end.
class TempFile {
 public:
  explicit TempFile(const std::string& bytes) {
    char name[] = "/tmp/farcall-pem-XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = name;
    std::ofstream(path_, std::ios::binary) << bytes;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A hostile or mistaken path (a log, a device, a disk image) is refused
// before it is read into memory, on the client's side as on the server's.
TEST(ReadPemFileTest, AFileLargerThanAnyPemIsRefusedBeforeItIsRead) {
  TempFile big(std::string(kMaxPemBytes + 1, 'x'));
  absl::StatusOr<std::string> r = ReadPemFile(big.path(), "tls_ca");
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "tls_ca: " + big.path() + " is larger than 1048576 bytes.");
  // The client's credentials say the same, naming the flag.
  TlsFiles files;
  files.ca = big.path();
  auto creds = ChannelCredentials(files);
  ASSERT_EQ(creds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(creds.status().message(), "tls_ca: " + big.path() + " is larger than 1048576 bytes.");
}

TEST(ReadPemFileTest, AFileOfTheLimitIsReadWhole) {
  TempFile edge(std::string(kMaxPemBytes, 'y'));
  absl::StatusOr<std::string> r = ReadPemFile(edge.path(), "tls_cert");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), static_cast<size_t>(kMaxPemBytes));
}

// A directory opens as a stream whose size is the largest offset: it is
// named for what it is, not refused as too large. An empty file is read
// (zero bytes) and then refused as no PEM: a setting given but empty never
// means plaintext.
TEST(ReadPemFileTest, ADirectoryIsNoFileAndAnEmptyFileIsNoPem) {
  absl::StatusOr<std::string> r = ReadPemFile("/tmp", "tls_ca");
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "tls_ca: /tmp is not a regular file.");
  TempFile empty("");
  absl::StatusOr<std::string> bytes = ReadPemFile(empty.path(), "tls_ca");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, "");
  TlsFiles files;
  files.ca = empty.path();
  auto creds = ChannelCredentials(files);
  ASSERT_EQ(creds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(creds.status().message(), "tls_ca: " + empty.path() + " is not a PEM file.");
}

TEST(ReadPemFileTest, AMissingFileAndAFileThatIsNoPemSayWhich) {
  absl::StatusOr<std::string> r = ReadPemFile("/nonexistent/ca.pem", "tls_ca");
  ASSERT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "tls_ca: cannot read /nonexistent/ca.pem.");
  TempFile junk("not a certificate\n");
  TlsFiles files;
  files.ca = junk.path();
  auto creds = ChannelCredentials(files);
  ASSERT_EQ(creds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(creds.status().message(), "tls_ca: " + junk.path() + " is not a PEM file.");
}

}  // namespace
}  // namespace farcall
