// status_guard: runs a function that returns a Status or Result and turns any exception it
// throws into an error value (the C++ API's methods never throw): bad_alloc → resource_exhausted,
// anything else → internal_error, each naming `what`.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "cache/status.h"

namespace kiln::runtime {

template <typename F>
auto status_guard(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return resource_exhausted(std::string("out of host memory in ") + what);
  } catch (const std::exception& e) {
    return internal_error(std::string(what) + ": " + e.what());
  } catch (...) {
    return internal_error(std::string(what) + ": an unknown exception");
  }
}

}  // namespace kiln::runtime
