#include "cache/manifest_io.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cache/file_hash.h"
#include "cache/open_beneath.h"

namespace kiln::cache {

namespace {

constexpr std::string_view kMagic = "KILNMAN1";
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;  // 256 MiB
static_assert(kMagic.size() + 4 + 4 + 8 == kManifestHeaderBytes);

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view in, std::size_t offset, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t{static_cast<unsigned char>(in[offset + i])} << (8 * i);
  return v;
}

std::string hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Printable ASCII as is, everything else as \xNN, so a bad magic can be quoted safely.
std::string escaped(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '"' && c != '\\') {
      out.push_back(c);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    }
  }
  return out;
}

}  // namespace

std::string manifest_encode(const schema::Manifest& m) {
  // Deterministic: map fields (KernelStep.specialised, CompileConfig.dims) in key order, so the
  // same manifest always encodes to the same bytes (reproducible artifacts).
  std::string payload;
  {
    google::protobuf::io::StringOutputStream raw(&payload);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    (void)m.SerializeToCodedStream(&coded);  // fails only on missing required fields: none
  }
  return manifest_frame(payload);
}

std::string manifest_frame(std::string_view payload) {
  std::string out;
  out.reserve(kManifestHeaderBytes + payload.size());
  out.append(kMagic);
  put_le(out, kFormatVersion, 4);
  // Protobuf messages are limited to 2 GiB, so the length always fits in 32 bits (a longer
  // payload gets a wrong length, which manifest_decode reports).
  put_le(out, payload.size(), 4);
  put_le(out, hash64(payload.data(), payload.size()), 8);
  out += payload;
  return out;
}

Result<schema::Manifest> manifest_decode(std::string_view bytes, std::string_view source) {
  const std::string src(source);
  if (bytes.empty()) return data_loss(src + ": file is empty, expected a kiln manifest");
  if (bytes.size() < kManifestHeaderBytes) {
    return data_loss(src + ": " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                     std::to_string(kManifestHeaderBytes) + "-byte manifest header (truncated?)");
  }
  const std::string_view magic = bytes.substr(0, kMagic.size());
  if (magic != kMagic) {
    return data_loss(src + ": bad magic \"" + escaped(magic) + "\", expected \"" +
                     std::string(kMagic) + "\" (not a kiln manifest)");
  }
  const auto version = static_cast<uint32_t>(get_le(bytes, 8, 4));
  if (version > kFormatVersion) {
    return failed_precondition(src + ": written by a newer kiln (format " +
                               std::to_string(version) + "), this runtime reads format " +
                               std::to_string(kFormatVersion) + "; upgrade kiln");
  }
  if (version < kFormatVersion) {
    return failed_precondition(src + ": written by an older kiln (format " +
                               std::to_string(version) + "), this runtime reads format " +
                               std::to_string(kFormatVersion) + "; recompile the model");
  }
  const uint64_t declared = get_le(bytes, 12, 4);
  const uint64_t actual = bytes.size() - kManifestHeaderBytes;
  if (actual < declared) {
    return data_loss(src + ": truncated: header says the payload is " + std::to_string(declared) +
                     " bytes, found " + std::to_string(actual));
  }
  if (actual > declared) {
    return data_loss(src + ": " + std::to_string(actual - declared) + " trailing bytes after the " +
                     std::to_string(declared) + "-byte payload the header declares");
  }
  const std::string_view payload = bytes.substr(kManifestHeaderBytes);
  const uint64_t want = get_le(bytes, 16, 8);
  const uint64_t got = hash64(payload.data(), payload.size());
  if (got != want) {
    return data_loss(src + ": payload checksum " + hex64(got) + " does not match header " +
                     hex64(want));
  }
  schema::Manifest m;
  if (!m.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return data_loss(src + ": payload (" + std::to_string(payload.size()) +
                     " bytes) is not a valid kiln.schema.Manifest protobuf");
  }
  if (m.format_version() != version) {
    return data_loss(src + ": manifest.format_version is " + std::to_string(m.format_version()) +
                     " but the header says format " + std::to_string(version));
  }
  return m;
}

Result<schema::Manifest> manifest_read(const std::filesystem::path& file) {
  const std::string name = file.string();
  // Beneath its directory, no symlink, and never blocking on a FIFO.
  const int fd = open_beneath(file.parent_path(), file.filename(), BeneathSymlinks::kRefuse);
  if (fd < 0) {
    const int err = -fd;
    if (err == ENOENT) return not_found(name + ": no such file, expected a kiln manifest");
    if (err == ELOOP) return data_loss(name + ": is a symlink, expected a kiln manifest file");
    return io_error(name + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(name + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    // Not readable as a manifest, rather than corrupt: gc keeps such an entry.
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                                              : "a socket or device";
    return io_error(name + ": is " + kind + ", not a readable kiln manifest file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > kMaxManifestBytes) {
    ::close(fd);
    return invalid_argument(name + ": " + std::to_string(size) +
                            " bytes; a kiln manifest is at most 268435456 bytes (256 MiB)");
  }
  // Read until EOF (bounded by the limit), so a file that changes size while read is handled.
  std::string bytes(static_cast<std::size_t>(size), '\0');
  std::size_t done = 0;
  for (;;) {
    if (done == bytes.size()) {
      if (bytes.size() > kMaxManifestBytes) break;
      bytes.resize(bytes.size() + 4096);
    }
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return io_error(name + ": read failed: " + std::strerror(err));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (done > kMaxManifestBytes) {
    return invalid_argument(name + ": grew past 268435456 bytes (256 MiB) while being read");
  }
  bytes.resize(done);
  return manifest_decode(bytes, name);
}

}  // namespace kiln::cache
