// Asserting on kiln::Status errors: the code, and that the message names what is wrong.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "cache/status.h"

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

}  // namespace kiln::runtime::testing
