#!/bin/sh
# Fails when libkiln_runtime.so exports a symbol that is not part of the public API, naming each
# one. The public API is the C API (kiln/runtime.h: kiln_* functions) and the KILN_API classes and
# functions of runtime/include/kiln/*.h (with their typeinfo and vtables, should they get any);
# everything else is compiled with hidden visibility. Also fails when nm finds no symbol at all.
# Usage: check_runtime_symbols.sh LIBRARY
lib="$1"
if [ -z "$lib" ] || [ ! -e "$lib" ]; then
  echo "missing: ${lib:-(no library given)}"
  exit 1
fi

# The public C++ classes and free functions (namespace kiln). Add to these lists when the public
# headers grow.
classes='Model|Executor|Generator|Tensor|TensorView|TensorInfo'
functions='cuda_device_available|weights_upload_name|cuda_graph_mode_name|cuda_graph_mode_from_name'
functions="$functions|cuda_graph_mode_valid|decode_mode|mixed_mode|has_full_cudagraphs"
functions="$functions|has_piecewise_cudagraphs|separate_routine"
allowed="^kiln_[a-z0-9_]+\$"
allowed="$allowed|^kiln::($classes)::~?[A-Za-z_][A-Za-z0-9_]*(\\[abi:cxx11\\])?\\("
allowed="$allowed|^kiln::($functions)\\("
allowed="$allowed|^(typeinfo|typeinfo name|vtable|VTT) for kiln::($classes)\$"

# Mangled names have no spaces: take the name column, then demangle.
mangled=$(nm -D --defined-only "$lib") || { echo "nm failed on $lib"; exit 1; }
symbols=$(printf '%s\n' "$mangled" | awk 'NF >= 3 {print $3}' | c++filt | sort -u)
count=$(printf '%s\n' "$symbols" | grep -c .)
if [ "$count" -eq 0 ]; then
  echo "$lib: nm found no exported symbols"
  exit 1
fi
bad=$(printf '%s\n' "$symbols" | grep -vE "$allowed" || true)
if [ -n "$bad" ]; then
  echo "$lib exports $(printf '%s\n' "$bad" | grep -c .) symbols outside the public API:"
  printf '%s\n' "$bad"
  exit 1
fi
echo "$lib: $count exported symbols, all public API"
