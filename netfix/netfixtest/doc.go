// Package netfixtest holds hand-written fakes of the OS seams netfix acts
// through (NIC, WireGuard), for tests of netfix and of its callers.
//
// The fakes keep state like the real thing, log every call in order so that
// a test can assert what was asked of the system, and can be told to fail
// or to misbehave (accept a change and not apply it) the way real drivers
// and kernels do. They never touch the system.
package netfixtest
