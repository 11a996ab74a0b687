#include "compiler/autotune/tune_session.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/log.h"
#include "kiln/model.h"
#include "runtime/cuda_check.h"

namespace kiln::compiler {

Result<std::string> tune_device_arch() {
  if (!cuda_device_available(nullptr)) return failed_precondition("no CUDA device");
  int dev = 0;
  KILN_CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  return runtime::device_arch(dev);
}

bool autotune_times_gemms(const AutotuneOptions& options, const std::vector<std::string>& targets) {
  if (options.mode == AutotuneMode::kOff || targets.size() != 1) return false;
  auto arch = tune_device_arch();
  return arch.ok() && *arch == targets[0];
}

Result<TuneSession> TuneSession::open(const AutotuneOptions& options,
                                      const std::vector<std::string>& targets,
                                      std::string_view what) {
  TuneSession s;
  s.options_ = &options;
  s.start_ = std::chrono::steady_clock::now();
  s.what_ = what;
  s.arch_ = targets.at(0);
  auto device_arch = tune_device_arch();
  if (!device_arch.ok()) {
    s.skipped_ = device_arch.status().message();
  } else if (std::find(targets.begin(), targets.end(), *device_arch) == targets.end()) {
    s.skipped_ = targets.size() == 1
                     ? fmt::format("the GPU is {}, the target {}", *device_arch, targets[0])
                     : fmt::format("the GPU is {}, not a target", *device_arch);
  } else {
    s.arch_ = *device_arch;
  }
  if (!s.gpu() && options.mode == AutotuneMode::kOn)
    return failed_precondition(
        fmt::format("autotune: on, but cannot time {}: {}", what, s.skipped_));
  if (!options.tuning_db.empty()) {
    KILN_ASSIGN_OR_RETURN(s.db_, TuningDb::load(options.tuning_db));
    logger().debug("kiln: autotune: {}: tuning database {} read, {} entries", what,
                   options.tuning_db.string(), s.db_.size());
  }
  s.db_size_at_open_ = s.db_.size();
  return s;
}

double TuneSession::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool TuneSession::budget_spent() const { return elapsed() > options_->budget_s; }

bool TuneSession::over_budget(std::string_view rest) {
  if (!budget_spent()) return false;
  if (!budget_noted_)
    logger().info("kiln: autotune budget of {:.0f} s spent; the remaining {}", options_->budget_s,
                  rest);
  budget_noted_ = true;
  return true;
}

Status TuneSession::close(double* seconds) {
  *seconds = elapsed();
  if (options_->tuning_db.empty() || db_.size() == db_size_at_open_) return Status::ok_status();
  KILN_RETURN_IF_ERROR(db_.save(options_->tuning_db));
  logger().debug("kiln: autotune: {}: tuning database {} written, {} entries ({} new)", what_,
                 options_->tuning_db.string(), db_.size(), db_.size() - db_size_at_open_);
  return Status::ok_status();
}

}  // namespace kiln::compiler
