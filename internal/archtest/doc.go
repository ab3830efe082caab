// Package archtest holds the tests that keep edgeheal's layout what
// docs/development.md says it is: which package may import
// which, what the daemon links, that no code of ours lays out a kernel
// struct (imports unsafe), and how long a production function or file
// may grow. It has no code of its own.
package archtest
