// Running a backend-test folder: compile each of its bindings (conformance.h), load the artifact,
// run the data sets on the GPU and compare with the stored outputs at the end-to-end tolerance
// of the precision; or, on the CPU, run the reference interpreter on a binding's graph instead.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/ir.h"
#include "tools/conformance.h"

namespace kiln::tools {

enum class Verdict {
  kPassed,
  kFailed,       // an output outside tolerance, or loading / running failed
  kNotCompiled,  // the folder could not be read or its binding did not compile
  kExcluded,     // named in --exclude (the caller decides; conformance_run_folder never says)
  kCompiled,     // compile only: compiled, nothing run
};
std::string_view verdict_name(Verdict v);  // "passed", "failed", "not compiled", ...

struct SetResult {
  std::string set;  // "test_data_set_0"
  int64_t size = 1;
  Verdict verdict = Verdict::kPassed;
  // passed: the largest error; failed: the first failing output's summary or the error;
  // not compiled: the first line of the compile error.
  std::string detail;
  std::vector<OutputCheck> outputs;
};

struct FolderResult {
  std::string name;
  std::filesystem::path dir;
  Verdict verdict = Verdict::kPassed;
  std::string detail;  // the first failing set's detail, the error line, or the exclusion reason
  int compiles = 0;    // bindings compiled
  std::vector<SetResult> sets;
  double seconds = 0;
};

// The folder's verdict from its sets': failed over not compiled over compiled over passed.
void conformance_settle(FolderResult& r);

// Compiles every binding of the folder `dir` into `cache_root` and, unless opts.compile_only,
// loads each artifact and runs its data sets on the GPU (the caller checks that there is one).
FolderResult conformance_run_folder(const std::filesystem::path& dir,
                                    const ConformanceOptions& opts,
                                    const std::filesystem::path& cache_root);

// CPU: the reference interpreter on `graph` (the front end's graph for the binding's config:
// compiler::import_canonical) for each of the binding's data sets, against the stored outputs.
std::vector<SetResult> conformance_reference_check(const ConformanceFolder& f,
                                                   const ConformanceBinding& b,
                                                   const ir::Graph& graph, compiler::Tolerance tol);

}  // namespace kiln::tools
