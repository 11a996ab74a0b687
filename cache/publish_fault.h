// Test-only fault injection for the cache's writers (publish, index, gc).
//
// Before each file-system step that changes the cache (create a directory, take a lock, create,
// write, fsync or close a file, fsync a directory, rename, remove) the cache calls the installed
// hook with a short description of the step ("create stage/weights.bin", "rename stage -> key").
// The hook returns 0 to let the step run, or an errno value to make the step fail as if the
// system call had returned it (ENOSPC: disk full). A hook may also never return (raise(SIGKILL))
// to simulate a crash at that point. No hook is installed by default; nothing reads the
// environment. Not thread-safe: install it before the code under test runs.
#pragma once

#include <functional>
#include <string_view>

namespace kiln::cache {

using PublishFaultHook = std::function<int(std::string_view step)>;

// Installs `hook` for this process; an empty function removes it.
void set_publish_fault_hook(PublishFaultHook hook);

// Runs the hook for `step`; 0 when no hook is installed.
int publish_fault_point(std::string_view step);

}  // namespace kiln::cache
