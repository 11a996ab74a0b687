#include "cache/signing_key.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "cache/fs_ops.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxKeyFileBytes = 4096;

Status sodium_ready() {
  if (sodium_init() < 0) return internal_error("libsodium could not be initialised");
  return Status::ok_status();
}

std::string to_hex(const uint8_t* data, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 15]);
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Exactly 2 * out.size() hex digits.
bool from_hex(std::string_view hex, std::span<uint8_t> out) {
  if (hex.size() != 2 * out.size()) return false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

// "HEADER\nHEX[\n]" → HEX; an error names `source` and what was expected.
Result<std::string_view> key_body(std::string_view text, std::string_view header,
                                  std::string_view source) {
  const std::string src(source);
  const std::size_t nl = text.find('\n');
  if (nl == std::string_view::npos || text.substr(0, nl) != header) {
    return invalid_argument(src + ": expected a first line '" + std::string(header) + "'");
  }
  std::string_view body = text.substr(nl + 1);
  if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
  if (body.size() != 2 * kPublicKeyBytes || body.find('\n') != std::string_view::npos) {
    return invalid_argument(src + ": expected one line of " + std::to_string(2 * kPublicKeyBytes) +
                            " hex digits after the header");
  }
  return body;
}

Result<std::string> read_small(const fs::path& file) {
  const std::string name = file.string();
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno_status(errno, "cannot open key file " + name);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_status(errno, "cannot stat key file " + name);
  if (!S_ISREG(st.st_mode)) return invalid_argument(name + ": not a regular file");
  if (st.st_size > static_cast<off_t>(kMaxKeyFileBytes)) {
    return invalid_argument(name + ": " + std::to_string(st.st_size) +
                            " bytes is too large for a kiln key file (at most " +
                            std::to_string(kMaxKeyFileBytes) + ")");
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "cannot read key file " + name);
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  return text;
}

Status write_new(const fs::path& file, const std::string& text, mode_t mode) {
  const std::string name = file.string();
  UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd.valid()) {
    if (errno == EEXIST)
      return failed_precondition(name + ": exists; kiln keygen never overwrites a key");
    return errno_status(errno, "cannot create " + name);
  }
  Status st = Status::ok_status();
  if (::fchmod(fd.get(), mode) != 0) st = errno_status(errno, "cannot chmod " + name);
  for (std::size_t done = 0; st.ok() && done < text.size();) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      st = errno_status(errno, "cannot write " + name);
    else
      done += static_cast<std::size_t>(n);
  }
  if (st.ok() && ::fsync(fd.get()) != 0) st = errno_status(errno, "cannot fsync " + name);
  if (!st.ok()) ::unlink(file.c_str());
  return st;
}

}  // namespace

SigningKey::~SigningKey() { sodium_memzero(secret.data(), secret.size()); }

Result<SigningKey> signing_key_generate() {
  KILN_RETURN_IF_ERROR(sodium_ready());
  SigningKey k;
  crypto_sign_ed25519_keypair(k.public_key.data(), k.secret.data());
  return k;
}

Status signing_key_write(const SigningKey& key, const std::string& prefix) {
  const fs::path secret_file = prefix + ".key", public_file = prefix + ".pub";
  std::error_code ec;
  if (fs::exists(public_file, ec)) {
    return failed_precondition(public_file.string() +
                               ": exists; kiln keygen never overwrites a key");
  }
  std::array<uint8_t, crypto_sign_ed25519_SEEDBYTES> seed{};
  crypto_sign_ed25519_sk_to_seed(seed.data(), key.secret.data());
  std::string text = std::string(kSecretKeyHeader) + "\n" + to_hex(seed.data(), seed.size()) + "\n";
  sodium_memzero(seed.data(), seed.size());
  Status st = write_new(secret_file, text, 0600);
  sodium_memzero(text.data(), text.size());
  KILN_RETURN_IF_ERROR(st);
  st = write_new(public_file, public_key_text(key.public_key), 0644);
  if (!st.ok()) ::unlink(secret_file.c_str());  // no secret key without its public half
  return st;
}

Result<SigningKey> signing_key_read(const fs::path& file) {
  KILN_RETURN_IF_ERROR(sodium_ready());
  KILN_ASSIGN_OR_RETURN(std::string text, read_small(file));
  const std::string name = file.string();
  if (text.starts_with(kPublicKeyHeader)) {
    sodium_memzero(text.data(), text.size());
    return invalid_argument(name + ": is a public key file; signing needs the secret key (.key)");
  }
  Result<std::string_view> body = key_body(text, kSecretKeyHeader, name);
  std::array<uint8_t, crypto_sign_ed25519_SEEDBYTES> seed{};
  const bool parsed = body.ok() && from_hex(*body, seed);
  sodium_memzero(text.data(), text.size());
  if (!body.ok()) return body.status();
  if (!parsed) return invalid_argument(name + ": the key line is not hexadecimal");
  SigningKey k;
  crypto_sign_ed25519_seed_keypair(k.public_key.data(), k.secret.data(), seed.data());
  sodium_memzero(seed.data(), seed.size());
  return k;
}

Result<PublicKey> public_key_parse(std::string_view text, std::string_view source) {
  const std::string src(source);
  if (text.starts_with(kSecretKeyHeader)) {
    return invalid_argument(src + ": is a secret key file; trust needs the public key (.pub)");
  }
  std::string_view hex = text;
  if (!hex.empty() && hex.back() == '\n') hex.remove_suffix(1);
  if (text.starts_with(kPublicKeyHeader)) {
    KILN_ASSIGN_OR_RETURN(hex, key_body(text, kPublicKeyHeader, source));
  } else if (hex.size() != 2 * kPublicKeyBytes) {
    return invalid_argument(src + ": expected a kiln public key ('" +
                            std::string(kPublicKeyHeader) + "' and a line of " +
                            std::to_string(2 * kPublicKeyBytes) + " hex digits, or just the " +
                            std::to_string(2 * kPublicKeyBytes) + " hex digits)");
  }
  PublicKey k{};
  if (!from_hex(hex, k)) return invalid_argument(src + ": the key is not hexadecimal");
  return k;
}

Result<PublicKey> public_key_read(const fs::path& file) {
  KILN_ASSIGN_OR_RETURN(std::string text, read_small(file));
  if (!text.starts_with(kPublicKeyHeader) && !text.starts_with(kSecretKeyHeader)) {
    return invalid_argument(file.string() + ": expected a first line '" +
                            std::string(kPublicKeyHeader) + "' (a kiln keygen .pub file)");
  }
  return public_key_parse(text, file.string());
}

std::string public_key_hex(const PublicKey& key) { return to_hex(key.data(), key.size()); }

std::string public_key_text(const PublicKey& key) {
  return std::string(kPublicKeyHeader) + "\n" + public_key_hex(key) + "\n";
}

}  // namespace kiln::cache
