// Asserting on errors — kiln::Status, and the C API's kiln_status with kiln_last_error(): the
// code, and that the message names what is wrong.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "cache/status.h"
#include "kiln/runtime.h"

namespace kiln::runtime::testing {

inline ::testing::AssertionResult is_error(const Status& s, StatusCode code,
                                           std::initializer_list<std::string> needles) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error, got OK";
  if (s.code() != code)
    return ::testing::AssertionFailure()
           << "expected " << status_code_name(code) << ", got " << s.to_string();
  for (const auto& n : needles)
    if (s.message().find(n) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << n << "': " << s.to_string();
  return ::testing::AssertionSuccess() << s.to_string();
}

// A C API call returned `want` and this thread's kiln_last_error() contains `needle`.
inline ::testing::AssertionResult c_api_fails(kiln_status got, kiln_status want,
                                              const std::string& needle) {
  const std::string message = kiln_last_error();
  if (got != want)
    return ::testing::AssertionFailure() << "expected " << kiln_status_name(want) << ", got "
                                         << kiln_status_name(got) << ": " << message;
  if (message.find(needle) == std::string::npos)
    return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << message;
  return ::testing::AssertionSuccess() << message;
}

}  // namespace kiln::runtime::testing
