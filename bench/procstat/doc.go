// Package procstat reads the CPU time a process has used from Linux's /proc/<pid>/stat, so a
// benchmark can charge a child process (a gateway, a reverse proxy) the CPU seconds its
// requests cost. It holds no state; every call reads the file afresh.
package procstat
