/* npy.h — just enough of NumPy's .npy format for the examples: read a C-order little-endian array
 * (format 1.0, 2.0 or 3.0) and write one (format 1.0). Header-only, valid C and C++.
 * Not part of libkiln_runtime: the `kiln` CLI reads and writes .npy/.npz itself. */
#ifndef KILN_EXAMPLES_NPY_H_
#define KILN_EXAMPLES_NPY_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"

typedef struct npy_array {
  int32_t dtype; /* a kiln_dtype */
  int32_t rank;
  int64_t shape[KILN_MAX_RANK];
  void* data; /* malloc'ed; free with npy_free */
  size_t bytes;
} npy_array;

/* The numpy descr of a kiln dtype ("<f4", ...), or NULL when numpy has none (bf16). */
static inline const char* npy_descr(int32_t dtype) {
  switch (dtype) {
    case KILN_DTYPE_F32:
      return "<f4";
    case KILN_DTYPE_F16:
      return "<f2";
    case KILN_DTYPE_F64:
      return "<f8";
    case KILN_DTYPE_I64:
      return "<i8";
    case KILN_DTYPE_I32:
      return "<i4";
    case KILN_DTYPE_I8:
      return "|i1";
    case KILN_DTYPE_U8:
      return "|u1";
    case KILN_DTYPE_BOOL:
      return "|b1";
    default:
      return NULL;
  }
}

static inline void npy_free(npy_array* a) {
  free(a->data);
  a->data = NULL;
}

/* Reads `path` into `out`. Returns 0, or -1 with a message in err (err_len bytes). */
static inline int npy_read(const char* path, npy_array* out, char* err, size_t err_len) {
  unsigned char magic[8];
  uint32_t header_len = 0;
  char* header = NULL;
  const char* p;
  int32_t d;
  int64_t numel = 1;
  long data_start, file_end;
  FILE* f = fopen(path, "rb");
  memset(out, 0, sizeof *out);
  if (!f) return snprintf(err, err_len, "%s: cannot open", path), -1;
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "\x93NUMPY", 6) != 0) {
    snprintf(err, err_len, "%s: not a .npy file (bad magic)", path);
    goto fail;
  }
  if (magic[6] == 1) {
    unsigned char l[2];
    if (fread(l, 1, 2, f) != 2) goto truncated;
    header_len = (uint32_t)l[0] | ((uint32_t)l[1] << 8);
  } else if (magic[6] == 2 || magic[6] == 3) {
    unsigned char l[4];
    if (fread(l, 1, 4, f) != 4) goto truncated;
    header_len =
        (uint32_t)l[0] | ((uint32_t)l[1] << 8) | ((uint32_t)l[2] << 16) | ((uint32_t)l[3] << 24);
  } else {
    snprintf(err, err_len, "%s: .npy format version %d is not 1, 2 or 3", path, magic[6]);
    goto fail;
  }
  if (header_len > 65536) {
    snprintf(err, err_len, "%s: .npy header of %u bytes is too long", path, header_len);
    goto fail;
  }
  header = (char*)calloc(header_len + 1, 1);
  if (!header || fread(header, 1, header_len, f) != header_len) goto truncated;
  p = strstr(header, "'descr': '");
  out->dtype = KILN_DTYPE_UNSPECIFIED;
  for (d = KILN_DTYPE_F32; p && d <= KILN_DTYPE_BOOL; ++d) {
    const char* want = npy_descr(d);
    /* '<f4' or '|f4'; byte-order-free types may be written either way */
    if (want && (p[10] == '<' || p[10] == '|') && strncmp(p + 11, want + 1, 2) == 0 &&
        p[13] == '\'')
      out->dtype = d;
  }
  if (out->dtype == KILN_DTYPE_UNSPECIFIED) {
    snprintf(err, err_len, "%s: unsupported dtype (little-endian f4 f2 f8 i8 i4 i1 u1 b1) in %s",
             path, header);
    goto fail;
  }
  if (strstr(header, "'fortran_order': True")) {
    snprintf(err, err_len, "%s: Fortran-order arrays are not supported", path);
    goto fail;
  }
  p = strstr(header, "'shape': (");
  if (!p) {
    snprintf(err, err_len, "%s: no shape in header %s", path, header);
    goto fail;
  }
  for (p += 10; *p && *p != ')';) {
    char* end;
    long long v = strtoll(p, &end, 10);
    if (end == p) break;
    if (out->rank == KILN_MAX_RANK || v < 0 || v > (1LL << 40)) {
      snprintf(err, err_len, "%s: shape out of range in header %s", path, header);
      goto fail;
    }
    out->shape[out->rank++] = v;
    numel *= v;
    p = end;
    while (*p == ',' || *p == ' ') ++p;
  }
  out->bytes = (size_t)numel * kiln_dtype_size(out->dtype);
  data_start = ftell(f);
  fseek(f, 0, SEEK_END);
  file_end = ftell(f);
  if (file_end - data_start != (long)out->bytes) {
    snprintf(err, err_len, "%s: %ld data bytes, the header's shape needs %zu", path,
             file_end - data_start, out->bytes);
    goto fail;
  }
  fseek(f, data_start, SEEK_SET);
  out->data = malloc(out->bytes ? out->bytes : 1);
  if (!out->data || fread(out->data, 1, out->bytes, f) != out->bytes) goto truncated;
  free(header);
  fclose(f);
  return 0;
truncated:
  snprintf(err, err_len, "%s: truncated", path);
fail:
  free(header);
  npy_free(out);
  fclose(f);
  return -1;
}

/* Writes a C-order array. Returns 0, or -1 when the file cannot be written or numpy has no
 * such dtype. */
static inline int npy_write(const char* path, int32_t dtype, int32_t rank, const int64_t* shape,
                            const void* data, size_t bytes) {
  char header[256];
  char dims[160] = "";
  int i, n;
  size_t len;
  FILE* f;
  if (!npy_descr(dtype)) return -1;
  for (i = 0; i < rank; ++i) {
    size_t used = strlen(dims);
    snprintf(dims + used, sizeof dims - used, "%lld,%s", (long long)shape[i],
             rank > 1 && i + 1 < rank ? " " : "");
  }
  if (rank > 1) dims[strlen(dims) - 1] = '\0'; /* (2, 3) not (2, 3,) */
  n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
               npy_descr(dtype), dims);
  len = (size_t)n;
  while ((10 + len + 1) % 64 != 0) header[len++] = ' ';
  header[len++] = '\n';
  f = fopen(path, "wb");
  if (!f) return -1;
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fputc((int)(len & 0xff), f);
  fputc((int)(len >> 8), f);
  fwrite(header, 1, len, f);
  fwrite(data, 1, bytes, f);
  return fclose(f) == 0 ? 0 : -1;
}

#endif /* KILN_EXAMPLES_NPY_H_ */
