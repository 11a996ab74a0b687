#include "tools/npy_io.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "tools/tensor_io.h"

namespace kiln::tools {

uint64_t read_le(std::string_view b, uint64_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

namespace {

namespace fs = std::filesystem;

struct NpyType {
  const char* code;  // the descr without its byte-order character
  DType dtype;
};
constexpr std::array<NpyType, 8> kTypes = {{{"f4", DType::kF32},
                                            {"f2", DType::kF16},
                                            {"f8", DType::kF64},
                                            {"i8", DType::kI64},
                                            {"i4", DType::kI32},
                                            {"i1", DType::kI8},
                                            {"u1", DType::kU8},
                                            {"b1", DType::kBool}}};

// The value after `'key':` in a header dict, up to the next ',' at depth 0 or the closing '}'.
std::string_view header_value(std::string_view header, std::string_view key) {
  const std::string quoted = fmt::format("'{}':", key);
  size_t at = header.find(quoted);
  if (at == std::string_view::npos) return {};
  at += quoted.size();
  while (at < header.size() && header[at] == ' ') ++at;
  size_t end = at;
  for (int depth = 0; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return header.substr(at, end - at);
}

Result<DType> dtype_of_descr(std::string_view descr, const std::string& where) {
  if (descr.size() == 5 && descr.front() == '\'' && descr.back() == '\'') {
    const char order = descr[1];
    const std::string_view code = descr.substr(2, 2);
    for (const NpyType& t : kTypes)
      if (code == t.code && (order == '<' || order == '|' || order == '=')) return t.dtype;
  }
  return invalid_argument(fmt::format(
      "{}: dtype {} is not supported (little-endian float32, float16, float64, int64, int32, "
      "int8, uint8 or bool; NumPy has no bfloat16: pass bf16 inputs as .pb)",
      where, std::string(descr)));
}

Result<std::vector<int64_t>> shape_of(std::string_view text, const std::string& where) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    return invalid_argument(fmt::format("{}: shape {} is not a tuple", where, std::string(text)));
  std::vector<int64_t> shape;
  std::string_view rest = text.substr(1, text.size() - 2);
  while (!rest.empty()) {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == ',')) rest.remove_prefix(1);
    if (rest.empty()) break;
    int64_t v = 0;
    size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10)
        return invalid_argument(fmt::format("{}: shape {} overflows", where, std::string(text)));
      v = v * 10 + (rest[digits++] - '0');
    }
    if (digits == 0 || shape.size() == 8)
      return invalid_argument(
          fmt::format("{}: shape {} is not a tuple of at most 8 sizes", where, std::string(text)));
    shape.push_back(v);
    rest.remove_prefix(digits);
  }
  return shape;
}

}  // namespace

Result<std::string> file_read(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return not_found(fmt::format("{}: no such file (or not a regular file)", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("{}: cannot open", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string tensor_file_name(std::string_view name) {
  std::string out(name);
  for (char& c : out)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      c = '_';
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

Result<Tensor> npy_parse(std::string_view b, const std::string& name, const std::string& where) {
  if (b.size() < 10 || b.substr(0, 6) != "\x93NUMPY")
    return invalid_argument(fmt::format("{}: not a .npy file (no \\x93NUMPY magic)", where));
  const int major = static_cast<unsigned char>(b[6]);
  if (major < 1 || major > 3)
    return invalid_argument(fmt::format("{}: .npy format {}.x is not 1, 2 or 3", where, major));
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (b.size() < 8 + len_bytes)
    return invalid_argument(fmt::format("{}: truncated in the header", where));
  const uint64_t header_len = read_le(b, 8, static_cast<int>(len_bytes));
  const size_t start = 8 + len_bytes;
  if (header_len > 1 << 20 || start + header_len > b.size())
    return invalid_argument(fmt::format(
        "{}: header of {} bytes {}", where, header_len,
        header_len > 1 << 20 ? "is too long" : "runs past the end of the file (truncated)"));
  const std::string_view header = b.substr(start, header_len);
  KILN_ASSIGN_OR_RETURN(DType dtype, dtype_of_descr(header_value(header, "descr"), where));
  if (header_value(header, "fortran_order") != "False")
    return invalid_argument(fmt::format(
        "{}: Fortran-order arrays are not supported; save np.ascontiguousarray(x)", where));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, shape_of(header_value(header, "shape"), where));
  const uint64_t data = b.size() - start - header_len;
  const uint64_t item = dtype_size(dtype);
  uint64_t need = item;
  for (int64_t d : shape) {
    if (d != 0 && need > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      return invalid_argument(
          fmt::format("{}: shape {} overflows", where, std::string(header_value(header, "shape"))));
    need *= static_cast<uint64_t>(d);
  }
  if (need != data)
    return invalid_argument(fmt::format("{}: {} data bytes, its shape {} of {} needs {}", where,
                                        data, std::string(header_value(header, "shape")),
                                        std::string(dtype_name(dtype)), need));
  Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const char* p = b.data() + start + header_len;
  t.data.assign(p, p + data);
  return t;
}

Result<Tensor> npy_read(const fs::path& path, const std::string& name) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, file_read(path));
  return npy_parse(bytes, name, path.string());
}

Result<std::string> npy_encode(const Tensor& src) {
  Tensor t = src;
  if (t.dtype == DType::kBF16) {  // NumPy has no bfloat16: widen to float32
    t = Tensor::zeros(src.name, DType::kF32, src.shape);
    const std::vector<double> v = tensor_to_ref(src).data;
    for (size_t i = 0; i < v.size(); ++i) t.as<float>()[i] = static_cast<float>(v[i]);
  }
  const char* code = nullptr;
  for (const NpyType& n : kTypes)
    if (n.dtype == t.dtype) code = n.code;
  if (code == nullptr)
    return invalid_argument(
        fmt::format("tensor '{}': {} has no .npy dtype", t.name, std::string(dtype_name(t.dtype))));
  std::string dims;
  for (int64_t d : t.shape) dims += fmt::format("{}, ", d);
  if (t.shape.size() > 1) dims.resize(dims.size() - 2);  // (2, 3) but (5,)
  if (t.shape.size() == 1) dims.resize(dims.size() - 1);
  const char order = dtype_size(t.dtype) == 1 ? '|' : '<';
  std::string header = fmt::format("{{'descr': '{}{}', 'fortran_order': False, 'shape': ({}), }}",
                                   order, code, dims);
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  return out;
}

Status npy_write(const fs::path& path, const Tensor& t) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, npy_encode(t));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) return io_error(fmt::format("{}: cannot write", path.string()));
  return Status::ok_status();
}

}  // namespace kiln::tools
