// .npz archives (tools/npy_io.h): the ZIP end record, central directory (ZIP64 too) and local
// headers parsed here; members stored (np.savez) or deflated (np.savez_compressed, zlib), each
// CRC-32 checked, then read as .npy bytes. Every offset and size is checked against the file
// before use.
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <memory>

#include "tools/npy_io.h"

namespace kiln::tools {
namespace {

// [at, at + n) lies inside `b` (no overflow whatever a header claims).
bool within(std::string_view b, uint64_t at, uint64_t n) {
  return at <= b.size() && n <= b.size() - at;
}

// One .npz member as its central directory entry describes it.
struct ZipMember {
  std::string name;
  uint64_t method = 0, crc = 0, csize = 0, usize = 0, local = 0;
};

// The ZIP64 extra field (id 1): 8-byte values for the sizes and offset saturated at 0xFFFFFFFF,
// in that order.
void zip64_extra(std::string_view extra, ZipMember& m) {
  for (size_t e = 0; e + 4 <= extra.size();) {
    const uint64_t id = read_le(extra, e, 2), len = read_le(extra, e + 2, 2);
    if (id == 1)
      for (size_t v = e + 4; uint64_t * f : {&m.usize, &m.csize, &m.local})
        if (*f == 0xFFFFFFFF && v + 8 <= e + 4 + len && v + 8 <= extra.size())
          *f = read_le(extra, v, 8), v += 8;
    e += 4 + len;
  }
}

// A raw deflate stream (ZIP method 8) inflated to exactly `size` bytes. The output grows with
// what the stream yields (16 MB at a time), never to what the directory merely claims.
Result<std::string> inflate_member(std::string_view in, uint64_t size, const std::string& label) {
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
    return internal_error(fmt::format("{}: zlib failed to start", label));
  std::unique_ptr<z_stream, int (*)(z_streamp)> end(&z, inflateEnd);
  std::string out;
  size_t fed = 0;
  for (int rc = Z_OK; rc != Z_STREAM_END;) {
    if (z.avail_in == 0 && fed < in.size()) {
      const size_t chunk = std::min<size_t>(in.size() - fed, size_t{1} << 30);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + fed));
      z.avail_in = static_cast<uInt>(chunk);
      fed += chunk;
    }
    const size_t have = out.size();
    const size_t grow = std::min<uint64_t>(size - have, (uint64_t{1} << 24) - 1) + 1;
    out.resize(have + grow);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    z.avail_out = static_cast<uInt>(grow);
    rc = inflate(&z, Z_NO_FLUSH);
    out.resize(have + grow - z.avail_out);
    if (out.size() > size)
      return invalid_argument(fmt::format(
          "{}: inflates to more than the {} bytes its directory entry declares", label, size));
    if (rc == Z_BUF_ERROR && z.avail_in == 0 && fed == in.size())
      return invalid_argument(fmt::format("{}: the deflate stream is truncated", label));
    if (rc != Z_OK && rc != Z_STREAM_END)
      return invalid_argument(
          fmt::format("{}: bad deflate stream ({})", label, z.msg != nullptr ? z.msg : zError(rc)));
  }
  if (out.size() != size)
    return invalid_argument(fmt::format("{}: inflates to {} bytes, its directory entry declares {}",
                                        label, out.size(), size));
  return out;
}

// A member's .npy bytes: stored (np.savez: a view into `b`) or deflated (np.savez_compressed:
// inflated into `inflated`), CRC checked.
Result<std::string_view> member_bytes(std::string_view b, const ZipMember& m,
                                      const std::string& label, std::string& inflated) {
  if (m.method != 0 && m.method != 8)
    return invalid_argument(fmt::format(
        "{}: ZIP compression method {} is not supported; kiln reads stored or deflated members "
        "(np.savez or np.savez_compressed)",
        label, m.method));
  if (!within(b, m.local, 30) || b.substr(m.local, 4) != "PK\x03\x04")
    return invalid_argument(fmt::format("{}: local header is damaged", label));
  const uint64_t data = m.local + 30 + read_le(b, m.local + 26, 2) + read_le(b, m.local + 28, 2);
  if (!within(b, data, m.csize))
    return invalid_argument(fmt::format("{}: runs past the end of the archive (truncated)", label));
  std::string_view bytes = b.substr(data, m.csize);
  if (m.method == 0 && m.csize != m.usize)
    return invalid_argument(
        fmt::format("{}: stored member of {} bytes declares {} unpacked", label, m.csize, m.usize));
  if (m.method == 8) {
    KILN_ASSIGN_OR_RETURN(inflated, inflate_member(bytes, m.usize, label));
    bytes = inflated;
  }
  const uint64_t crc = crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size());
  if (crc != m.crc)
    return invalid_argument(
        fmt::format("{}: CRC-32 {:08x}, its directory entry says {:08x} "
                    "(a damaged archive)",
                    label, crc, m.crc));
  return bytes;
}

}  // namespace

Result<std::vector<Tensor>> npz_read(const std::filesystem::path& path) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, file_read(path));
  return npz_parse(bytes, path.string());
}

Result<std::vector<Tensor>> npz_parse(std::string_view b, const std::string& where) {
  // The end-of-central-directory record: the last "PK\5\6" within its comment's reach.
  size_t eocd = std::string_view::npos;
  for (size_t at = b.size() >= 22 ? b.size() - 22 : 0; b.size() >= 22; --at) {
    if (b.substr(at, 4) == "PK\x05\x06") {
      eocd = at;
      break;
    }
    if (at == 0 || b.size() - at > 22 + 65535) break;
  }
  if (eocd == std::string_view::npos)
    return invalid_argument(fmt::format("{}: not an .npz (ZIP) archive", where));
  uint64_t count = read_le(b, eocd + 10, 2), cd_offset = read_le(b, eocd + 16, 4);
  if (cd_offset == 0xFFFFFFFF || count == 0xFFFF) {  // ZIP64: the locator sits right before
    if (eocd < 20 || b.substr(eocd - 20, 4) != "PK\x06\x07")
      return invalid_argument(fmt::format("{}: ZIP64 archive without its locator", where));
    const uint64_t z = read_le(b, eocd - 20 + 8, 8);
    if (!within(b, z, 56) || b.substr(z, 4) != "PK\x06\x06")
      return invalid_argument(fmt::format("{}: bad ZIP64 end record", where));
    count = read_le(b, z + 32, 8);
    cd_offset = read_le(b, z + 48, 8);
  }
  std::vector<Tensor> out;
  uint64_t at = cd_offset;
  for (uint64_t i = 0; i < count; ++i) {
    if (!within(b, at, 46) || b.substr(at, 4) != "PK\x01\x02")
      return invalid_argument(fmt::format("{}: central directory entry {} is damaged", where, i));
    ZipMember m;
    m.method = read_le(b, at + 10, 2);
    m.crc = read_le(b, at + 16, 4);
    m.csize = read_le(b, at + 20, 4);
    m.usize = read_le(b, at + 24, 4);
    m.local = read_le(b, at + 42, 4);
    const uint64_t name_len = read_le(b, at + 28, 2), extra_len = read_le(b, at + 30, 2),
                   comment_len = read_le(b, at + 32, 2);
    if (!within(b, at + 46, name_len + extra_len + comment_len))
      return invalid_argument(fmt::format("{}: central directory entry {} is truncated", where, i));
    m.name = b.substr(at + 46, name_len);
    zip64_extra(b.substr(at + 46 + name_len, extra_len), m);
    at += 46 + name_len + extra_len + comment_len;
    const std::string label = fmt::format("{} member '{}'", where, m.name);
    std::string inflated;
    KILN_ASSIGN_OR_RETURN(std::string_view data, member_bytes(b, m, label, inflated));
    std::string name = m.name;
    if (name.size() > 4 && name.substr(name.size() - 4) == ".npy") name.resize(name.size() - 4);
    KILN_ASSIGN_OR_RETURN(Tensor t, npy_parse(data, name, label));
    out.push_back(std::move(t));
  }
  if (out.empty()) return invalid_argument(fmt::format("{}: the archive holds no array", where));
  return out;
}

}  // namespace kiln::tools
