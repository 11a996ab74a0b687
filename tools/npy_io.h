// NumPy files for `kiln run`: .npy arrays (format 1.0, 2.0, 3.0; C order, little-endian) and
// .npz archives as np.savez / np.savez_compressed write them (ZIP: stored or deflated members,
// ZIP64 extras, CRC-32 checked), in and out of kiln::Tensor. Nothing is allocated from what a
// header merely claims: the data's size must equal its shape's before anything is copied, and
// a deflated member grows only as far as its stream actually inflates.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cache/status.h"
#include "kiln/tensor.h"

namespace kiln::tools {

// One .npy file's bytes as the tensor `name`; `where` names the bytes in messages.
Result<Tensor> npy_parse(std::string_view bytes, const std::string& name, const std::string& where);
Result<Tensor> npy_read(const std::filesystem::path& path, const std::string& name);

// Every member of an .npz archive, named by the member's file name less ".npy" (npz_io.cc).
Result<std::vector<Tensor>> npz_read(const std::filesystem::path& path);
// The same from an archive's bytes; `where` names them in messages.
Result<std::vector<Tensor>> npz_parse(std::string_view bytes, const std::string& where);

// The .npy bytes of `t` (format 1.0). bf16, which NumPy lacks, is written as float32.
Result<std::string> npy_encode(const Tensor& t);
Status npy_write(const std::filesystem::path& path, const Tensor& t);

// A whole file's bytes; not_found naming it when it is missing or not a regular file.
Result<std::string> file_read(const std::filesystem::path& path);

// The n-byte little-endian unsigned integer at b[at] (the caller checks the bounds).
uint64_t read_le(std::string_view b, uint64_t at, int n);

// A tensor name as a file name: every character outside [A-Za-z0-9._-] becomes '_', and a name
// that would be empty, "." or ".." gets a leading '_' (never a path outside the folder).
std::string tensor_file_name(std::string_view name);

}  // namespace kiln::tools
