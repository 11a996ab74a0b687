#include "compiler/frontend/onnx_external_data.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <system_error>

#include "cache/open_beneath.h"

namespace kiln::compiler {

namespace fs = std::filesystem;

namespace {

constexpr std::array<std::string_view, 4> kKeys = {"location", "offset", "length", "checksum"};

// A non-negative decimal integer (ONNX stores offset and length as strings).
Result<uint64_t> parse_size(const std::string& s, const std::string& what) {
  if (!s.empty() && s[0] == '-')
    return invalid_argument(fmt::format("{} '{}' is negative", what, s));
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
    return invalid_argument(
        fmt::format("{} '{}' is not a non-negative integer below 10^19", what, s));
  return std::stoull(s);
}

// The keys of an EXTERNAL tensor, checked: known and not repeated, a location without NUL bytes,
// offset and length non-negative integers. `what` starts the messages.
struct ExternalKeys {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
};

Result<ExternalKeys> external_keys(const onnx::TensorProto& t, const std::string& what) {
  std::map<std::string, std::string> kv;
  for (const auto& e : t.external_data()) {
    if (std::find(kKeys.begin(), kKeys.end(), e.key()) == kKeys.end())
      return invalid_argument(fmt::format(
          "{}: unknown key '{}' (allowed: location, offset, length, checksum)", what, e.key()));
    if (!kv.emplace(e.key(), e.value()).second)
      return invalid_argument(fmt::format("{}: key '{}' is given twice", what, e.key()));
  }
  ExternalKeys k;
  auto loc = kv.find("location");
  if (loc == kv.end() || loc->second.empty())
    return invalid_argument(fmt::format("{}: no 'location'", what));
  k.location = loc->second;
  if (k.location.find('\0') != std::string::npos)
    return invalid_argument(fmt::format("{}: location contains a NUL byte", what));
  if (auto it = kv.find("offset"); it != kv.end()) {
    KILN_ASSIGN_OR_RETURN(k.offset, parse_size(it->second, what + " offset"));
  }
  if (auto it = kv.find("length"); it != kv.end()) {
    KILN_ASSIGN_OR_RETURN(k.length, parse_size(it->second, what + " length"));
  }
  return k;
}

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::optional<std::string> external_region_key(const onnx::TensorProto& t) {
  if (t.data_location() != onnx::TensorProto::EXTERNAL) return std::nullopt;
  Result<ExternalKeys> k = external_keys(t, "");
  if (!k.ok()) return std::nullopt;
  // No length: the dims (in the key) give the size.
  std::string key = fmt::format("{}|{}|{}|{}|", t.data_type(), k->offset,
                                k->length ? std::to_string(*k->length) : std::string("dims"),
                                fs::path(k->location).lexically_normal().string());
  for (int64_t d : t.dims()) key += fmt::format("{},", d);
  return key;
}

Status ExternalDataBudget::charge(uint64_t dev, uint64_t ino, uint64_t file_size, uint64_t offset,
                                  uint64_t bytes, const std::string& tensor,
                                  const std::string& what, const std::string& location) {
  if (files_.emplace(dev, ino).second) files_bytes_ += file_size;
  auto [region, first] = regions_.try_emplace({dev, ino, offset, bytes}, tensor, 0);
  ++region->second.second;
  if (bytes > limit() || used_ > limit() - bytes) {
    std::string shared;
    if (!first)
      shared = fmt::format(
          "; these {} bytes at offset {} are the same region as tensor '{}' ({} tensors name it, "
          "each one a copy)",
          bytes, offset, region->second.first, region->second.second);
    return resource_exhausted(fmt::format(
        "{}: reading {} bytes of '{}' would bring the import's external data to {} bytes, over "
        "its budget of {} bytes ({}){}",
        what, bytes, location, used_ + bytes, limit(),
        max_bytes_ != 0 ? "ImportOptions::max_external_bytes"
                        : "the total size of the external data files; raise it with "
                          "ImportOptions::max_external_bytes",
        shared));
  }
  used_ += bytes;
  return Status::ok_status();
}

Result<std::vector<uint8_t>> external_data_read(const onnx::TensorProto& t, const std::string& name,
                                                const fs::path& base_dir, uint64_t expected_bytes,
                                                ExternalDataBudget* budget) {
  const std::string what = fmt::format("tensor '{}': external data", name);
  KILN_ASSIGN_OR_RETURN(const ExternalKeys keys, external_keys(t, what));
  const std::string& location = keys.location;
  const fs::path loc(location);
  if (loc.is_absolute() || loc.has_root_directory() || loc.has_root_name())
    return invalid_argument(fmt::format(
        "{}: location '{}' is absolute; it must be relative to the model folder", what, location));
  for (const auto& part : loc)
    if (part == "..")
      return invalid_argument(fmt::format(
          "{}: location '{}' contains '..'; it must stay inside the model folder", what, location));
  const uint64_t offset = keys.offset;
  const uint64_t length = keys.length.value_or(expected_bytes);

  std::error_code ec;
  const fs::path base = fs::weakly_canonical(base_dir.empty() ? fs::path(".") : base_dir, ec);
  if (ec)
    return io_error(fmt::format("{}: cannot resolve the model folder '{}': {}", what,
                                base_dir.string(), ec.message()));
  const fs::path full = base / loc;
  if (!fs::exists(full, ec))
    return not_found(
        fmt::format("{}: file '{}' not found (looked for '{}')", what, location, full.string()));
  const fs::path resolved = fs::canonical(full, ec);
  if (ec) return io_error(fmt::format("{}: cannot resolve '{}': {}", what, location, ec.message()));
  const fs::path rel = resolved.lexically_relative(base);
  if (rel.empty() || *rel.begin() == ".." || rel == ".")
    return invalid_argument(
        fmt::format("{}: location '{}' resolves to '{}', outside the model folder '{}'", what,
                    location, resolved.string(), base.string()));

  // The checks above give the messages; this open is the one that counts: beneath `base` in one
  // step (a symlink swapped in meanwhile cannot lead out), and it never blocks on a FIFO.
  Fd f{cache::open_beneath(base, loc, cache::BeneathSymlinks::kInside)};
  if (f.fd == -EXDEV || f.fd == -ELOOP)
    return invalid_argument(fmt::format("{}: location '{}' leads outside the model folder '{}'",
                                        what, location, base.string()));
  if (f.fd == -ENOENT)
    return not_found(
        fmt::format("{}: file '{}' not found (looked for '{}')", what, location, full.string()));
  if (f.fd < 0)
    return io_error(fmt::format("{}: cannot open '{}': {}", what, location, std::strerror(-f.fd)));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    return io_error(fmt::format("{}: cannot stat '{}': {}", what, location, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return invalid_argument(fmt::format(
        "{}: '{}' is not a regular file ({}); external data must be a regular file", what, location,
        S_ISFIFO(st.st_mode)   ? "a FIFO"
        : S_ISDIR(st.st_mode)  ? "a directory"
        : S_ISSOCK(st.st_mode) ? "a socket"
                               : "a device"));
  if (st.st_nlink > 1)
    return invalid_argument(fmt::format(
        "{}: '{}' has {} hard links; kiln refuses hard-linked data files because a hard link "
        "can point outside the model folder (copy the file instead)",
        what, location, static_cast<uint64_t>(st.st_nlink)));
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (offset > file_size || length > file_size - offset)
    return data_loss(fmt::format("{}: offset {} + length {} is past the end of '{}' ({} bytes)",
                                 what, offset, length, location, file_size));
  if (length != expected_bytes)
    return data_loss(fmt::format("{}: length {} in '{}', but the tensor's shape needs {} bytes",
                                 what, length, location, expected_bytes));
  if (budget != nullptr)
    KILN_RETURN_IF_ERROR(budget->charge(static_cast<uint64_t>(st.st_dev),
                                        static_cast<uint64_t>(st.st_ino), file_size, offset, length,
                                        name, what, location));

  std::vector<uint8_t> data(length);
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n =
        ::pread(f.fd, data.data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return io_error(
          fmt::format("{}: reading '{}' failed: {}", what, location, std::strerror(errno)));
    if (n == 0)
      return data_loss(fmt::format("{}: '{}' ended early (read {} of {} bytes at offset {})", what,
                                   location, done, length, offset));
    done += static_cast<uint64_t>(n);
  }
  return data;
}

}  // namespace kiln::compiler
