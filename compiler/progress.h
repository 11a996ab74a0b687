// Progress of counted compiler work (kernels and GEMMs autotuned, NVRTC compiles per target):
// "autotune kernels [#######.............] 12/40  ETA 8 s  <detail>". On a terminal the bar is
// redrawn in place on stderr; otherwise (a CI log, a pipe), or when an application registered
// its own "kiln" logger, each step is one plain log line with its count and ETA. Silent when the
// compiler's log is quieter than info (`kiln -q`).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace kiln::compiler {

class Progress {
 public:
  Progress(std::string what, int total);
  ~Progress();  // ends the in-place line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // One more item done; `detail` says which (and how it went). log_line false: only the bar
  // moves (no plain line for items that need no record, e.g. tuning-database hits).
  void step(std::string_view detail, bool log_line = true) { update(done_ + 1, detail, log_line); }
  // `done` items done in all (for work counted in units other than calls, e.g. tenths of bytes).
  void update(int done, std::string_view detail, bool log_line = true);
  int done() const { return done_; }

  // "12/40  ETA 8 s" (or "40/40  3.2 s" when done): the count and the estimate from the mean
  // time per item so far.
  static std::string status_text(int done, int total, double elapsed_s);

 private:
  std::string what_;
  int total_ = 0;
  int done_ = 0;
  bool in_place_ = false;  // redrawing a bar on a terminal
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln::compiler
