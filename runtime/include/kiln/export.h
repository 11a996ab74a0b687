/* kiln/export.h — KILN_API marks what libkiln_runtime.so exports: the C API (kiln/runtime.h) and
 * the public C++ API (kiln/{model,executor,tensor,graph_mode}.h). The runtime is compiled with
 * hidden visibility, so everything else stays inside the library (tests/runtime/
 * check_runtime_symbols.sh checks the exported list). Valid C and C++. */
#ifndef KILN_EXPORT_H_
#define KILN_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#endif /* KILN_EXPORT_H_ */
