#include "cache/artifact_signature.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <map>
#include <system_error>

#include "cache/artifact_verify.h"
#include "cache/fs_ops.h"
#include "cache/manifest_io.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kDigestBytes = crypto_generichash_BYTES;  // 32: BLAKE2b-256
constexpr std::size_t kMaxMessageBytes = 16u << 20;
constexpr std::size_t kMaxPathBytes = 4096;
static_assert(kDigestBytes == 32);
static_assert(kSignatureHeaderBytes == 16 + kPublicKeyBytes + crypto_sign_ed25519_BYTES);

using Digest = std::array<uint8_t, kDigestBytes>;

struct SignedFile {
  uint64_t size = 0;
  Digest digest = {};
};
using SignedFiles = std::map<std::string, SignedFile>;  // by path: the message's order

// `why` names the artifact directory or the file.
Status refuse(const std::string& why) {
  return failed_precondition("artifact signature check failed: " + why);
}

std::string hex(std::span<const uint8_t> b) {
  std::string out(2 * b.size() + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), b.data(), b.size());
  out.pop_back();
  return out;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A bounded little-endian reader: every take fails instead of reading past the end.
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool bytes(std::size_t n, std::string_view* out) {
    if (b_.size() - pos_ < n) return false;
    *out = b_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool le(T* out) {
    std::string_view s;
    if (!bytes(sizeof(T), &s)) return false;
    T v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= T{static_cast<uint8_t>(s[i])} << (8 * i);
    *out = v;
    return true;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::string_view b_;
  std::size_t pos_ = 0;
};

// Size and BLAKE2b-256 of a regular file (not followed through a symlink), streamed.
Result<SignedFile> file_blake2b(const fs::path& p) {
  const std::string name = p.string();
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return errno_status(errno, "cannot open " + name + " to hash it");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_status(errno, "cannot stat " + name);
  if (!S_ISREG(st.st_mode)) return data_loss(name + ": not a regular file");
  crypto_generichash_state h;
  crypto_generichash_init(&h, nullptr, 0, kDigestBytes);
  std::vector<uint8_t> buf(1u << 20);
  SignedFile out;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "cannot read " + name);
    if (n == 0) break;
    crypto_generichash_update(&h, buf.data(), static_cast<unsigned long long>(n));
    out.size += static_cast<uint64_t>(n);
  }
  crypto_generichash_final(&h, out.digest.data(), out.digest.size());
  return out;
}

// The paths a signature covers: the manifest and every file it lists.
Result<std::vector<std::string>> covered_paths(const schema::Manifest& m, const fs::path& dir) {
  std::vector<std::string> paths = {std::string(kManifestFileName)};
  for (const schema::FileEntry& e : m.files()) {
    if (e.path() == kSignatureFileName) {
      return data_loss(dir.string() + ": the manifest lists '" + e.path() +
                       "', the signature's own name");
    }
    paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string encode_message(const SignedFiles& files) {
  std::string msg(kSignatureDomain);
  msg.push_back('\0');
  put_u32(msg, static_cast<uint32_t>(files.size()));
  for (const auto& [path, f] : files) {
    put_u32(msg, static_cast<uint32_t>(path.size()));
    msg += path;
    put_u64(msg, f.size);
    msg.append(reinterpret_cast<const char*>(f.digest.data()), f.digest.size());
  }
  return msg;
}

Result<SignedFiles> decode_message(std::string_view msg, const std::string& name) {
  Reader r(msg);
  std::string_view tag;
  uint32_t count = 0;
  if (!r.bytes(kSignatureDomain.size() + 1, &tag) ||
      tag.substr(0, kSignatureDomain.size()) != kSignatureDomain || tag.back() != '\0' ||
      !r.le(&count)) {
    return refuse(name + ": the signed message does not start with '" +
                  std::string(kSignatureDomain) + "' and a file count");
  }
  SignedFiles files;
  std::string prev;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = 0;
    std::string_view path, digest;
    SignedFile f;
    if (!r.le(&len) || len == 0 || len > kMaxPathBytes || !r.bytes(len, &path) || !r.le(&f.size) ||
        !r.bytes(kDigestBytes, &digest)) {
      return refuse(name + ": the signed message's file " + std::to_string(i) + " of " +
                    std::to_string(count) + " is truncated or malformed");
    }
    if (i > 0 && std::string(path) <= prev) {
      return refuse(name + ": the signed message's paths are not sorted and unique at '" +
                    std::string(path) + "'");
    }
    prev = path;
    std::copy(digest.begin(), digest.end(), f.digest.begin());
    files.emplace(std::string(path), f);
  }
  if (!r.done()) return refuse(name + ": the signed message has trailing bytes");
  return files;
}

Result<std::string> read_signature_file(const fs::path& dir) {
  const fs::path p = dir / kSignatureFileName;
  const std::string name = p.string();
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(p, ec);
  if (st.type() == fs::file_type::not_found) {
    return refuse(dir.string() + ": the artifact is unsigned (no " +
                  std::string(kSignatureFileName) +
                  ") and trusted keys were given; sign it with `kiln compile --sign "
                  "KEYFILE` or `kiln sign`");
  }
  if (ec) return io_error(name + ": cannot stat: " + ec.message());
  if (!fs::is_regular_file(st)) return refuse(name + " is not a regular file");
  const uintmax_t size = fs::file_size(p, ec);
  if (ec) return io_error(name + ": cannot read size: " + ec.message());
  if (size < kSignatureHeaderBytes || size > kSignatureHeaderBytes + kMaxMessageBytes) {
    return refuse(name + " is " + std::to_string(size) + " bytes; a signature file is " +
                  std::to_string(kSignatureHeaderBytes) + " bytes of header and at most " +
                  std::to_string(kMaxMessageBytes) +
                  " of message (truncated or not a "
                  "signature)");
  }
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return errno_status(errno, "cannot open " + name);
  std::string bytes(static_cast<std::size_t>(size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "cannot read " + name);
    if (n == 0) return refuse(name + " shrank while it was read");
    done += static_cast<std::size_t>(n);
  }
  return bytes;
}

}  // namespace

Result<std::string> artifact_signature_message(const fs::path& dir, const schema::Manifest& m) {
  if (sodium_init() < 0) return internal_error("libsodium could not be initialised");
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> paths, covered_paths(m, dir));
  SignedFiles files;
  for (const std::string& path : paths) {
    KILN_ASSIGN_OR_RETURN(SignedFile f, file_blake2b(dir / path));
    files.emplace(path, f);
  }
  return encode_message(files);
}

Result<std::string> artifact_signature_make(const fs::path& dir, const schema::Manifest& m,
                                            const SigningKey& key) {
  KILN_ASSIGN_OR_RETURN(std::string msg, artifact_signature_message(dir, m));
  if (msg.size() > kMaxMessageBytes) {
    return invalid_argument(dir.string() + ": too many files to sign (" +
                            std::to_string(msg.size()) + " bytes of message)");
  }
  std::array<uint8_t, crypto_sign_ed25519_BYTES> sig{};
  crypto_sign_ed25519_detached(sig.data(), nullptr, reinterpret_cast<const uint8_t*>(msg.data()),
                               msg.size(), key.secret.data());
  std::string out(kSignatureMagic);
  put_u32(out, kSignatureVersion);
  put_u32(out, static_cast<uint32_t>(msg.size()));
  out.append(reinterpret_cast<const char*>(key.public_key.data()), key.public_key.size());
  out.append(reinterpret_cast<const char*>(sig.data()), sig.size());
  out += msg;
  return out;
}

Status artifact_sign_in_place(const fs::path& dir, const SigningKey& key) {
  KILN_ASSIGN_OR_RETURN(const schema::Manifest m, artifact_verify(dir));
  KILN_ASSIGN_OR_RETURN(const std::string sig, artifact_signature_make(dir, m, key));
  const fs::path tmp = dir / ("." + std::string(kSignatureFileName) + ".tmp-" + random_suffix());
  KILN_RETURN_IF_ERROR(write_file_durable(
      tmp, {reinterpret_cast<const uint8_t*>(sig.data()), sig.size()}, "signature-temp"));
  Status moved = rename_path(tmp, dir / kSignatureFileName, "signature-temp -> signature");
  if (!moved.ok()) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return moved;
  }
  return fsync_dir(dir, "artifact");
}

Result<PublicKey> artifact_signature_check(const fs::path& dir, const schema::Manifest& m,
                                           std::span<const PublicKey> trusted) {
  if (trusted.empty()) return invalid_argument("artifact_signature_check: no trusted keys given");
  if (sodium_init() < 0) return internal_error("libsodium could not be initialised");
  const std::string name = (dir / kSignatureFileName).string();
  KILN_ASSIGN_OR_RETURN(const std::string bytes, read_signature_file(dir));
  Reader r(bytes);
  std::string_view magic, signer_bytes, sig, msg;
  uint32_t version = 0, msg_len = 0;
  (void)r.bytes(kSignatureMagic.size(), &magic);  // the size was checked: these cannot fail
  (void)r.le(&version);
  (void)r.le(&msg_len);
  (void)r.bytes(kPublicKeyBytes, &signer_bytes);
  (void)r.bytes(crypto_sign_ed25519_BYTES, &sig);
  if (magic != kSignatureMagic) {
    return refuse(name + ": bad magic (expected '" + std::string(kSignatureMagic) +
                  "'): not a kiln signature file");
  }
  if (version != kSignatureVersion) {
    return refuse(name + ": signature format version " + std::to_string(version) +
                  ", this kiln reads version " + std::to_string(kSignatureVersion) +
                  (version > kSignatureVersion ? " (upgrade kiln)" : ""));
  }
  if (!r.bytes(msg_len, &msg) || !r.done()) {
    return refuse(name + ": declares a " + std::to_string(msg_len) + "-byte message but holds " +
                  std::to_string(bytes.size() - kSignatureHeaderBytes) +
                  " (truncated or trailing bytes)");
  }
  PublicKey signer{};
  std::copy(signer_bytes.begin(), signer_bytes.end(), signer.begin());
  if (std::find(trusted.begin(), trusted.end(), signer) == trusted.end()) {
    std::string list;
    for (const PublicKey& k : trusted) list += (list.empty() ? "" : ", ") + public_key_hex(k);
    return refuse(dir.string() + ": signed by key " + public_key_hex(signer) +
                  ", which is not trusted (trusted: " + list + ")");
  }
  if (crypto_sign_ed25519_verify_detached(reinterpret_cast<const uint8_t*>(sig.data()),
                                          reinterpret_cast<const uint8_t*>(msg.data()), msg.size(),
                                          signer.data()) != 0) {
    return refuse(name + ": the signature does not verify with its key " + public_key_hex(signer) +
                  " (the signature file was altered or forged)");
  }
  KILN_ASSIGN_OR_RETURN(const SignedFiles signed_files, decode_message(msg, name));
  KILN_ASSIGN_OR_RETURN(const std::vector<std::string> paths, covered_paths(m, dir));
  for (const std::string& path : paths) {
    if (!signed_files.contains(path)) {
      return refuse((dir / path).string() +
                    " is not covered by the signature (added after "
                    "signing)");
    }
  }
  for (const auto& [path, f] : signed_files) {
    if (!std::binary_search(paths.begin(), paths.end(), path)) {
      return refuse(dir.string() + ": '" + path +
                    "' was signed but the manifest no longer lists it");
    }
  }
  // The manifest first: it says what every other file should be.
  std::vector<std::string> order = {std::string(kManifestFileName)};
  for (const std::string& p : paths)
    if (p != kManifestFileName) order.push_back(p);
  for (const std::string& path : order) {
    const SignedFile& want = signed_files.at(path);
    const fs::path p = dir / path;
    KILN_ASSIGN_OR_RETURN(const SignedFile got, file_blake2b(p));
    if (got.size != want.size) {
      return refuse(p.string() + ": " + std::to_string(got.size) + " bytes, signed as " +
                    std::to_string(want.size) + " (modified after signing)");
    }
    if (got.digest != want.digest) {
      return refuse(p.string() + ": BLAKE2b-256 " + hex(got.digest) + " differs from the signed " +
                    hex(want.digest) + " (modified after signing)");
    }
  }
  return signer;
}

}  // namespace kiln::cache
